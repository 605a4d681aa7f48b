"""The DRA reach kept between planning calls (scheduler/planner/dra_reach.py) decides
nothing a fresh one would not: over random histories of slices, classes, allocated
claims, holds, node labels and nodes coming and going, each gang is planned by a
long-lived planner (its memo of reaches caught up with a long-lived snapshot, its node
choices kept per shape whatever the reach) and by a fresh one, and the members'
reaches, the allocator's words and the plans agree."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.dra.store import DELETED, DraCache
from cache.dra.topology import PCIE_ROOT
from cache.snapshot import Snapshot
from cache.volumes import VolumeCache
from policies.profile import build_profile
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner import dra_reach
from scheduler.planner.dra_choice import DraChoiceKind
from scheduler.planner.dra_claims import resolve_dra
from scheduler.planner.dra_reach import ReachMemo
from scheduler.planner.planner import Planner
from scheduler.planner.volume_claims import plan_with_claims
from tests.dra_builders import (
    DRIVER,
    allocated,
    claim_obj,
    class_obj,
    counter_slice,
    device,
    exactly,
    partition,
    share,
    shared_device,
    slice_obj,
)
from tests.factories import node_obj
from tests.scheduler.dra_cores import MEMORY, claiming

NODES = ("n0", "n1")
SELECTORS = ((), (f"{MEMORY} >= 40",), (f"{MEMORY} >= 80",))
SAME_ROOT = [{"matchAttribute": f"{DRIVER}/root"}]

node_index = st.integers(0, len(NODES) - 1)
changes = st.one_of(
    st.tuples(st.just("slice"), node_index, st.lists(st.sampled_from((16, 40, 80)), max_size=3)),
    st.tuples(st.just("drop slice"), node_index),
    st.tuples(st.just("shared slice"), st.booleans()),
    st.tuples(st.just("class"), st.integers(0, 2)),
    st.tuples(st.just("running claim"), node_index, st.integers(0, 3)),
    st.tuples(st.just("claim ends"), st.integers(0, 8)),
    st.tuples(st.just("labels"), node_index, st.sampled_from(("a", "b"))),
    # Partitionable devices and consumable capacity: a pool of one GPU's partitions and
    # a shared device, and claims of others drawing its counters or taking shares.
    st.tuples(st.just("partitions"), node_index, st.booleans()),
    st.tuples(st.just("running share"), node_index, st.integers(0, 3)),
    st.tuples(st.just("node"), node_index, st.booleans()),  # the node goes, or comes back
)
gangs = st.tuples(
    st.just("gang"),
    st.lists(st.integers(1, 2), min_size=1, max_size=3),  # each member's count
    st.integers(0, len(SELECTORS) - 1),
    st.booleans(),  # the claims' devices share a root
    st.sampled_from(("hold", "forget", "confirm")),
    st.booleans(),  # planned on a fresh snapshot (else the long-lived one)
)
# Each change of the cluster is followed by a gang, so every change is asked about.
steps = st.tuples(changes, gangs)


def _words(kind: DraChoiceKind | None) -> dict[str, str] | None:
    """The kind's words per member, as explain would read them."""
    if kind is None:
        return None
    return {uid: kind.detail(uid, ()) for uid in kind.claims}


class _World:
    def __init__(self) -> None:
        self.cache = ClusterCache()
        for name in NODES:
            self.cache.apply_node(EventType.ADDED, node_obj(name))
        self.dra = DraCache()
        self.dra.apply_class("ADDED", class_obj())
        self.memo = ReachMemo(max_demands=2)  # small: demands come and go
        self.planner = Planner(build_profile())
        self.planner.dra_reach = self.memo
        self.snapshot = Snapshot()
        self.version = 10
        self.running = 0
        self.gangs = 0

    def rv(self) -> str:
        self.version += 1
        return str(self.version)

    def step(self, step: tuple[Any, ...]) -> None:
        kind = step[0]
        if kind == "slice":
            _, node, memories = step
            # The standard PCIe root too: each node's devices get topology scores
            # (policies/dra/topology.py), which the kept reach keeps beside it.
            devices = [
                device(f"gpu-{i}", memory=m, root=f"r{i // 2}", **{PCIE_ROOT: f"pci{i // 2}"})
                for i, m in enumerate(memories)
            ]
            self.dra.apply_slice(
                "MODIFIED", slice_obj(f"s-{NODES[node]}", devices, NODES[node], rv=self.rv())
            )
        elif kind == "drop slice":
            obj = slice_obj(f"s-{NODES[step[1]]}", [], NODES[step[1]], rv=self.rv())
            self.dra.apply_slice(DELETED, obj)
        elif kind == "shared slice":
            obj = slice_obj(
                "fabric", [device("link", memory=80)], None, allNodes=True, rv=self.rv()
            )
            self.dra.apply_slice("ADDED" if step[1] else DELETED, obj)
        elif kind == "class":
            selectors = (
                (f'device.driver == "{DRIVER}"',),
                (f'device.driver == "{DRIVER}"', f"{MEMORY} >= 40"),
                (f'device.driver == "{DRIVER}"', f"{MEMORY} <= 40"),
            )[step[1]]
            self.dra.apply_class("MODIFIED", class_obj(selectors=selectors, rv=self.rv()))
        elif kind == "running claim":
            _, node, number = step
            status = allocated((DRIVER, NODES[node], f"gpu-{number}"))
            self.running += 1
            obj = claim_obj(f"run-{self.running}", [exactly()], allocation=status, rv=self.rv())
            self.dra.apply_claim("ADDED", obj)
        elif kind == "claim ends":
            obj = claim_obj(f"run-{step[1]}", [exactly()], rv=self.rv())
            self.dra.apply_claim(DELETED, obj)
        elif kind == "partitions":
            _, node, present = step
            pool = f"parts-{NODES[node]}"
            parts = [partition("whole", memory="80"), partition("half-0", memory="40")]
            parts += [partition("half-1", memory="40"), shared_device("shared", memory="40")]
            for part, size in zip(parts, (80, 40, 40, 40), strict=True):
                part["attributes"] = {"memory": {"int": size}}
            objs = (
                counter_slice(
                    f"c-{NODES[node]}", {"gpu": {"memory": "80"}}, NODES[node], pool, count=2
                ),
                slice_obj(f"p-{NODES[node]}", parts, NODES[node], pool, count=2),
            )
            for obj in objs:
                obj["metadata"]["resourceVersion"] = self.rv()
                self.dra.apply_slice("ADDED" if present else DELETED, obj)
        elif kind == "running share":
            _, node, which = step
            pool = f"parts-{NODES[node]}"
            name = ("whole", "half-0", "half-1", "shared")[which]
            result = (
                share(name, f"00000000-0000-4000-8000-{self.version:012d}", pool, memory="10")
                if name == "shared"
                else allocated((DRIVER, pool, name))["devices"]["results"][0]
            )
            self.running += 1
            status = {"devices": {"results": [result]}}
            obj = claim_obj(f"run-{self.running}", [exactly()], allocation=status, rv=self.rv())
            self.dra.apply_claim("ADDED", obj)
        elif kind == "node":
            _, node, present = step
            event = EventType.ADDED if present else EventType.DELETED
            self.cache.apply_node(event, node_obj(NODES[node]))
        elif kind == "labels":
            _, node, value = step
            obj = node_obj(NODES[node], labels={"zone": value})
            self.cache.apply_node(EventType.MODIFIED, obj)
        else:
            self.plan_gang(*step[1:])

    def plan_gang(
        self,
        counts: list[int],
        selector: int,
        same_root: bool,
        after: str,
        fresh_snapshot: bool = False,
    ) -> None:
        self.gangs += 1
        gang_name = f"g{self.gangs}"
        pods = []
        for member, count in enumerate(counts):
            claim = f"{gang_name}-{member}"
            request = exactly(count=count, selectors=SELECTORS[selector])
            constraints = SAME_ROOT if same_root else None
            obj = claim_obj(claim, [request], constraints=constraints, rv=self.rv())
            self.dra.apply_claim("ADDED", obj)
            pods.append(claiming(f"{gang_name}-p{member}", claim, gang=gang_name, size=len(counts)))
        for pod in pods:
            self.cache.apply_pod(EventType.ADDED, pod)
        infos = [self.cache.pod(pod["metadata"]["uid"]) for pod in pods]
        assembled = assemble_gangs([p for p in infos if p], {}, "gang-scheduler")
        gang = next(iter(assembled.gangs.values()))
        # The core's snapshot lives on (the memo catches up with its changes); a
        # fresh one is what the memo must answer alike from scratch.
        if fresh_snapshot:
            self.snapshot = Snapshot()
        snapshot = self.snapshot
        self.cache.update_snapshot(snapshot)
        labels = self.cache.namespace_labels()

        kept, kept_kind = resolve_dra(gang.pending, self.dra, snapshot, labels, self.memo)
        fresh, fresh_kind = resolve_dra(gang.pending, self.dra, snapshot, labels)
        assert [(p.dra_reach, p.dra_topology, p.problems) for p in kept] == [
            (p.dra_reach, p.dra_topology, p.problems) for p in fresh
        ]
        assert _words(kept_kind) == _words(fresh_kind)

        # The long-lived planner, as the core keeps it: its memo of reaches, and the
        # node choices it keeps per shape, shared by gangs that see other reaches.
        with_memo = self.planner
        volumes = VolumeCache()
        plan = plan_with_claims(with_memo, gang, snapshot, volumes, self.cache, dra=self.dra)
        fresh_plan = plan_with_claims(
            Planner(build_profile()), gang, snapshot, volumes, self.cache, dra=self.dra
        )
        assert plan == fresh_plan
        claims = getattr(plan, "claims", ())
        chosen = [(c.key, c.allocation) for c in claims if c.allocation is not None]
        if chosen:
            self.dra.assume(chosen)
            for key, _ in chosen:
                if after == "forget":
                    self.dra.forget(key)
                elif after == "confirm":
                    self.dra.mark_written(key)
                    self.dra.confirm(key)


ONE_GPU = ("gang", [1], 0, False, "hold", False)


@settings(max_examples=80, deadline=None)
@given(history=st.lists(steps, min_size=1, max_size=12))
# A plan's hold, a running pod's claim ending, a class changing: each changes where
# the same demand fits, and each is seen.
@example(history=[(("slice", 0, [80]), ONE_GPU), (("labels", 1, "a"), ONE_GPU)])
# Counters drawn by another's claim, then given back: the kept reach follows.
@example(
    history=[
        (("partitions", 0, True), ONE_GPU),
        (("running share", 0, 0), ONE_GPU),
        (("claim ends", 1), ONE_GPU),
        (("running share", 0, 3), ONE_GPU),
    ]
)
# A node leaving, then coming back, on the long-lived snapshot: the kept reach
# catches up with the snapshot's changes as well as the DraCache's.
@example(
    history=[
        (("slice", 0, [80]), ("slice", 1, [80])),
        (("node", 1, False), ("gang", [1], 0, False, "forget", False)),
        (("node", 1, True), ("gang", [1], 0, False, "forget", False)),
    ]
)
@example(
    history=[
        (("slice", 0, [80]), ("gang", [1], 0, False, "forget", False)),
        (("running claim", 0, 0), ONE_GPU),
        (("claim ends", 1), ONE_GPU),
    ]
)
@example(
    history=[
        (("slice", 0, [16, 80]), ("class", 2)),
        (("class", 2), ("gang", [2], 0, False, "forget", False)),
        (("class", 0), ("gang", [2], 0, False, "forget", False)),
    ]
)
def test_kept_reach_plans_as_a_fresh_one(
    history: list[tuple[tuple[Any, ...], tuple[Any, ...]]],
) -> None:
    world = _World()
    for change, gang in history:
        world.step(change)
        world.step(gang)


def test_a_gang_of_a_kept_demand_is_answered_from_the_memo() -> None:
    """The memo is used: a second gang asking alike finds its demand kept."""
    world = _World()
    world.step(("slice", 0, [80, 80]))
    world.step(("gang", [1, 1], 0, False, "forget", False))
    assert len(world.memo) == 1
    world.step(("gang", [1, 1], 0, False, "forget", False))
    assert len(world.memo) == 1


def test_the_memo_keeps_at_most_its_bound_dropping_the_least_recently_asked() -> None:
    dra = DraCache()
    memo = ReachMemo(max_demands=2)
    first = memo.answers(dra, "a")
    memo.answers(dra, "b")
    assert memo.answers(dra, "a") is first  # asked again: now the most recent
    memo.answers(dra, "c")  # "b" goes
    assert len(memo) == 2
    assert memo.answers(dra, "a") is first
    assert memo.answers(dra, "b") is not first
    assert memo.answers(DraCache(), "a") is not first  # another cache: nothing kept


def test_a_demands_answers_start_over_when_node_names_churn_past_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dra_reach, "MAX_REMEMBERED_NODES", 3)
    dra = DraCache()
    answers = ReachMemo().answers(dra, "a")
    for number in range(7):
        dra_reach.fits(answers, dra, f"node-{number}", {}, lambda node, labels: "")
        assert len(answers.by_node) <= 3
