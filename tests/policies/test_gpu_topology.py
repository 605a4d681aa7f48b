"""GpuTopology: set quality against the node's best and across nodes; single devices
judged by what taking them costs the free pairs."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.gpu import DeviceShares, GpuDevice
from cache.node import NodeInfo
from policies.interface import GangContext
from policies.scores.gpu_topology import GpuTopology
from tests.factories import dgx_links, make_node, make_pod, pcie_two_switch_links

topology = GpuTopology()
gang = GangContext()
whole = make_pod("whole", gpus=1)
pair = make_pod("pair", gpus=2)
share = make_pod("share", vgpu=300)


def whole_set(*devices: int) -> DeviceShares:
    return tuple((i, 1000) for i in devices)


def pcie() -> NodeInfo:
    return make_node("pcie", gpus=4, links=pcie_two_switch_links())


def test_identity() -> None:
    assert topology.name == "gpu-topology"
    assert topology.candidate_order is None


def test_no_gpu_and_unknown_links_are_neutral() -> None:
    assert topology.score(make_pod("cpu"), pcie(), (), gang) == 50.0
    plain = make_node("plain", gpus=4)
    assert topology.score(pair, plain, whole_set(0, 1), gang) == 50.0
    assert topology.score(whole, plain, whole_set(2), gang) == 50.0
    assert topology.score(share, plain, ((1, 300),), gang) == 50.0


def test_perfect_nvlink_set_scores_full_whatever_the_size() -> None:
    dgx = make_node("dgx", gpus=8, links=dgx_links())
    assert topology.score(pair, dgx, whole_set(3, 6), gang) == 100.0
    assert topology.score(make_pod("p", gpus=8), dgx, whole_set(*range(8)), gang) == 100.0


def test_pix_pair_beats_sys_pair_and_nvlink_beats_pix() -> None:
    node = pcie()
    pix = topology.score(pair, node, whole_set(0, 1), gang)
    sys = topology.score(pair, node, whole_set(1, 2), gang)
    dgx = make_node("dgx", gpus=8, links=dgx_links())
    nvlink = topology.score(pair, dgx, whole_set(0, 1), gang)
    assert pix == pytest.approx(75.0)
    assert sys == pytest.approx(15.0)
    assert nvlink > pix > sys


def test_sys_only_box_is_not_blamed_for_a_set_it_could_not_better() -> None:
    sys_only = make_node("sys", gpus=2, links=[["X", "SYS"], ["SYS", "X"]])
    on_sys_only = topology.score(pair, sys_only, whole_set(0, 1), gang)
    on_split_pcie = topology.score(pair, pcie(), whole_set(0, 2), gang)
    assert on_sys_only == pytest.approx(55.0)
    assert on_sys_only > on_split_pcie


def test_single_gpu_prefers_a_device_whose_taking_breaks_no_good_pair() -> None:
    node = pcie()
    node.charge({}, whole_set(1))
    # Free: 0 (partner gone: joined to 2 and 3 by SYS only), 2 and 3 (a PIX pair).
    lonely = topology.score(whole, node, whole_set(0), gang)
    paired = topology.score(whole, node, whole_set(2), gang)
    assert lonely > paired
    # A node where the last free device breaks nothing scores full.
    node.charge({}, whole_set(2, 3))
    assert topology.score(whole, node, whole_set(0), gang) == 100.0


def test_share_prefers_a_partly_used_device() -> None:
    node = pcie()
    node.charge({}, ((3, 500),))
    partly_used = topology.score(share, node, ((3, 300),), gang)
    fully_free = topology.score(share, node, ((0, 300),), gang)
    assert partly_used == pytest.approx(75.0)
    assert fully_free < 50.0 < partly_used


LINK_SCORES = (0, 10, 20, 30, 40, 50, 60, 100, 1200)


@st.composite
def scored_choices(draw: st.DrawFn) -> tuple[NodeInfo, DeviceShares]:
    count = draw(st.integers(1, 6))
    matrix = [[0] * count for _ in range(count)]
    for i, j in combinations(range(count), 2):
        matrix[i][j] = matrix[j][i] = draw(st.sampled_from(LINK_SCORES))
    node = NodeInfo(
        name="n",
        devices=tuple(GpuDevice(i, "", "A100", 0, i % 2) for i in range(count)),
        pair_scores=tuple(tuple(row) for row in matrix),
    )
    node.gpu_free = [draw(st.sampled_from([-200, 0, 400, 1000])) for _ in range(count)]
    chosen = draw(st.sets(st.integers(0, count - 1), min_size=1))
    milli = draw(st.sampled_from([1000, 250])) if len(chosen) == 1 else 1000
    return node, tuple((i, milli) for i in sorted(chosen))


@settings(max_examples=150, deadline=None)
@given(choice=scored_choices())
def test_scores_stay_within_0_and_100_for_any_set(choice: tuple[NodeInfo, DeviceShares]) -> None:
    node, shares = choice
    pod = make_pod("p", gpus=len(shares)) if shares[0][1] == 1000 else share
    assert 0.0 <= topology.score(pod, node, shares, gang) <= 100.0
