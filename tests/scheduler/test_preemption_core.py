"""Priority preemption through the core (scheduler/sharing/preemption.py, issue 12)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import EventType, Reservation
from cache.native_gang import native_podgroup_from_api
from policies.profile import build_profile
from scheduler.cycle.core import Attempt, SchedulingCore
from scheduler.gangs.queue import ClusterChange
from scheduler.planner.result import Plan, Unschedulable
from tests.factories import node_obj, pod_obj
from tests.integrations.controllers import native_podgroup_obj
from tests.signed import TEST_KEY, signed


def core_with(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> SchedulingCore:
    core = SchedulingCore(build_profile())
    core.cache.assignment_key = TEST_KEY  # the running gangs were bound (signed) with it
    core.preempter.enabled = True
    for node in nodes:
        core.apply_node(EventType.ADDED, node, 0.0)
    for pod in pods:
        core.apply_pod(EventType.ADDED, pod, 0.0)
    return core


def members(
    name: str,
    size: int,
    gpus: int,
    priority: int,
    nodes: list[str] | None = None,
    policy: str | None = None,
) -> list[dict[str, Any]]:
    pods = []
    for i in range(size):
        node = nodes[i] if nodes else ""
        pod = pod_obj(
            f"{name}-{i}",
            gang=name,
            min_member=size,
            gpus=gpus,
            priority=priority,
            node_name=node,
            phase="Running" if node else "Pending",
        )
        if policy:
            pod["spec"]["preemptionPolicy"] = policy
        pods.append(signed(pod) if node else pod)
    return pods


def run(core: SchedulingCore, now: float = 1.0) -> list[Attempt]:
    attempts = []
    while (attempt := core.schedule_next(now)) is not None:
        attempts.append(attempt)
    return attempts


def delete(core: SchedulingCore, pods: list[dict[str, Any]], now: float) -> None:
    for pod in pods:
        core.apply_pod(EventType.DELETED, pod, now)


TWO_NODES = [node_obj("n0", gpus=8), node_obj("n1", gpus=8)]


def test_a_higher_priority_gang_evicts_the_cheapest_whole_gang_and_holds_its_room() -> None:
    low = members("low", 2, 4, priority=1, nodes=["n0", "n0"])
    mid = members("mid", 2, 4, priority=5, nodes=["n1", "n1"])
    high = members("high", 2, 4, priority=10)
    core = core_with(TWO_NODES, low + mid + high)
    [attempt] = run(core)
    assert isinstance(attempt.result, Unschedulable)
    decision = attempt.preemption
    assert decision is not None
    assert [v.key for v in decision.victims] == ["default/low"]
    assert {p.name for v in decision.victims for p in v.pods} == {"low-0", "low-1"}
    assert {p.node for p in decision.placements} == {"n0"}
    # The room is held: a gang arriving now is not placed onto it when low leaves.
    for p in decision.placements:
        assert core.cache.reservation(p.pod_uid) == Reservation.NOMINATED
    delete(core, low, 2.0)
    small = members("small", 1, 4, priority=0)
    core.apply_pod(EventType.ADDED, small[0], 2.0)
    placed = {a.gang.key: a.result for a in run(core, 3.0) if isinstance(a.result, Plan)}
    assert "default/small" not in placed
    plan = placed["default/high"]
    assert isinstance(plan, Plan)
    assert {p.node for p in plan.placements} == {"n0"}


def test_while_victims_terminate_no_second_decision_is_made() -> None:
    low = members("low", 2, 4, priority=1, nodes=["n0", "n0"])
    high = members("high", 2, 4, priority=10)
    core = core_with([node_obj("n0", gpus=8)], low + high)
    [first] = run(core)
    assert first.preemption is not None
    core.queue.cluster_changed(2.0, ClusterChange.GANG_CHANGED, "default/high")
    [again] = run(core, 2.0)
    assert isinstance(again.result, Unschedulable)
    assert again.preemption is None  # the victims are still terminating: wait for them
    for p in first.preemption.placements:
        assert core.cache.reservation(p.pod_uid) == Reservation.NOMINATED


def test_never_preempts_when_the_gang_would_still_not_fit() -> None:
    low = members("low", 1, 4, priority=1, nodes=["n0"])
    high = members("high", 3, 8, priority=10)  # 24 GPUs asked, 16 exist
    core = core_with(TWO_NODES, low + high)
    [attempt] = run(core)
    assert isinstance(attempt.result, Unschedulable)
    assert attempt.preemption is None
    assert not any(core.cache.reservation(p["metadata"]["uid"]) for p in high)


def test_equal_priority_and_preemption_policy_never_evict_nothing() -> None:
    low = members("low", 2, 4, priority=10, nodes=["n0", "n0"])
    same = members("same", 2, 4, priority=10)
    core = core_with([node_obj("n0", gpus=8)], low + same)
    assert [a.preemption for a in run(core)] == [None]
    polite = members("polite", 2, 4, priority=50, policy="Never")
    core = core_with([node_obj("n0", gpus=8)], members("low", 2, 4, 1, ["n0", "n0"]) + polite)
    assert [a.preemption for a in run(core)] == [None]


def test_a_refused_eviction_releases_the_hold_and_spares_the_victim() -> None:
    low = members("low", 2, 4, priority=1, nodes=["n0", "n0"])
    high = members("high", 2, 4, priority=10)
    core = core_with([node_obj("n0", gpus=8)], low + high)
    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None
    core.preempter.refuse("default/high", "default/low", "PDB refused", 1.0)
    assert all(core.cache.reservation(p.pod_uid) is None for p in decision.placements)
    assert core.preempter.candidates(attempt.gang, 2.0) == {}
    assert "default/low" in core.preempter.candidates(attempt.gang, 100.0)


# --- properties -----------------------------------------------------------------------
running = st.lists(
    st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4]), st.integers(0, 9)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=40, deadline=None)
@given(
    running=running,
    arrivals=st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4, 8]), st.integers(0, 9)),
        min_size=1,
        max_size=4,
    ),
)
def test_replayed_timelines_keep_whole_gangs_fitting_preemptors_and_no_cycles(
    running: list[tuple[int, int, int]], arrivals: list[tuple[int, int, int]]
) -> None:
    """Gangs run, then higher ones arrive; every decision is carried out (victims
    deleted, then recreated pending as their controller would). Properties: victims
    are whole gangs; the preemptor is placed once its victims are gone; a gang never
    evicts one of equal or higher priority, so no A-evicts-B-evicts-A."""
    nodes = [node_obj(f"n{i}", gpus=8) for i in range(3)]
    core = core_with(nodes, [])
    objects: dict[str, list[dict[str, Any]]] = {}
    priority: dict[str, int] = {}
    evicted_by: dict[str, set[str]] = {}
    now = 1.0
    for i, (size, gpus, prio) in enumerate(running):
        name = f"r{i}"
        objects[name] = members(name, size, gpus, prio)
        priority[f"default/{name}"] = prio
        for pod in objects[name]:
            core.apply_pod(EventType.ADDED, pod, now)
        bind_all(core, run(core, now), now)
    for j, (size, gpus, prio) in enumerate(arrivals):
        name = f"a{j}"
        objects[name] = members(name, size, gpus, prio)
        priority[f"default/{name}"] = prio
        for pod in objects[name]:
            core.apply_pod(EventType.ADDED, pod, now)
        for _ in range(4):
            now += 1.0
            attempts = run(core, now)
            bind_all(core, attempts, now)
            for attempt in attempts:
                decision = attempt.preemption
                if decision is None:
                    continue
                preemptor = decision.preemptor
                for victim in decision.victims:
                    gang_pods = [
                        p
                        for p in core.cache.pods()
                        if p.gang_key == victim.key and p.consumes_resources
                    ]
                    assert {p.uid for p in victim.pods} == {p.uid for p in gang_pods}
                    assert victim.priority < priority[preemptor]
                    assert preemptor not in evicted_by.get(victim.key, set())
                    evicted_by.setdefault(preemptor, set()).add(victim.key)
                    victim_name = victim.key.split("/")[1]
                    delete(core, objects[victim_name], now)
                    for pod in objects[victim_name]:  # recreated pending
                        pod["metadata"]["uid"] += "x"
                        pod["spec"].pop("nodeName", None)
                        pod["status"]["phase"] = "Pending"
                        core.apply_pod(EventType.ADDED, pod, now)
                now += 1.0
                after = run(core, now)
                bind_all(core, after, now)
                placed = {a.gang.key for a in after if isinstance(a.result, Plan)}
                assert preemptor in placed, "victims gone, yet the preemptor waits"


def bind_all(core: SchedulingCore, attempts: list[Attempt], now: float) -> None:
    for attempt in attempts:
        if isinstance(attempt.result, Plan):
            for placement in attempt.result.placements:
                core.bound(placement)
    core.refresh(now)


def test_a_preemptor_deleted_while_waiting_leaves_no_decision_behind() -> None:
    low = members("low", 2, 4, priority=1, nodes=["n0", "n0"])
    high = members("high", 2, 4, priority=10)
    other = members("other", 1, 4, priority=10)
    core = core_with([node_obj("n0", gpus=8)], low + high)
    [attempt] = run(core)
    assert attempt.preemption is not None
    delete(core, high, 2.0)
    assert all(core.cache.reservation(p.pod_uid) is None for p in attempt.preemption.placements)
    core.apply_pod(EventType.ADDED, other[0], 2.0)
    [again] = run(core, 3.0)
    # low is no longer taken by the deleted gang's decision: it may be a victim again.
    assert again.preemption is not None
    assert list(core.preempter.decisions) == ["default/other"]


RACK = "topology.kubernetes.io/rack"


def test_a_rack_required_gang_evicts_within_the_one_rack_that_then_holds_it() -> None:
    # Rack r1: one 8-GPU node full of eight 1-GPU low gangs. Racks r2..r5: a 6-GPU node
    # each with one 1-GPU low gang: 20 GPUs free in all, 5 at most in one rack. The
    # 8-GPU gang requiring one rack fits only in r1, once all eight gangs there go; a
    # search over every rack's gangs at once spends its budget on sets that free
    # room nowhere useful (thousands of them before the one that works).
    nodes = [node_obj("a", gpus=8, labels={RACK: "r1"})]
    nodes += [node_obj(f"b{i}", gpus=6, labels={RACK: f"r{i + 2}"}) for i in range(4)]
    pods: list[dict[str, Any]] = []
    for i in range(8):
        pods += members(f"low-a{i}", 1, 1, priority=1, nodes=["a"])
    for i in range(4):
        pods += members(f"low-b{i}", 1, 1, priority=1, nodes=[f"b{i}"])
    high = members("high", 8, 1, priority=10)
    core = core_with(nodes, pods + high)
    group = {
        "metadata": {"name": "high", "namespace": "default"},
        "spec": {"minMember": 8, "topology": {"requiredKey": RACK}},
    }
    core.apply_podgroup(EventType.ADDED, group, 0.0)
    [attempt] = run(core)
    assert isinstance(attempt.result, Unschedulable)
    assert f"in one {RACK}" in attempt.result.message
    decision = attempt.preemption
    assert decision is not None
    assert sorted(v.key for v in decision.victims) == [f"default/low-a{i}" for i in range(8)]
    assert {p.node for p in decision.placements} == {"a"}


def test_a_native_podgroups_priority_is_its_gangs_as_preemptor_and_as_victim() -> None:
    # Every pod has priority 0; the native PodGroups say 100 and 50: "high" preempts
    # "low" only by its group's priority, and "low" is a victim at its group's 50.
    low = members("low", 2, 4, priority=0, nodes=["n0", "n0"])
    for pod in low:
        pod["spec"]["schedulingGroup"] = {"podGroupName": "low"}
    high = members("high", 2, 4, priority=0)
    for pod in high:
        pod["spec"]["schedulingGroup"] = {"podGroupName": "high"}
    core = core_with([node_obj("n0", gpus=8)], low + high)
    for name, priority in (("high", 100), ("low", 50)):
        group = native_podgroup_obj(name, 2)
        group["spec"]["priority"] = priority
        core.apply_gang_group(native_podgroup_from_api, EventType.ADDED, group, 0.0)
    [attempt] = run(core)
    assert attempt.gang.priority == 100
    decision = attempt.preemption
    assert decision is not None and [v.key for v in decision.victims] == ["default/low"]
    assert decision.victims[0].priority == 50
