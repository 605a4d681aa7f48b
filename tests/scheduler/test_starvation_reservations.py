"""Reservations of the starvation guard (scheduler/starvation.py, docs/quotas.md "No
starvation"): one per starving gang, none handed to another gang, none overlapping, and
held against smaller work whatever its priority."""

from __future__ import annotations

from cache.cluster import EventType
from scheduler.planner import Plan
from tests.factories import pod_obj
from tests.scheduler.test_starvation import core_with, gang, run

ADDED = EventType.ADDED


def test_every_starving_gang_gets_a_reservation_of_its_own_none_overlapping() -> None:
    # 4 nodes of 8 GPUs, each half used by a running pod; two gangs of 1 x 8 GPUs starve.
    # Each reserves a node of its own, and keeps it while the other is planned.
    core = core_with(4, guard=10.0)
    for i in range(4):
        core.apply_pod(ADDED, pod_obj(f"r{i}", gpus=4, node_name=f"n{i}", phase="Running"), 0.0)
    for name in ("aa", "bbb"):
        for pod in gang(name, 1, 8):
            core.apply_pod(ADDED, pod, 0.0)
    run(core, 1.0)
    run(core, 20.0)
    run(core, 21.0)  # one reservation is planned a cycle
    held = core.starvation_reservations()
    assert set(held) == {"default/aa", "default/bbb"}
    assert not held["default/aa"] & held["default/bbb"]
    # A pod leaves the node of one: that gang is placed there, the other keeps its own.
    [node_a] = held["default/aa"]
    core.apply_pod(EventType.DELETED, pod_obj(f"r{node_a[1:]}", node_name=node_a), 30.0)
    placed = [(a.gang.key, a.result) for a in run(core, 100.0)]
    assert [
        (key, {p.node for p in plan.placements}) for key, plan in placed if isinstance(plan, Plan)
    ] == [("default/aa", {node_a})]
    assert core.starvation_reservations() == {"default/bbb": held["default/bbb"]}


def test_a_larger_gang_of_higher_priority_plans_through_a_reservation() -> None:
    # 2 nodes of 8 GPUs with 2 GPUs used on each; "large" (2 x 7 GPUs, priority 0)
    # starves and reserves both. A gang of 2 x 6 GPUs at priority 10 is smaller: held
    # back. One of 2 x 6 + 1 x 2 GPUs (as large as it) at priority 10 is placed through it.
    core = core_with(2, guard=10.0)
    for i in range(2):
        core.apply_pod(ADDED, pod_obj(f"r{i}", gpus=2, node_name=f"n{i}", phase="Running"), 0.0)
    for pod in gang("large", 2, 7):
        core.apply_pod(ADDED, pod, 0.0)
    run(core, 1.0)
    run(core, 20.0)
    assert set(core.starvation_reservations()) == {"default/large"}
    for pod in gang("smaller", 2, 6, priority=10):
        core.apply_pod(ADDED, pod, 21.0)
    [smaller] = [a for a in run(core, 21.0) if a.gang.key == "default/smaller"]
    assert not isinstance(smaller.result, Plan)
    core.apply_pod(EventType.DELETED, pod_obj("smaller-0", uid="uid-default-smaller-0"), 22.0)
    core.apply_pod(EventType.DELETED, pod_obj("smaller-1", uid="uid-default-smaller-1"), 22.0)
    core.apply_pod(EventType.DELETED, pod_obj("r0", node_name="n0"), 22.0)
    bigger = gang("bigger", 3, 6, priority=10)
    bigger[2]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    for pod in bigger:
        core.apply_pod(ADDED, pod, 22.0)
    placed = {a.gang.key for a in run(core, 22.0) if isinstance(a.result, Plan)}
    assert placed == {"default/bigger"}
