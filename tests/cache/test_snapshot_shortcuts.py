"""The snapshot's shortcuts for a node that only changed its accounting (Snapshot._moved:
re-index only the amounts that moved; PodIndex.set_node: pods only added) against the
slow paths they stand for: every put removes and re-adds the node, every pod change
compares the two pod sets."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from cache import snapshot as snapshot_module
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.pod_index import PodIndex
from cache.snapshot import Snapshot
from tests.factories import make_node, make_pod

NAMES = [f"n{index}" for index in range(5)]

puts = st.tuples(
    st.just("put"),
    st.sampled_from(NAMES),
    st.sampled_from(["", "T4", "A100"]),
    st.sampled_from([0, 2, 4]),
    st.integers(0, 32),  # CPUs taken
    st.lists(st.integers(0, 1000), max_size=4),  # milli taken per device
)
removals = st.tuples(st.just("remove"), st.sampled_from(NAMES))


def built_node(name: str, model: str, gpus: int, cpus: int, taken: list[int]) -> NodeInfo:
    node = make_node(name, cpu="32", gpus=gpus, model=model if gpus else "")
    shares = tuple((index, milli) for index, milli in enumerate(taken[:gpus]) if milli)
    node.charge({"cpu": cpus * 1000}, shares)
    return node


class SlowSnapshot(Snapshot):
    def _moved(self, node: NodeInfo) -> bool:
        return False  # every put removes the node and adds it again


def state(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "nodes": snapshot.nodes,
        "whole": list(snapshot._by_whole),
        "share": list(snapshot._by_share),
        "cpu": list(snapshot._by_cpu),
        "models": snapshot._by_model,
        "keys": snapshot._keys,
        "changes": list(snapshot._changes.items()),
        "floor": snapshot._floor,
        "labels_generation": snapshot.labels_generation,
    }


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(puts | removals, min_size=1, max_size=40),
    kept=st.sampled_from([1, 2, snapshot_module.REMOVALS_KEPT]),
)
def test_a_moved_node_indexes_as_removing_and_adding_it(
    steps: list[tuple[Any, ...]], kept: int
) -> None:
    fast, slow = Snapshot(), SlowSnapshot()
    with mock.patch.object(snapshot_module, "REMOVALS_KEPT", kept):
        for generation, step in enumerate(steps, start=1):
            if step[0] == "remove":
                fast.remove(step[1], generation)
                slow.remove(step[1], generation)
                continue
            node = built_node(*step[1:])
            node.generation = generation
            fast.put(node)
            slow.put(node)
            assert state(fast) == state(slow)
    assert state(fast) == state(slow)
    assert fast.remembers(0) == slow.remembers(0)


pod_pool = [make_pod(f"p{index}", namespace=f"ns{index % 2}") for index in range(6)]


def index_state(index: PodIndex) -> dict[str, Any]:
    return {
        "on_node": index.on_node,
        "by_label": {k: dict(v) for k, v in index._by_label.items() if v},
        "by_namespace": {k: dict(v) for k, v in index._by_namespace.items() if v},
    }


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.lists(st.sampled_from(range(len(pod_pool))), unique=True, max_size=5),
        ),
        max_size=20,
    )
)
def test_pods_added_after_the_indexed_ones_index_as_the_set_difference(
    steps: list[tuple[str, list[int]]],
) -> None:
    """The final index equals one built from the final pods of each node at once."""
    index = PodIndex()
    final: dict[str, tuple[PodInfo, ...]] = {}
    placed: dict[int, str] = {}
    for node, chosen in steps:
        # A pod is on one node at a time: those on the other node stay there.
        pods = tuple(pod_pool[i] for i in chosen if placed.get(i, node) == node)
        for i, where in list(placed.items()):
            if where == node:
                del placed[i]
        placed.update({pod_pool.index(pod): node for pod in pods})
        index.set_node(node, pods, {}, {})
        final[node] = pods
    fresh = PodIndex()
    for node, pods in final.items():
        fresh.set_node(node, pods, {}, {})
    assert index_state(index) == index_state(fresh)
