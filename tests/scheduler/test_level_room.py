"""A level's room kept between planning calls (scheduler/planner/level_room.py) equals
the room counted afresh, whatever changed on the nodes in between."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.pod import pod_from_api
from cache.snapshot import Snapshot
from policies.diagnosis import FilterMemo, ShapeMemo
from policies.profile import build_profile
from scheduler.planner.level_room import LevelRoom
from tests.factories import node_obj, pod_obj

RACK = "topology.kubernetes.io/rack"
CLIQUE = "nvidia.com/gpu.clique"
PROFILE = build_profile()


Summary = tuple[dict[str, tuple[int, int, list[str]]], dict[tuple[str, str], int]]


def summary(room: LevelRoom) -> Summary:
    """Per domain with anything in it (an emptied one may stay, empty), its sums; and
    the slice domains' room."""
    domains = {
        d: (t.copies, t.free_gpu_milli, sorted(t.nodes))
        for d, t in room.domains.items()
        if t.nodes or t.free_gpu_milli
    }
    return domains, dict(room.slices)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["bind", "delete-node", "relabel", "add-node"]),
            st.integers(0, 5),
            st.integers(1, 4),
        ),
        max_size=12,
    )
)
def test_caught_up_room_equals_a_fresh_count(changes: list[tuple[str, int, int]]) -> None:
    cache = ClusterCache()
    for i in range(6):
        labels = {RACK: f"r{i % 2}", CLIQUE: f"c{i // 2}"}
        cache.apply_node(EventType.ADDED, node_obj(f"n{i}", gpus=4, labels=labels))
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    member = pod_from_api(pod_obj("m", gpus=1))
    memo = FilterMemo(PROFILE.filters)

    def shape_memo() -> ShapeMemo:
        return memo.for_shape(member.filter_signature(), member, snapshot.nodes.keys())

    kept = LevelRoom(RACK, CLIQUE)
    kept.catch_up(snapshot, member, shape_memo())
    for number, (change, index, amount) in enumerate(changes):
        name = f"n{index}"
        if change == "bind" and name in snapshot.nodes:
            cache.apply_pod(EventType.ADDED, pod_obj(f"p{number}", gpus=amount, node_name=name))
        elif change == "delete-node":
            cache.apply_node(EventType.DELETED, node_obj(name))
        elif change == "relabel" and name in snapshot.nodes:
            labels = {RACK: f"r{amount % 3}", CLIQUE: f"c{amount}"}
            cache.apply_node(EventType.MODIFIED, node_obj(name, gpus=4, labels=labels))
        elif change == "add-node":
            labels = {RACK: f"r{amount % 3}"}
            cache.apply_node(EventType.ADDED, node_obj(f"x{number}", gpus=amount, labels=labels))
        cache.update_snapshot(snapshot)
        kept.catch_up(snapshot, member, shape_memo())
        fresh = LevelRoom(RACK, CLIQUE)
        fresh.catch_up(snapshot, member, shape_memo())
        assert summary(kept) == summary(fresh)
