"""A second kind of choice per member plugs into the planner beside the node choice
(scheduler/planner/member_choice.py): a toy kind, widgets from a per-node pool, one
per member, stands in for devices from a pool. The search asks it about every node it
picks, moves on when the kind says no, and records nothing in any kind for a node one
kind refused."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.filters.node_volume_limits import NodeVolumeUse
from policies.filters.volume_binding import GangVolumes, VolumeAssignment
from policies.profile import build_profile
from scheduler.gangs.gang import Gang, assemble_gangs
from scheduler.planner.member_choice import MemberChoiceKind, MemberChoices, Take
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, Unschedulable
from tests.factories import make_node, make_pod, node_obj, pod_obj


class _Widgets:
    """One attempt's widgets: member uid -> node."""

    def __init__(self, kind: _WidgetPool) -> None:
        self.kind = kind
        self.taken: dict[str, str] = {}
        kind.attempts.append(self)

    def offer(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> Take | None:
        self.kind.asked.append((pod.uid, node.name))
        used = sum(1 for name in self.taken.values() if name == node.name)
        if used >= self.kind.pool.get(node.name, 0):
            return None

        def take() -> None:
            self.taken[pod.uid] = node.name

        return take

    def revisit(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> Take | None:
        return None

    def into_plan(self, plan: Plan, left_out: Collection[str]) -> Plan:
        self.kind.planned = {uid: n for uid, n in self.taken.items() if uid not in left_out}
        return plan


class _WidgetPool:
    """Per node, how many widgets it has; every member needs one on its node."""

    def __init__(self, pool: dict[str, int]) -> None:
        self.pool = pool
        self.attempts: list[_Widgets] = []
        self.asked: list[tuple[str, str]] = []
        self.planned: dict[str, str] | None = None

    def concerns(self, uid: str) -> bool:
        return True

    def start(self) -> MemberChoices:
        return _Widgets(self)

    def unmet(self, nodes: int, gang_key: str) -> str:
        return f"0/{nodes} nodes are available: no widget left (gang {gang_key})"

    def detail(self, uid: str, reasons: Collection[str]) -> str:
        return ""


class _Refusing:
    """A kind that refuses some nodes outright and records what it was made to take."""

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.taken: list[str] = []

    def concerns(self, uid: str) -> bool:
        return True

    def start(self) -> MemberChoices:
        return self

    def offer(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> Take | None:
        if node.name in self.refused:
            return None
        return lambda: self.taken.append(node.name)

    def revisit(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> Take | None:
        return None

    def into_plan(self, plan: Plan, left_out: Collection[str]) -> Plan:
        return plan

    def unmet(self, nodes: int, gang_key: str) -> str:
        return "refused"

    def detail(self, uid: str, reasons: Collection[str]) -> str:
        return ""


def _gang(nodes: list[dict[str, Any]], size: int) -> tuple[Gang, ClusterCache]:
    cache = ClusterCache()
    for node in nodes:
        cache.apply_node(EventType.ADDED, node)
    for i in range(size):
        cache.apply_pod(EventType.ADDED, pod_obj(f"g-{i}", gang="g", min_member=size, gpus=1))
    return assemble_gangs(cache.pods(), {}, "gang-scheduler").gangs["default/g"], cache


def _plan(nodes: list[dict[str, Any]], size: int, *kinds: MemberChoiceKind) -> Any:
    gang, cache = _gang(nodes, size)
    return Planner(build_profile()).plan(gang, cache.snapshot(), choices=kinds)


def test_members_go_where_the_pool_has_room() -> None:
    """Bin-packing alone puts all three on n0 (the tightest node that holds them):
    the pool there has one widget, so the others move on, to n2 (n1 has none)."""
    pool = _WidgetPool({"n0": 1, "n1": 0, "n2": 2})
    nodes = [node_obj("n0", gpus=4), node_obj("n1", gpus=8), node_obj("n2", gpus=8)]
    alone = _plan(nodes, 3)
    assert isinstance(alone, Plan) and {p.node for p in alone.placements} == {"n0"}
    result = _plan(nodes, 3, pool)
    assert isinstance(result, Plan)
    placed = Counter(p.node for p in result.placements)
    assert placed == {"n0": 1, "n2": 2}
    assert pool.planned == {p.pod_uid: p.node for p in result.placements}


def test_a_node_one_kind_refuses_leaves_no_trace_in_another() -> None:
    nodes = [node_obj("n0", gpus=4), node_obj("n1", gpus=8)]
    pool = _WidgetPool({"n0": 4, "n1": 4})
    refusing = _Refusing({"n0"})
    result = _plan(nodes, 2, pool, refusing)
    assert isinstance(result, Plan) and {p.node for p in result.placements} == {"n1"}
    assert ("uid-default-g-0", "n0") in pool.asked  # n0 was offered to the pool first
    assert all(name == "n1" for attempt in pool.attempts for name in attempt.taken.values())
    assert refusing.taken == ["n1", "n1"]


def test_a_gang_the_kind_cannot_serve_waits_with_its_words() -> None:
    nodes = [node_obj("n0", gpus=4), node_obj("n1", gpus=4)]
    result = _plan(nodes, 2, _WidgetPool({"n0": 1}))
    assert isinstance(result, Unschedulable)
    assert result.placeable == 1
    assert "0/2 nodes are available: no widget left (gang default/g)" in result.message


@settings(max_examples=60, deadline=None)
@given(
    gpus=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    widgets=st.lists(st.integers(0, 3), min_size=5, max_size=5),
    size=st.integers(1, 5),
)
def test_the_pool_is_never_overdrawn_and_a_plan_is_found_when_one_exists(
    gpus: list[int], widgets: list[int], size: int
) -> None:
    """Members alike, one GPU and one widget each: a node holds min(GPUs, widgets) of
    them, so a plan exists exactly when those add up to the gang; whatever is planned
    draws no node's pool beyond its widgets."""
    nodes = [node_obj(f"n{i}", gpus=count) for i, count in enumerate(gpus)]
    pool = _WidgetPool({f"n{i}": widgets[i] for i in range(len(gpus))})
    result = _plan(nodes, size, pool)
    room = sum(min(count, widgets[i]) for i, count in enumerate(gpus))
    assert isinstance(result, Plan) == (room >= size)
    for attempt in pool.attempts:
        drawn = Counter(attempt.taken.values())
        assert all(drawn[name] <= pool.pool[name] for name in drawn)
    if isinstance(result, Plan):
        assert pool.planned is not None
        assert Counter(p.node for p in result.placements) == Counter(pool.planned.values())


def test_a_volume_offer_records_nothing_until_taken() -> None:
    """The volume kind's offer is free of side effects (what lets the search ask every
    kind before any records); taking it records the volume on the node."""
    driver = "csi.example.com"
    volumes = GangVolumes(
        attachments={"uid-default-p": {"vol-1": driver}},
        limits={"n0": NodeVolumeUse({driver: 2}, {})},
    )
    assignment = VolumeAssignment(volumes)
    offer = assignment.offer(make_pod("p"), make_node("n0"))
    assert offer is not None
    assert assignment.attached == {} and assignment.by_pod == {}
    assignment.take(offer)
    assert assignment.attached == {"n0": {driver: {"vol-1"}}}
