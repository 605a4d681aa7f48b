"""Reservations of the starvation guard (scheduler/sharing/starvation.py, docs/quotas.md "No
starvation"): one per starving gang, none handed to another gang, none overlapping."""

from __future__ import annotations

from cache.cluster import EventType
from scheduler.planner.result import Plan
from tests.factories import pod_obj
from tests.scheduler.test_starvation import core_with, gang, run
from tests.signed import signed

ADDED = EventType.ADDED


def test_every_starving_gang_gets_a_reservation_of_its_own_none_overlapping() -> None:
    # 4 nodes of 8 GPUs, each half used by a running pod; two gangs of 1 x 8 GPUs starve.
    # Each reserves a node of its own, and keeps it while the other is planned.
    core = core_with(4, guard=10.0)
    for i in range(4):
        running = pod_obj(f"r{i}", gpus=4, node_name=f"n{i}", phase="Running")
        core.apply_pod(ADDED, signed(running), 0.0)  # bound by the scheduler: it will leave
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
