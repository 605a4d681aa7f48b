"""The filter memo keeps answers by `PodInfo.filter_signature` and asks the
DynamicResources filter, which reads the pod's DRA reach, afresh each time: its
answers must be those of every filter asked in order, whatever the reach."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.diagnosis import FilterMemo, first_failure
from policies.filters import (
    DynamicResources,
    GpuFit,
    NodeUnschedulable,
    TaintToleration,
    default_filters,
)
from policies.interface import Filter
from tests.factories import make_node, make_pod

NAMES = [f"n{i}" for i in range(6)]


def _node(name: str, variant: int, generation: int) -> NodeInfo:
    """A node in one of four states: fits, cordoned, tainted, or without GPUs."""
    node = make_node(
        name,
        gpus=0 if variant == 3 else 4,
        unschedulable=variant == 1,
        taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if variant == 2 else (),
    )
    return dataclasses.replace(node, generation=generation)


def _pod(reach: frozenset[str] | None, words: str) -> PodInfo:
    pod = make_pod("p", gpus=1)
    return dataclasses.replace(pod, dra_reach=None if reach is None else (reach, words))


class CountingFilter:
    """A kept filter that counts how often it is asked."""

    name = "counting"

    def __init__(self) -> None:
        self.asked = 0

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        self.asked += 1
        return None


def test_pods_whose_reach_differs_share_the_kept_answers() -> None:
    counting = CountingFilter()
    memo = FilterMemo([counting, DynamicResources()])
    node = make_node("n0", gpus=4)
    first = _pod(frozenset({"n0"}), "cannot allocate all claims")
    second = _pod(frozenset({"n1"}), "cannot allocate all claims")
    assert first.filter_signature() == second.filter_signature()
    assert memo.for_shape(first.filter_signature(), first).first_failure(node) is None
    answer = memo.for_shape(second.filter_signature(), second).first_failure(node)
    assert answer == "cannot allocate all claims"
    assert counting.asked == 1


# Orders with the fresh filter last (the default), first, and in the middle.
ORDERS: list[list[Filter]] = [
    default_filters(),
    [DynamicResources(), NodeUnschedulable(), TaintToleration(), GpuFit()],
    [NodeUnschedulable(), DynamicResources(), TaintToleration(), GpuFit()],
]

steps = st.lists(
    st.one_of(
        st.tuples(st.just("reach"), st.none() | st.frozensets(st.sampled_from(NAMES))),
        st.tuples(st.just("node"), st.sampled_from(NAMES), st.integers(0, 3)),
        st.tuples(st.just("ask"), st.sampled_from(NAMES)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(order=st.sampled_from(range(len(ORDERS))), steps=steps)
def test_memo_answers_as_the_filters_in_order(order: int, steps: list[tuple]) -> None:
    filters = ORDERS[order]
    memo = FilterMemo(filters)
    nodes = {name: _node(name, 0, 0) for name in NAMES}
    generation = 0
    pod = _pod(None, "")
    for step in steps:
        if step[0] == "reach":
            pod = _pod(step[1], "resourceclaim not available on the node")
        elif step[0] == "node":
            # A changed node gets a new generation, as the cache gives it.
            generation += 1
            nodes[step[1]] = _node(step[1], step[2], generation)
        else:
            node = nodes[step[1]]
            kept = memo.for_shape(pod.filter_signature(), pod, nodes.keys())
            assert kept.first_failure(node) == first_failure(filters, pod, node)
