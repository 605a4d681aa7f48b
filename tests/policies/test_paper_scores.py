"""The FGD paper's baseline policies as score plugins: BestFit, DotProduct, GpuPacking,
Random, and integer truncation. Expected values are computed by hand in the comments."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.devices import TopologyChooser
from policies.interface import CandidateOrder, GangContext, Score
from policies.scores.best_fit import BestFit
from policies.scores.dot_product import DotProduct
from policies.scores.gpu_packing import GpuPacking
from policies.scores.most_allocated import MostAllocated
from policies.scores.random_choice import RandomScore
from policies.scores.truncated import Truncated
from tests.factories import make_node, make_pod

NO_GANG = GangContext()


def rate(score: Score, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> float:
    return score.score(pod, node, shares, NO_GANG)


def busy_node() -> NodeInfo:
    """64 cores, 8 GPUs, devices 0-2 taken whole by pods holding 24 cores."""
    node = make_node("busy", cpu="64", gpus=8)
    node.charge({"cpu": 24000}, ((0, 1000), (1, 1000), (2, 1000)))
    return node


def mark_unhealthy(node: NodeInfo, *indices: int) -> None:
    node.devices = tuple(replace(d, healthy=d.index not in indices) for d in node.devices)


def best_choice(score: Score, pod: PodInfo, node: NodeInfo, chooser: TopologyChooser) -> int:
    """The device the planner would pick: the first candidate with the highest score."""
    best: tuple[float, DeviceShares] | None = None
    for shares in chooser.candidates(pod, node):
        value = rate(score, pod, node, shares)
        if best is None or value > best[0]:
            best = (value, shares)
    assert best is not None
    return best[1][0][0]


# --- BestFit ---------------------------------------------------------------------------


def test_best_fit_on_a_partly_used_node() -> None:
    # free CPU 40000 - 8000 = 32000; free GPU 5000 - 1000 = 4000;
    # 100 x (1 - (0.5 x 32000/128000 + 0.5 x 4000/8000)) = 100 x (1 - 0.375) = 62.5 -> 62
    pod = make_pod("p", cpu="8", gpus=1)
    assert rate(BestFit(), pod, busy_node(), ((3, 1000),)) == 62.0


def test_best_fit_ignores_the_devices_it_is_handed() -> None:
    pod = make_pod("p", cpu="8", vgpu=300)
    node = busy_node()
    scores = {rate(BestFit(), pod, node, ((i, 300),)) for i in range(3, 8)}
    # 32000/128000 x 0.5 + 4700/8000 x 0.5 = 0.125 + 0.29375 = 0.41875 -> 58.125 -> 58
    assert scores == {58.0}
    assert rate(BestFit(), pod, node) == 58.0


def test_best_fit_prefers_the_tighter_node() -> None:
    pod = make_pod("p", cpu="8", gpus=1)
    idle = make_node("idle", cpu="64", gpus=8)
    # 0.5 x 56000/128000 + 0.5 x 7000/8000 = 0.21875 + 0.4375 = 0.65625 -> 34.375 -> 34
    assert rate(BestFit(), pod, idle) == 34.0
    assert rate(BestFit(), pod, busy_node()) > rate(BestFit(), pod, idle)


def test_best_fit_clamps_to_0_and_100() -> None:
    # A node bigger than the maxima, left with more than them: the raw score is negative.
    huge = make_node("huge", cpu="512", gpus=8)
    assert rate(BestFit(), make_pod("p", cpu="1"), huge) == 0.0
    # Over-committed by pods of other schedulers: free CPU below the request, raw > 100.
    full = make_node("full", cpu="64", gpus=8)
    full.charge({"cpu": 128000}, tuple((i, 1000) for i in range(8)))
    assert rate(BestFit(), make_pod("p", cpu="8"), full) == 100.0


def test_best_fit_takes_the_largest_node_filled_exactly_as_full() -> None:
    node = make_node("big", cpu="128", gpus=8)
    assert rate(BestFit(), make_pod("p", cpu="128", gpus=8), node) == 100.0
    assert rate(BestFit(), make_pod("p", cpu="0"), node) == 0.0


def test_best_fit_counts_no_room_on_broken_or_overcommitted_devices() -> None:
    node = make_node("n", cpu="64", gpus=4)
    node.gpu_free = [-200, 1000, 500, 1000]
    mark_unhealthy(node, 3)
    # free GPU = 0 + 1000 + 500 = 1500; with the pod's 500: 1000 left.
    # 0.5 x 64000/128000 + 0.5 x 1000/8000 = 0.25 + 0.0625 = 0.3125 -> 68.75 -> 68
    pod = make_pod("p", cpu="0", vgpu=500)
    assert rate(BestFit(), pod, node, ((2, 500),)) == 68.0


def test_best_fit_with_other_maxima() -> None:
    # 0.5 x 32000/64000 + 0.5 x 4000/4000 = 0.75 -> 25
    assert rate(BestFit(64000, 4000), make_pod("p", cpu="8", gpus=1), busy_node()) == 25.0


@pytest.mark.parametrize("maxima", [(0, 8000), (128000, 0), (-1, -1)])
def test_maxima_must_be_positive(maxima: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="positive"):
        BestFit(*maxima)
    with pytest.raises(ValueError, match="positive"):
        DotProduct(*maxima)


# --- DotProduct --------------------------------------------------------------------------


def test_dot_product_on_a_partly_used_node() -> None:
    # free [40000/128000, 5000/8000] = [0.3125, 0.625]; request [8000/128000, 1000/8000] =
    # [0.0625, 0.125]; dot = 0.01953125 + 0.078125 = 0.09765625; /2 = 0.048828125;
    # 100 x (1 - 0.048828125) = 95.1171875 -> 95
    pod = make_pod("p", cpu="8", gpus=1)
    assert rate(DotProduct(), pod, busy_node(), ((3, 1000),)) == 95.0


def test_dot_product_prefers_free_room_least_aligned_with_the_request() -> None:
    pod = make_pod("p", cpu="8", gpus=1)
    idle = make_node("idle", cpu="64", gpus=8)
    # free [0.5, 1.0] . [0.0625, 0.125] = 0.03125 + 0.125 = 0.15625; /2 = 0.078125 -> 92
    assert rate(DotProduct(), pod, idle) == 92.0
    assert rate(DotProduct(), pod, busy_node()) > rate(DotProduct(), pod, idle)


def test_dot_product_extremes_and_clamping() -> None:
    big = make_node("big", cpu="128", gpus=8)
    # [1, 1] . [1, 1] = 2; 1 - 2/2 = 0
    assert rate(DotProduct(), make_pod("p", cpu="128", gpus=8), big) == 0.0
    # A pod asking nothing: dot 0 -> 100 on any node.
    assert rate(DotProduct(), make_pod("p", cpu="0"), big) == 100.0
    # Beyond the maxima: [4, 1] . [1, 1] = 5; 1 - 2.5 < 0 -> clamped to 0.
    huge = make_node("huge", cpu="512", gpus=8)
    assert rate(DotProduct(), make_pod("p", cpu="128", gpus=8), huge) == 0.0


def test_dot_product_reads_healthy_free_milli_only() -> None:
    node = make_node("n", cpu="64", gpus=4)
    node.gpu_free = [-200, 1000, 500, 1000]
    mark_unhealthy(node, 3)
    # free [0.5, 1500/8000 = 0.1875] . request [0, 500/8000 = 0.0625] = 0.01171875;
    # /2 = 0.005859375 -> 99.4140625 -> 99
    assert rate(DotProduct(), make_pod("p", cpu="0", vgpu=500), node) == 99.0


# --- GpuPacking --------------------------------------------------------------------------


def test_packing_gives_pods_without_gpu_the_minimum_everywhere() -> None:
    pod = make_pod("p", cpu="4")
    assert rate(GpuPacking(), pod, make_node("idle", gpus=8)) == 0.0
    assert rate(GpuPacking(), pod, busy_node()) == 0.0


def test_packing_idle_node_scores_33_minus_its_gpus() -> None:
    assert rate(GpuPacking(), make_pod("p", gpus=1), make_node("n8", gpus=8)) == 25.0
    assert rate(GpuPacking(), make_pod("p", vgpu=300), make_node("n2", gpus=2)) == 31.0
    # A broken device is neither free nor in use: 3 healthy devices, all free.
    node = make_node("n4", gpus=4)
    mark_unhealthy(node, 3)
    assert rate(GpuPacking(), make_pod("p", gpus=1), node) == 30.0


def test_packing_free_gpus_on_a_used_node_score_50_minus_their_count() -> None:
    node = busy_node()
    assert rate(GpuPacking(), make_pod("p", gpus=1), node, ((3, 1000),)) == 49.0
    assert rate(GpuPacking(), make_pod("p", gpus=2), node, ((3, 1000), (4, 1000))) == 48.0
    shares = tuple((i, 1000) for i in range(3, 8))
    assert rate(GpuPacking(), make_pod("p", gpus=5), node, shares) == 45.0
    # A share that must open a fully free device of a used node: 50 - 1.
    assert rate(GpuPacking(), make_pod("p", vgpu=300), node, ((5, 300),)) == 49.0


def test_packing_used_node_tier_is_floored_at_33() -> None:
    node = make_node("wide", gpus=20)
    node.charge({}, ((0, 1000),))
    shares = tuple((i, 1000) for i in range(1, 20))
    assert rate(GpuPacking(), make_pod("p", gpus=19), node, shares) == 33.0


def test_packing_shared_device_scores_100_minus_its_free_tenths() -> None:
    node = make_node("n", gpus=4)
    node.gpu_free = [600, 50, 999, 1000]
    pod = make_pod("p", vgpu=40)
    assert rate(GpuPacking(), pod, node, ((0, 40),)) == 94.0  # 600 // 100 = 6
    assert rate(GpuPacking(), pod, node, ((1, 40),)) == 100.0  # 50 // 100 = 0
    assert rate(GpuPacking(), pod, node, ((2, 40),)) == 91.0  # 999 // 100 = 9
    assert rate(GpuPacking(), pod, node, ((3, 40),)) == 49.0


def test_packing_tiers_in_order() -> None:
    pod = make_pod("p", vgpu=200)
    shared = make_node("shared", gpus=8)
    shared.gpu_free[0] = 900  # the emptiest partly used device still beats the rest
    used = busy_node()
    idle = make_node("idle", gpus=1)  # the best an idle node can score: 33 - 1
    tiers = [
        rate(GpuPacking(), pod, shared, ((0, 200),)),
        rate(GpuPacking(), pod, used, ((3, 200),)),
        rate(GpuPacking(), pod, idle, ((0, 200),)),
    ]
    assert tiers == [91.0, 49.0, 32.0]
    assert all(float(t).is_integer() for t in tiers)


def test_packing_with_the_best_fit_chooser_takes_the_simulators_device() -> None:
    node = make_node("n", gpus=4)
    node.gpu_free = [600, 1000, 300, 300]
    pod = make_pod("p", vgpu=200)
    # 300 -> 97 beats 600 -> 94 beats 1000 -> 49; the tie 2/3 goes to the lower index.
    assert best_choice(GpuPacking(), pod, node, TopologyChooser()) == 2
    # Without shares the score makes the same pick itself.
    assert rate(GpuPacking(), pod, node) == 97.0


def test_packing_scores_0_where_the_pod_does_not_fit() -> None:
    node = busy_node()
    assert rate(GpuPacking(), make_pod("p", gpus=6), node) == 0.0


# --- Random ------------------------------------------------------------------------------


def test_random_is_reproducible_per_seed() -> None:
    pod, node = make_pod("p", gpus=1), busy_node()
    seven = RandomScore(7)
    draws = [rate(seven, pod, node) for _ in range(20)]
    replay = RandomScore(7)
    assert [rate(replay, pod, node) for _ in range(20)] == draws
    other = RandomScore(8)
    assert [rate(other, pod, node) for _ in range(20)] != draws
    assert all(0.0 <= value < 100.0 for value in draws)
    assert len(set(draws)) == 20  # a fresh number per call, even for the same question


def test_random_is_not_memoizable_and_has_no_order() -> None:
    score = RandomScore(1)
    assert score.name == "random"
    assert score.candidate_order is None
    assert score.memoizable is False
    assert getattr(BestFit(), "memoizable", True) is True


def test_random_with_the_index_chooser_picks_every_fitting_device_alike() -> None:
    node = make_node("n", gpus=4)
    node.gpu_free = [600, 1000, 100, 1000]  # device 2 cannot take 200
    pod = make_pod("p", vgpu=200)
    score = RandomScore(42)
    picks = Counter(best_choice(score, pod, node, TopologyChooser("index")) for _ in range(600))
    assert set(picks) == {0, 1, 3}
    assert all(140 <= count <= 260 for count in picks.values()), picks


# --- Truncated ---------------------------------------------------------------------------


class Fixed:
    name = "fixed"
    candidate_order: CandidateOrder | None = "roomy"

    def __init__(self, value: float) -> None:
        self.value = value

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        return self.value


def test_truncated_drops_the_fraction() -> None:
    pod, node = make_pod("p"), busy_node()
    assert rate(Truncated(Fixed(62.9)), pod, node) == 62.0
    assert rate(Truncated(Fixed(99.999)), pod, node) == 99.0
    assert rate(Truncated(Fixed(100.0)), pod, node) == 100.0
    assert rate(Truncated(Fixed(0.4)), pod, node) == 0.0


def test_truncated_keeps_name_order_and_memoizability() -> None:
    fixed = Truncated(Fixed(1.0))
    assert (fixed.name, fixed.candidate_order, fixed.memoizable) == ("fixed-int", "roomy", True)
    packing = Truncated(MostAllocated())
    assert (packing.name, packing.candidate_order) == ("most-allocated-int", "tight")
    random_int = Truncated(RandomScore(3))
    assert (random_int.name, random_int.candidate_order) == ("random-int", None)
    assert random_int.memoizable is False


def test_truncated_scores_are_integers_and_ties_appear() -> None:
    pod = make_pod("p", cpu="1", vgpu=300)
    node = make_node("n", cpu="64", gpus=8)
    inner = MostAllocated()
    values = [rate(inner, pod, node, ((i, 300),)) for i in range(8)]
    truncated = [rate(Truncated(inner), pod, node, ((i, 300),)) for i in range(8)]
    assert truncated == [float(int(v)) for v in values]
    assert all(v.is_integer() for v in truncated)
    random_int = Truncated(RandomScore(5))
    draws = [rate(random_int, pod, node) for _ in range(200)]
    assert all(v.is_integer() and 0 <= v <= 99 for v in draws)
    assert len(set(draws)) < len(draws)  # integer scores tie


def test_truncating_an_integer_score_changes_nothing() -> None:
    pod = make_pod("p", cpu="8", gpus=1)
    for score in (BestFit(), DotProduct(), GpuPacking()):
        node = busy_node()
        assert rate(Truncated(score), pod, node, ((3, 1000),)) == rate(
            score, pod, node, ((3, 1000),)
        )
