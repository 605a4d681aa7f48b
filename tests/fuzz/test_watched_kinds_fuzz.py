"""Every watched kind under hostile events (issue 26): whatever an object of any kind the
informers watch carries, applying its events never raises out of the core, the object
that cannot be read is a logged problem of its own, and the well-formed gang still
binds once the hostile objects are gone.

The kinds come from the informers themselves (`ClusterInformers(...).informers`), and
the objects from one table (tests/fuzz/watched.py), so a kind the scheduler starts to
watch is either fuzzed here or fails `test_every_watched_kind_is_fuzzed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.pod import GangKeys
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.queue import ClusterChange
from scheduler.kube.client import KubeClient
from scheduler.kube.informer import ClusterInformers, Informer
from scheduler.planner.result import Plan
from tests.factories import node_obj
from tests.fuzz.hostile import NOT_OBJECTS
from tests.fuzz.test_core_fuzz import GANG_SIZE, WELL_FORMED_NODES, well_formed_gang
from tests.fuzz.watched import HOSTILE_OBJECTS

EVENTS = st.sampled_from([EventType.ADDED, EventType.MODIFIED, EventType.DELETED])


def informers_of(core: SchedulingCore) -> dict[str, Informer]:
    """The informers the scheduler runs for `core`, by kind name (nothing is sent: an
    informer only talks to its client once it runs)."""
    informers = ClusterInformers(core, cast(KubeClient, None))
    return {informer.kind.name: informer for informer in informers.informers}


def fuzz_core() -> SchedulingCore:
    """A core with gang inference on everywhere, so the informers of the workloads'
    owners (cache/workloads.py) are watched, and fuzzed, too."""
    keys = GangKeys(infer_namespaces=frozenset({"*"}))
    return SchedulingCore(build_profile(), cache=ClusterCache(gang_keys=keys))


def test_every_watched_kind_is_fuzzed() -> None:
    watched = set(informers_of(fuzz_core()))
    missing = watched - set(HOSTILE_OBJECTS)
    assert not missing, f"watched kinds with no hostile objects in tests/fuzz/watched.py: {missing}"
    assert set(HOSTILE_OBJECTS) <= watched, set(HOSTILE_OBJECTS) - watched


OPERATIONS = st.one_of(
    st.sampled_from(sorted(HOSTILE_OBJECTS)).flatmap(
        lambda kind: st.tuples(st.just("event"), st.just(kind), EVENTS, HOSTILE_OBJECTS[kind])
    ),
    st.tuples(st.just("event"), st.sampled_from(sorted(HOSTILE_OBJECTS)), EVENTS, NOT_OBJECTS),
    st.sampled_from(sorted(HOSTILE_OBJECTS)).flatmap(
        lambda kind: st.tuples(
            st.just("relist"),
            st.just(kind),
            st.none(),
            st.lists(HOSTILE_OBJECTS[kind], max_size=3),
        )
    ),
    st.tuples(st.just("schedule"), st.none(), st.floats(0, 30), st.none()),
)


@dataclass
class Run:
    core: SchedulingCore = field(default_factory=lambda: fuzz_core())
    now: float = 0.0

    def __post_init__(self) -> None:
        self.informers = informers_of(self.core)

    def well_formed(self, kind: str) -> list[dict[str, Any]]:
        """What a relist of `kind` lists besides the hostile objects."""
        if kind == "pods":
            return well_formed_gang()
        if kind == "nodes":
            return [node_obj(name, gpus=4) for name in WELL_FORMED_NODES]
        return []

    def relist(self, kind: str, objs: list[Any]) -> None:
        informer = self.informers[kind]
        reconciliation = informer._begin_relist()
        reconciliation.add([*objs, *self.well_formed(kind)], self.now)
        reconciliation.finish(self.now)

    def step(self, operation: tuple[str, Any, Any, Any]) -> None:
        action, kind, arg, obj = operation
        if action == "event":
            # As Informer.handle hands a watch event over: only mappings reach apply.
            if isinstance(obj, dict):
                self.informers[kind]._apply(str(arg), obj, self.now)
        elif action == "relist":
            self.relist(kind, [o for o in obj if isinstance(o, dict)])
        else:
            self.now += arg
            attempt = self.core.schedule_next(self.now)
            if attempt is not None and isinstance(attempt.result, Plan):
                for placement in attempt.result.placements:
                    self.core.bound(placement)

    def calm_down(self) -> None:
        """Every hostile object gone (relists of the well-formed ones alone), then
        schedule with time moving past every backoff."""
        for kind in self.informers:
            self.relist(kind, [])
        for _ in range(6):
            self.now += 400.0
            self.core.queue.cluster_changed(self.now, ClusterChange.NODE_ADDED)
            while (attempt := self.core.schedule_next(self.now)) is not None:
                if isinstance(attempt.result, Plan):
                    for placement in attempt.result.placements:
                        self.core.bound(placement)


FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(st.lists(OPERATIONS, max_size=40))
def test_hostile_objects_of_every_watched_kind_stay_with_their_object(
    operations: list[tuple[str, Any, Any, Any]],
) -> None:
    run = Run()
    for kind in ("nodes", "pods"):
        run.relist(kind, [])
    for operation in operations:
        run.step(operation)
    run.calm_down()
    bound = [
        p for p in run.core.cache.pods() if p.name.startswith("well-formed-gang") and p.node_name
    ]
    assert len(bound) == GANG_SIZE


def test_a_namespace_that_cannot_be_read_is_its_own_problem() -> None:
    """The review's example: a Namespace whose labels are a list raised out of the
    informer (ending the scheduler). It is now a logged problem of that namespace, the
    namespace is treated as unknown, and the rest keeps being scheduled."""
    run = Run()
    for kind in ("nodes", "pods"):
        run.relist(kind, [])
    namespaces = run.informers["namespaces"]
    bad = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "labels": ["a"]}}
    good = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "y", "labels": {}}}
    namespaces.handle([{"type": "ADDED", "object": bad}, {"type": "ADDED", "object": good}])
    assert "AttributeError" in run.core.failures.current()[("Namespace", "x")]
    assert "x" not in run.core.cache.namespace_labels()
    assert run.core.cache.namespace_labels()["y"] == {}
    run.calm_down()
    assert sum(1 for p in run.core.cache.pods() if p.node_name) == GANG_SIZE
    # Readable again: the problem is over.
    fixed = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "labels": {}}}
    namespaces.handle([{"type": "MODIFIED", "object": fixed}])
    assert ("Namespace", "x") not in run.core.failures.current()
    assert run.core.cache.namespace_labels()["x"] == {}


def test_an_informer_skips_an_event_its_apply_cannot_take() -> None:
    """The last line: an apply without a guard of its own (a kind added without one)
    that raises loses that event, not the informer (which would end the scheduler)."""
    applied: list[str] = []

    def apply(event: str, obj: Any, now: float) -> None:
        if obj["metadata"]["name"] == "bad":
            raise ValueError("a field nobody thought of")
        applied.append(obj["metadata"]["name"])

    core = SchedulingCore(build_profile())
    informer = Informer(
        cast(KubeClient, None),
        informers_of(core)["namespaces"].kind,
        apply,
        core.relist_namespaces,
    )
    events = [
        {"type": "ADDED", "object": {"metadata": {"name": name, "resourceVersion": str(i)}}}
        for i, name in enumerate(["a", "bad", "c"], 1)
    ]
    assert informer.handle(events) == 3
    assert applied == ["a", "c"]
    assert informer.resource_version == "3"
