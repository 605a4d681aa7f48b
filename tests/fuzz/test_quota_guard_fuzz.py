"""The scheduling core with quotas, reclaim, priority preemption and the starvation
guard on, under random sequences of hostile events (issue 10 and issue 12's additions).

As tests/fuzz/test_core_fuzz.py, plus: ElasticQuota events with hostile min and max
(huge, negative, malformed, a second quota in a namespace), hostile pods spread over
the quota namespaces at several priorities, preemption decisions carried out (victims
deleted) or refused, and the guard reserving room for gangs that wait past it.

Invariants:
- no exception escapes the core;
- no decision of the scheduler charges a device beyond 1000 milli or a node beyond its
  allocatable, counting what is bound or being bound (the guard's reservations and a
  preemptor's nominated hold are holds on room, not assignments: they are charged
  beyond what is free on purpose, docs/quotas.md);
- no decision leaves the well-formed gang partly bound;
- once the hostile pods and quotas are gone, the well-formed gang binds whole.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cache.cluster import EventType, Reservation
from cache.resources import CPU, MEMORY, MILLI_PER_GPU, PODS
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.queue import ClusterChange
from scheduler.planner.result import Plan
from tests.cache.test_quota import quota_obj
from tests.factories import node_obj, pod_obj
from tests.fuzz.hostile import (
    NOT_OBJECTS,
    hostile_node,
    hostile_podgroup,
    hostile_quota,
    hostile_tenant_pod,
    tenant_gang,
    tenant_quota,
)
from tests.fuzz.test_core_fuzz import (
    EVENTS,
    FUZZ,
    GANG_SIZE,
    WELL_FORMED_GANG,
    WELL_FORMED_NODES,
    Run,
    well_formed_bound,
    well_formed_gang,
)

GUARD_SECONDS = 5.0
HOLDS = (Reservation.RESERVED, Reservation.NOMINATED)

OPERATIONS = st.one_of(
    st.tuples(st.just("pod"), EVENTS, hostile_tenant_pod()),
    st.tuples(st.just("node"), EVENTS, hostile_node()),
    st.tuples(st.just("podgroup"), EVENTS, hostile_podgroup()),
    st.tuples(st.just("quota"), EVENTS, hostile_quota()),
    st.tuples(st.just("quota"), EVENTS, NOT_OBJECTS),
    st.tuples(st.just("quota"), EVENTS, tenant_quota()),
    st.tuples(st.just("tenant_gang"), EVENTS, tenant_gang()),
    st.tuples(st.just("tenant_gang"), EVENTS, tenant_gang()),
    st.tuples(st.just("schedule"), st.floats(0, 30), st.none()),
    # Several cycles a while apart: gangs wait past the guard, victims are evicted.
    st.tuples(st.just("cycles"), st.integers(1, 6), st.floats(1, 15)),
    st.tuples(st.just("bound"), st.integers(0, 3), st.none()),
    st.tuples(st.just("bind_failed"), st.integers(0, 3), st.none()),
    st.tuples(st.just("unknown"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("evict"), st.integers(0, 3), st.none()),
    st.tuples(st.just("refuse"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("well_formed"), st.integers(0, GANG_SIZE - 1), st.none()),
    st.tuples(st.just("relist_quotas"), st.none(), st.lists(hostile_quota(), max_size=3)),
    # A relist (after 410 Gone) of pods or nodes while holds and decisions are out.
    st.tuples(st.just("relist_pods"), st.none(), st.lists(hostile_tenant_pod(), max_size=3)),
    st.tuples(st.just("relist_nodes"), st.none(), st.lists(hostile_node(), max_size=2)),
)
DECISIONS = frozenset({"schedule", "cycles", "bound", "bind_failed", "unknown", "evict", "refuse"})


def guarded_core() -> SchedulingCore:
    core = SchedulingCore(build_profile())
    core.starvation.guard_seconds = GUARD_SECONDS
    core.preempter.enabled = True
    return core


@dataclass
class QuotaRun(Run):
    def __post_init__(self) -> None:
        self.core = guarded_core()

    def step(self, operation: tuple[str, Any, Any]) -> None:
        kind, arg, obj = operation
        core = self.core
        if kind == "quota":
            core.apply_elasticquota(arg, obj, self.now)
        elif kind == "relist_quotas":
            reconciliation = core.relist_elasticquotas()
            reconciliation.add(obj, self.now)
            reconciliation.finish(self.now)
        elif kind == "cycles":
            for _ in range(arg):
                self.now += obj
                self.schedule()
                self.evict(0)
                self.settle(0, ok=True)
        elif kind == "tenant_gang":
            for pod in obj:
                core.apply_pod(arg, pod, self.now)
        elif kind == "evict":
            self.evict(arg)
        elif kind == "refuse":
            decisions = sorted(core.preempter.decisions.values(), key=lambda d: d.preemptor)
            if decisions:
                decision = decisions[arg % len(decisions)]
                victim = decision.victims[0].key if obj and decision.victims else None
                core.preempter.refuse(decision.preemptor, victim, "fuzz: refused", self.now)
        else:
            super().step(operation)

    def evict(self, index: int) -> None:
        """The adapter carries out a preemption decision: every victim pod is deleted."""
        decisions = sorted(self.core.preempter.decisions.values(), key=lambda d: d.preemptor)
        if not decisions:
            return
        decision = decisions[index % len(decisions)]
        for victim in decision.victims:
            for pod in victim.pods:
                gone = {"metadata": {"uid": pod.uid, "namespace": pod.namespace, "name": pod.name}}
                self.core.apply_pod(EventType.DELETED, gone, self.now)


def overcommitted(run: Run) -> set[tuple[str, str]]:
    """As test_core_fuzz.overcommitted, with the room held (reserved, nominated) given
    back: a hold may exceed what is free now, by design."""
    cache = run.core.cache
    held_gpu: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    held_requests: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in cache.pods():
        if cache.reservation(pod.uid) not in HOLDS:
            continue
        placement = cache.assumed_placement(pod.uid)
        if placement is None:
            continue
        for index, milli in placement.shares:
            held_gpu[placement.node][index] += milli
        for resource, amount in pod.requests.items():
            held_requests[placement.node][resource] += amount
    found: set[tuple[str, str]] = set()
    for node in cache.nodes():
        if node.name in run.prebound:
            continue
        for index, free in enumerate(node.gpu_free):
            assert free <= MILLI_PER_GPU, (node.name, node.gpu_free)
            if free + held_gpu[node.name][index] < 0:
                found.add((node.name, f"gpu {index}"))
        for resource in (CPU, MEMORY, PODS):
            used = node.requested.get(resource, 0) - held_requests[node.name][resource]
            if used > node.allocatable.get(resource, 0):
                found.add((node.name, resource))
    return found


def partial(run: Run) -> bool:
    return 0 < well_formed_bound(run.core) < GANG_SIZE


def calm_down(run: QuotaRun) -> None:
    """Remove every hostile pod and quota, settle binds and decisions in flight, then
    schedule until idle with time moving past every backoff and guard period."""
    core = run.core
    well_formed = {pod["metadata"]["uid"]: pod for pod in well_formed_gang()}
    for pod in list(core.cache.pods()):
        if pod.uid not in well_formed:
            gone = {"metadata": {"uid": pod.uid, "namespace": pod.namespace, "name": pod.name}}
            core.apply_pod(EventType.DELETED, gone, run.now)
    reconciliation = core.relist_elasticquotas()
    reconciliation.finish(run.now)
    while run.in_flight:
        run.settle(0, ok=True)
    for uid, pod in well_formed.items():  # evicted as a victim: its job recreates it
        if core.cache.pod(uid) is None:
            core.apply_pod(EventType.ADDED, pod, run.now)
    for _ in range(6):
        run.now += 400.0
        core.queue.cluster_changed(run.now, ClusterChange.NODE_ADDED)
        before = overcommitted(run)
        while (attempt := core.schedule_next(run.now)) is not None:
            if isinstance(attempt.result, Plan):
                for placement in attempt.result.placements:
                    core.bound(placement)
            elif attempt.preemption is not None:
                run.evict(0)
        assert overcommitted(run) <= before


@FUZZ
@given(
    st.sampled_from(["pending", "running", "borrowed"]),
    st.booleans(),
    st.lists(OPERATIONS, min_size=5, max_size=50),
)
def test_hostile_quotas_with_reclaim_and_the_guard_never_escape_and_the_gang_binds(
    start: str, guarantees: bool, operations: list[tuple[str, Any, Any]]
) -> None:
    run = QuotaRun()
    if guarantees:  # the cluster's 8 GPUs guaranteed to two teams; team-b only borrows
        for namespace, least in (("default", 4), ("team-a", 4), ("team-b", 0)):
            quota = quota_obj(namespace, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": least})
            run.core.apply_elasticquota(EventType.ADDED, quota, 0.0)
    for name in WELL_FORMED_NODES:
        run.core.apply_node(EventType.ADDED, node_obj(name, gpus=4), 0.0)
    if start == "borrowed":  # team-b holds the whole cluster: the gang below reclaims
        for i in range(2):
            borrower = pod_obj(f"tb-{i}", namespace="team-b", gang="tb", min_member=2, gpus=4)
            run.core.apply_pod(EventType.ADDED, borrower, 0.0)
        run.schedule()
        run.settle(0, ok=True)
    for pod in well_formed_gang():
        run.core.apply_pod(EventType.ADDED, pod, 0.0)
    if start == "running":  # a victim for priority preemption from the start
        run.schedule()
        run.settle(0, ok=True)
    for operation in operations:
        before, was_partial = overcommitted(run), partial(run)
        run.step(operation)
        if operation[0] in DECISIONS:
            assert overcommitted(run) <= before, (operation[0], overcommitted(run) - before)
            assert was_partial or not partial(run), (operation[0], well_formed_bound(run.core))
    calm_down(run)
    assert well_formed_bound(run.core) == GANG_SIZE, WELL_FORMED_GANG
