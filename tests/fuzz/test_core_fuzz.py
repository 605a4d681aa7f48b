"""The whole scheduling core under random sequences of hostile events (issue 10).

Each example builds a SchedulingCore as the simulator does, with two well-formed GPU
nodes and one well-formed gang, then applies a random sequence of pod, node and
PodGroup ADDED/MODIFIED/DELETED events carrying hostile values (tests/fuzz/hostile.py),
interleaved with scheduling cycles, binds confirmed or failed, and reservation expiry.

Invariants:
- no exception escapes the core, whatever it is fed;
- no device ever has more than 1000 milli free, and no decision of the scheduler (a plan,
  a bind confirmed or failed, an expiry) charges a GPU device beyond 1000 milli or a node
  beyond its allocatable (on nodes no pod arrived bound to: those are charged as they
  are, as on a real node; a node update that shrinks a node under its pods is the
  cluster's doing, not a decision);
- once the hostile pods are gone, the well-formed gang binds whole (capacity allows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.cluster import EventType
from cache.resources import CPU, MEMORY, MILLI_PER_GPU, PODS
from policies.profile import build_profile
from scheduler.cycle.core import Attempt, SchedulingCore
from scheduler.gangs.queue import ClusterChange
from scheduler.planner.result import Plan
from tests.factories import node_obj, pod_obj
from tests.fuzz.hostile import (
    NOT_OBJECTS,
    hostile_node,
    hostile_pod,
    hostile_podgroup,
)

EVENTS = st.sampled_from([EventType.ADDED, EventType.MODIFIED, EventType.DELETED])
WELL_FORMED_NODES = ["good-node-0", "good-node-1"]
WELL_FORMED_GANG = "well-formed-gang"
GANG_SIZE = 4


def well_formed_gang() -> list[dict[str, Any]]:
    return [
        pod_obj(f"{WELL_FORMED_GANG}-{i}", gang=WELL_FORMED_GANG, min_member=GANG_SIZE, gpus=1)
        for i in range(GANG_SIZE)
    ]


OPERATIONS = st.one_of(
    st.tuples(st.just("pod"), EVENTS, hostile_pod()),
    st.tuples(st.just("node"), EVENTS, hostile_node()),
    st.tuples(st.just("podgroup"), EVENTS, hostile_podgroup()),
    st.tuples(st.sampled_from(["pod", "node", "podgroup"]), EVENTS, NOT_OBJECTS),
    st.tuples(st.just("schedule"), st.floats(0, 30), st.none()),
    st.tuples(st.just("bound"), st.integers(0, 3), st.none()),
    st.tuples(st.just("bind_failed"), st.integers(0, 3), st.none()),
    st.tuples(st.just("unknown"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("well_formed"), st.integers(0, GANG_SIZE - 1), st.none()),
    # A relist (after 410 Gone): the list holds the well-formed objects and these.
    st.tuples(st.just("relist_pods"), st.none(), st.lists(hostile_pod(), max_size=4)),
    st.tuples(st.just("relist_nodes"), st.none(), st.lists(hostile_node(), max_size=3)),
    st.tuples(st.just("relist_podgroups"), st.none(), st.lists(hostile_podgroup(), max_size=2)),
)


@dataclass
class Run:
    """A core fed by the fuzzer, with the binds it has not settled yet."""

    core: SchedulingCore = field(default_factory=lambda: SchedulingCore(build_profile()))
    now: float = 0.0
    in_flight: list[Attempt] = field(default_factory=list)
    # Nodes a pod arrived bound to: their charges are whatever the pods say.
    prebound: set[str] = field(default_factory=set)

    def apply(self, kind: str, event: EventType, obj: Any) -> None:
        if kind == "pod":
            self.note_prebound(obj)
            self.core.apply_pod(event, obj, self.now)
        elif kind == "node":
            self.core.apply_node(event, obj, self.now)
        else:
            self.core.apply_podgroup(event, obj, self.now)

    def note_prebound(self, obj: Any) -> None:
        spec = obj.get("spec") if isinstance(obj, dict) else None
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        if isinstance(node, str):
            self.prebound.add(node)

    def schedule(self) -> None:
        attempt = self.core.schedule_next(self.now)
        if attempt is not None and isinstance(attempt.result, Plan):
            self.in_flight.append(attempt)

    def settle(self, index: int, ok: bool) -> None:
        if not self.in_flight:
            return
        attempt = self.in_flight.pop(index % len(self.in_flight))
        assert isinstance(attempt.result, Plan)
        placements = attempt.result.placements
        # A bind is confirmed only while its reservation holds (a reservation ends on
        # the API's word alone: the binder never confirms one that was released).
        if ok and all(self.core.cache.is_assumed(p.pod_uid) for p in placements):
            for placement in placements:
                self.core.bound(placement)
        else:
            self.core.bind_failed(attempt.gang.key, placements, self.now, "fuzz: bind failed")

    def unknown(self, index: int, landed: bool) -> None:
        """A gang's binds ended with no known outcome; a re-read of each pod then shows
        it on its planned node (`landed`) or not bound at all."""
        if not self.in_flight:
            return
        attempt = self.in_flight.pop(index % len(self.in_flight))
        assert isinstance(attempt.result, Plan)
        placements = attempt.result.placements
        self.core.bind_unknown(placements)
        for placement in placements:
            if landed and self.core.cache.is_assumed(placement.pod_uid):
                self.core.bound(placement)
            else:
                self.core.bind_resolved(placement, False, self.now)

    def step(self, operation: tuple[str, Any, Any]) -> None:
        kind, arg, obj = operation
        if kind in ("pod", "node", "podgroup"):
            self.apply(kind, arg, obj)
        elif kind == "schedule":
            self.now += arg
            self.schedule()
        elif kind in ("bound", "bind_failed"):
            self.settle(arg, kind == "bound")
        elif kind == "relist_pods":
            for pod in obj:
                self.note_prebound(pod)
            self.core.replace_pods([*obj, *well_formed_gang()], self.now)
        elif kind == "relist_nodes":
            good = [node_obj(name, gpus=4) for name in WELL_FORMED_NODES]
            self.core.replace_nodes([*obj, *good], self.now)
        elif kind == "relist_podgroups":
            self.core.replace_podgroups(obj, self.now)
        elif kind == "unknown":
            self.unknown(arg, landed=bool(obj))
        else:
            self.core.apply_pod(EventType.MODIFIED, well_formed_gang()[arg], self.now)


def overcommitted(run: Run) -> set[tuple[str, str]]:
    """(node, device or resource) charged beyond what the node offers, on nodes no pod
    arrived bound to."""
    found: set[tuple[str, str]] = set()
    for node in run.core.cache.nodes():
        if node.name in run.prebound:
            continue
        for index, free in enumerate(node.gpu_free):
            assert free <= MILLI_PER_GPU, (node.name, node.gpu_free)
            if free < 0:
                found.add((node.name, f"gpu {index}"))
        for resource in (CPU, MEMORY, PODS):
            if node.requested.get(resource, 0) > node.allocatable.get(resource, 0):
                found.add((node.name, resource))
    return found


# What the scheduler itself does (as opposed to what the cluster reports).
DECISIONS = frozenset({"schedule", "bound", "bind_failed", "unknown", "well_formed"})


def assert_no_overcommit_from(run: Run, operation: tuple[str, Any, Any]) -> None:
    """Apply `operation`: a decision of the scheduler never over-commits anything. (A
    node update may: a node that loses a GPU under its pods is over-committed by
    reality, and the scheduler only avoids it from then on.)"""
    before = overcommitted(run)
    run.step(operation)
    if operation[0] in DECISIONS:
        assert overcommitted(run) <= before, (operation[0], overcommitted(run) - before)


def calm_down(run: Run) -> None:
    """Remove every hostile pod, settle binds in flight, then schedule until idle with
    time moving past every backoff."""
    core = run.core
    well_formed = {f"default/{WELL_FORMED_GANG}-{i}" for i in range(GANG_SIZE)}
    for pod in list(core.cache.pods()):
        if pod.key not in well_formed:
            gone = {"metadata": {"uid": pod.uid, "namespace": pod.namespace, "name": pod.name}}
            core.apply_pod(EventType.DELETED, gone, run.now)
    while run.in_flight:
        run.settle(0, ok=True)
    for _ in range(6):
        run.now += 400.0
        core.queue.cluster_changed(run.now, ClusterChange.NODE_ADDED)
        before = overcommitted(run)
        while (attempt := core.schedule_next(run.now)) is not None:
            if isinstance(attempt.result, Plan):
                for placement in attempt.result.placements:
                    core.bound(placement)
        assert overcommitted(run) <= before


def well_formed_bound(core: SchedulingCore) -> int:
    """Members of the well-formed gang bound (on a good node, or a hostile one that
    still reads as a usable node)."""
    return sum(
        1 for pod in core.cache.pods() if pod.name.startswith(WELL_FORMED_GANG) and pod.node_name
    )


FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(st.lists(OPERATIONS, max_size=50))
def test_hostile_event_sequences_never_escape_and_the_well_formed_gang_binds(
    operations: list[tuple[str, Any, Any]],
) -> None:
    run = Run()
    for name in WELL_FORMED_NODES:
        run.core.apply_node(EventType.ADDED, node_obj(name, gpus=4), 0.0)
    for pod in well_formed_gang():
        run.core.apply_pod(EventType.ADDED, pod, 0.0)
    for operation in operations:
        assert_no_overcommit_from(run, operation)
    calm_down(run)
    assert well_formed_bound(run.core) == GANG_SIZE
