"""TopologyChooser: whole-GPU sets by link quality, shares best-fit."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.gpu import GpuDevice, GpuRequest
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.devices import (
    EXHAUSTIVE_LIMIT,
    TopologyChooser,
    best_set_score,
    internal_sum,
    link_facts,
)
from policies.interface import GangContext
from policies.scores.gpu_topology import GpuTopology
from tests.factories import dgx_links, make_node, make_pod, pcie_two_switch_links

chooser = TopologyChooser()


def indices(shares: tuple[tuple[int, int], ...]) -> set[int]:
    return {index for index, _ in shares}


def take(node: NodeInfo, *devices: int, milli: int = 1000) -> None:
    node.charge({}, tuple((i, milli) for i in devices))


def pcie() -> NodeInfo:
    return make_node("pcie", gpus=4, links=pcie_two_switch_links())


def islands_links(size: int) -> list[list[str]]:
    """Two NVLink islands of `size` devices each, joined over SYS."""
    total = 2 * size
    return [
        ["X" if i == j else ("NV4" if i // size == j // size else "SYS") for j in range(total)]
        for i in range(total)
    ]


def test_pod_without_gpu_needs_no_device() -> None:
    assert chooser.candidates(make_pod("p"), pcie()) == [()]


def test_any_two_devices_of_a_dgx_are_fine() -> None:
    node = make_node("dgx", gpus=8, links=dgx_links())
    take(node, 0, 5)
    [shares] = chooser.candidates(make_pod("p", gpus=2), node)
    assert len(shares) == 2
    assert indices(shares) <= {1, 2, 3, 4, 6, 7}
    assert all(milli == 1000 for _, milli in shares)


def test_two_gpus_on_pcie_box_share_a_switch() -> None:
    [shares] = chooser.candidates(make_pod("p", gpus=2), pcie())
    assert indices(shares) in ({0, 1}, {2, 3})


def test_with_device_0_taken_two_gpus_take_the_other_switch() -> None:
    node = pcie()
    take(node, 0)
    assert chooser.candidates(make_pod("p", gpus=2), node) == [((2, 1000), (3, 1000))]


def test_a_partly_used_device_is_not_free_for_whole_gpus() -> None:
    node = pcie()
    take(node, 2, milli=100)
    assert chooser.candidates(make_pod("p", gpus=2), node) == [((0, 1000), (1, 1000))]


def test_single_gpu_leaves_a_pix_pair_free_and_the_next_takes_its_partner() -> None:
    node = pcie()
    pod = make_pod("p", gpus=1)
    [first] = chooser.candidates(pod, node)
    node.charge({}, first)
    remaining = {i for i in range(4) if node.gpu_free[i] == 1000}
    assert {0, 1} <= remaining or {2, 3} <= remaining
    [second] = chooser.candidates(pod, node)
    node.charge({}, second)
    # The partner of the first device went second, so one PIX pair is still whole.
    remaining = {i for i in range(4) if node.gpu_free[i] == 1000}
    assert remaining in ({0, 1}, {2, 3})


def test_numa_breaks_a_tie_in_pair_scores() -> None:
    node = make_node("dgx4", gpus=4, links=dgx_links(4))  # devices 0,1 on NUMA 0; 2,3 on 1
    take(node, 0)
    # {1,2}, {1,3} and {2,3} are all NVLink; only {2,3} stays on one NUMA node.
    assert chooser.candidates(make_pod("p", gpus=2), node) == [((2, 1000), (3, 1000))]


def test_all_devices_or_none() -> None:
    node = pcie()
    assert chooser.candidates(make_pod("p", gpus=4), node) == [tuple((i, 1000) for i in range(4))]
    take(node, 3)
    assert chooser.candidates(make_pod("p", gpus=4), node) == []


def test_unknown_links_take_lowest_free_indices() -> None:
    node = make_node("plain", gpus=4)
    assert node.pair_scores is None
    take(node, 0)
    assert chooser.candidates(make_pod("p", gpus=2), node) == [((1, 1000), (2, 1000))]


def test_large_node_uses_a_deterministic_greedy_that_keeps_to_one_island() -> None:
    node = make_node("big", gpus=16, links=islands_links(8))
    pod = make_pod("p", gpus=8)
    [shares] = chooser.candidates(pod, node)
    assert indices(shares) in (set(range(8)), set(range(8, 16)))
    take(node, 0)
    [shares] = chooser.candidates(pod, node)
    assert indices(shares) == set(range(8, 16))
    assert chooser.candidates(pod, node.clone()) == [shares]


def test_greedy_and_exhaustive_agree_on_best_set_score() -> None:
    node = make_node("big", gpus=16, links=islands_links(8))
    # C(16, 2) is small enough to search exhaustively; C(16, 8) is not and is greedy.
    assert best_set_score(node, 2) == 400
    assert best_set_score(node, 8) == 28 * 400
    assert best_set_score(make_node("plain", gpus=4), 2) == 0


def test_unhealthy_devices_are_never_chosen() -> None:
    node = pcie()
    node.devices = tuple(replace(device, healthy=device.index != 0) for device in node.devices)
    [shares] = chooser.candidates(make_pod("p", gpus=2), node)
    assert indices(shares) == {2, 3}
    assert chooser.candidates(make_pod("p", gpus=4), node) == []
    assert all(0 not in indices(s) for s in chooser.candidates(make_pod("p", vgpu=300), node))


def test_share_goes_best_fit() -> None:
    node = make_node("plain", gpus=2)
    take(node, 1, milli=400)  # device 1 has 600 free, device 0 has 1000
    candidates = chooser.candidates(make_pod("p", vgpu=300), node)
    assert candidates == [((1, 300),), ((0, 300),)]


def test_share_that_fits_nowhere_has_no_candidate() -> None:
    node = make_node("plain", gpus=2)
    take(node, 0, 1, milli=800)
    assert chooser.candidates(make_pod("p", vgpu=300), node) == []


def test_share_tie_goes_to_the_device_least_joined_to_fully_free_ones() -> None:
    node = pcie()
    take(node, 1, 2, milli=400)
    take(node, 3)
    # Devices 1 and 2 both have 600 free; only device 0 is fully free, joined to 1 by
    # PIX and to 2 by SYS, so device 2 goes first and the 0-1 pair keeps its chance.
    candidates = chooser.candidates(make_pod("p", vgpu=300), node)
    assert candidates == [((2, 300),), ((1, 300),), ((0, 300),)]


def test_share_without_links_proposes_one_device_per_free_amount() -> None:
    node = make_node("plain", gpus=8)
    take(node, 5, 6, milli=500)
    take(node, 7, milli=900)
    candidates = chooser.candidates(make_pod("p", vgpu=100), node)
    assert candidates == [((7, 100),), ((5, 100),), ((0, 100),)]


# --- share_order="index" ----------------------------------------------------------------

by_index = TopologyChooser(share_order="index")


def test_index_order_proposes_every_fitting_device_lowest_index_first() -> None:
    node = make_node("plain", gpus=5)
    node.gpu_free = [600, 1000, 100, 1000, 600]
    pod = make_pod("p", vgpu=200)
    # Device 2 is too full; equal devices are all proposed, in index order.
    assert by_index.candidates(pod, node) == [((0, 200),), ((1, 200),), ((3, 200),), ((4, 200),)]
    # The default order stays best-fit, one device per free amount.
    assert chooser.candidates(pod, node) == [((0, 200),), ((1, 200),)]
    assert TopologyChooser().share_order == "best-fit"


def test_index_distinct_order_proposes_one_device_per_free_amount() -> None:
    node = make_node("plain", gpus=5)
    node.gpu_free = [600, 1000, 100, 1000, 600]
    pod = make_pod("p", vgpu=200)
    distinct = TopologyChooser("index-distinct")
    assert distinct.candidates(pod, node) == [((0, 200),), ((1, 200),)]
    # With links, devices differ by how they are joined: every fitting one is proposed.
    linked = pcie()
    assert distinct.candidates(pod, linked) == by_index.candidates(pod, linked)


def test_index_order_ignores_links_and_skips_broken_devices() -> None:
    node = pcie()
    take(node, 1, 2, milli=400)
    node.devices = tuple(replace(device, healthy=device.index != 3) for device in node.devices)
    candidates = by_index.candidates(make_pod("p", vgpu=300), node)
    assert candidates == [((0, 300),), ((1, 300),), ((2, 300),)]
    assert by_index.candidates(make_pod("p", vgpu=700), node) == [((0, 700),)]


def test_index_order_leaves_whole_gpus_and_cpu_pods_alone() -> None:
    node = pcie()
    take(node, 0)
    pod = make_pod("p", gpus=2)
    assert by_index.candidates(pod, node) == chooser.candidates(pod, node)
    assert by_index.candidates(make_pod("p"), node) == [()]


def test_index_order_lets_a_tie_go_to_the_lowest_index() -> None:
    """A scorer that rates every device alike keeps the first candidate, as the paper's
    FGD does ("the node scores its best GPU, lowest index on ties")."""
    node = make_node("plain", gpus=4)
    node.gpu_free = [1000, 500, 1000, 500]
    pod = make_pod("p", vgpu=300)
    first_by_index = by_index.candidates(pod, node)[0]
    first_best_fit = chooser.candidates(pod, node)[0]
    assert first_by_index == ((0, 300),)
    assert first_best_fit == ((1, 300),)


def test_unknown_share_order_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown share order"):
        TopologyChooser(share_order="random")  # type: ignore[arg-type]


# --- properties ----------------------------------------------------------------------

LINK_SCORES = (0, 10, 20, 30, 40, 50, 60, 100, 400, 1200)


@st.composite
def nodes(draw: st.DrawFn) -> NodeInfo:
    count = draw(st.integers(1, 8))
    devices = tuple(
        GpuDevice(
            i,
            f"GPU-{i}",
            "A100",
            81920,
            draw(st.sampled_from([0, 1, None])),
            healthy=draw(st.booleans() | st.just(True)),
        )
        for i in range(count)
    )
    matrix = [[0] * count for _ in range(count)]
    for i, j in combinations(range(count), 2):
        matrix[i][j] = matrix[j][i] = draw(st.sampled_from(LINK_SCORES))
    known = draw(st.booleans() | st.just(True))
    node = NodeInfo(
        name="n",
        devices=devices,
        pair_scores=tuple(tuple(row) for row in matrix) if known else None,
    )
    node.gpu_free = [draw(st.sampled_from([0, 100, 300, 500, 700, 1000])) for _ in devices]
    return node


@st.composite
def requests(draw: st.DrawFn) -> GpuRequest:
    if draw(st.booleans()):
        return GpuRequest(1, draw(st.integers(1, 999)))
    return GpuRequest(draw(st.integers(0, 8)), 1000)


@settings(max_examples=150, deadline=None)
@given(node=nodes(), request=requests())
def test_every_candidate_fits_and_scores_in_range(node: NodeInfo, request: GpuRequest) -> None:
    pod = PodInfo(uid="u", namespace="default", name="p", gpu=request)
    candidates = chooser.candidates(pod, node)
    if request.count == 0:
        assert candidates == [()]
    fitting = [
        i for i, d in enumerate(node.devices) if d.healthy and node.gpu_free[i] >= request.milli
    ]
    if request.count and len(fitting) >= request.count:
        assert candidates, "the pod fits, so the chooser proposes a set"
    for shares in candidates:
        assert len(shares) == request.count
        assert [i for i, _ in shares] == sorted({i for i, _ in shares})
        for index, milli in shares:
            assert milli == request.milli
            assert node.devices[index].healthy
            assert node.gpu_free[index] >= milli
        score = GpuTopology().score(pod, node, shares, GangContext())
        assert 0.0 <= score <= 100.0
    if (
        node.pair_scores is not None
        and request.count >= 2
        and candidates
        and len(list(combinations(fitting, request.count))) <= EXHAUSTIVE_LIMIT
    ):
        # Exhaustive search: no set of fitting devices is joined better.
        best = max(internal_sum(node.pair_scores, c) for c in combinations(fitting, request.count))
        assert internal_sum(node.pair_scores, [i for i, _ in candidates[0]]) == best
        assert best <= link_facts(node.pair_scores).best_sum(request.count)


@settings(max_examples=100, deadline=None)
@given(node=nodes(), request=requests())
def test_index_order_is_every_fitting_device_and_covers_the_default(
    node: NodeInfo, request: GpuRequest
) -> None:
    pod = PodInfo(uid="u", namespace="default", name="p", gpu=request)
    ordered = by_index.candidates(pod, node)
    if not request.fractional:
        assert ordered == chooser.candidates(pod, node)
        return
    fitting = [
        i for i, d in enumerate(node.devices) if d.healthy and node.gpu_free[i] >= request.milli
    ]
    assert ordered == [((i, request.milli),) for i in fitting]
    assert set(chooser.candidates(pod, node)) <= set(ordered)
