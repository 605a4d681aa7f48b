"""Share completion: the expected milli a node's open holes end up wasting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.pod import pod_from_api
from policies.interface import GangContext
from policies.scores.share_completion import (
    DeviceRequest,
    ShareCompletion,
    device_requests,
    waste_table,
)
from scheduler.sim.openb import OpenbPod, pod_object
from scheduler.sim.profiles import OPENB_POLICIES, PAPER_NAMES, openb_profile
from tests.factories import make_node, make_pod

SIZES = st.dictionaries(
    st.integers(1, 1000), st.floats(0.001, 1.0, allow_nan=False), min_size=1, max_size=6
)


def test_one_size_hand_computed() -> None:
    # a = 1 / (1 + 0.25) = 0.8 whenever the 500 fits.
    table = waste_table({500: 1.0}, competition=0.25)
    assert table[0] == 0.0
    assert table[499] == 499.0  # nothing fits: all of it is waste
    assert table[500] == pytest.approx(0.2 * 500)
    assert table[999] == pytest.approx(0.2 * 999 + 0.8 * 499)
    assert table[1000] == pytest.approx(0.2 * 1000 + 0.8 * 100)


def test_two_sizes_hand_computed() -> None:
    # competition 1: a = 1/2 where both fit (P = 1), 1/3 where only the 300 does.
    table = waste_table({300: 0.5, 700: 0.5}, competition=1.0)
    assert table[100] == 100.0
    assert table[300] == pytest.approx(2 / 3 * 300)
    assert table[400] == pytest.approx(2 / 3 * 400 + 1 / 3 * 100)  # 300
    assert table[700] == pytest.approx(0.5 * 700 + 0.5 * (0.5 * 300 + 0.5 * 0))  # 425
    assert table[1000] == pytest.approx(0.5 * 1000 + 0.5 * (0.5 * 425 + 0.5 * 200))


def test_a_hole_only_rare_requests_fit_is_mostly_waste() -> None:
    # The 190 left by an 810 share: only the 160s fit it. Rare 160s (1% of the devices
    # asked) fill it one time in six at competition 0.05; common ones nearly always.
    rare = waste_table({160: 0.01, 810: 0.99}, competition=0.05)
    assert rare[190] == pytest.approx(5 / 6 * 190 + 1 / 6 * 30)
    common = waste_table({160: 0.5, 810: 0.5}, competition=0.05)
    assert common[190] == pytest.approx(1 / 11 * 190 + 10 / 11 * 30)
    assert common[190] < 50.0 < rare[190]


@settings(max_examples=40, deadline=None)
@given(SIZES, st.floats(0.001, 1.0), st.floats(0.001, 1.0))
def test_waste_is_at_most_the_hole_and_grows_with_competition(
    sizes: dict[int, float], low: float, high: float
) -> None:
    low, high = min(low, high), max(low, high)
    easy, hard = waste_table(sizes, low), waste_table(sizes, high)
    smallest = min(sizes)
    for free in range(1001):
        assert 0.0 <= easy[free] <= hard[free] + 1e-9
        assert hard[free] <= free + 1e-9
        if free < smallest:
            assert easy[free] == hard[free] == free


def test_free_cpu_below_every_request_wastes_every_hole() -> None:
    score = ShareCompletion({DeviceRequest(500, 4000): 1.0}, competition=0.25)
    holes = (500, 300, 1000, 0)
    # Idle devices count nothing (whole-GPU requests take them); holes all or in part.
    assert score.expected_waste(holes, 3999, "") == 800.0
    assert score.expected_waste(holes, 4000, "") == pytest.approx(0.2 * 500 + 300)
    # A request pinned to another model does not fit either.
    pinned = ShareCompletion({DeviceRequest(500, 0, frozenset({"A100"})): 1.0})
    assert pinned.expected_waste(holes, 64000, "T4") == 800.0
    assert pinned.expected_waste(holes, 64000, "A100") < 800.0


def test_device_requests_split_multi_gpu_pods_and_skip_cpu_only() -> None:
    pods = [
        make_pod("two", cpu="8", gpus=2),
        make_pod("share-a", cpu="4", vgpu=500),
        make_pod("share-b", cpu="4", vgpu=500),
        make_pod("cpu", cpu="16"),
    ]
    assert device_requests(pods) == {
        DeviceRequest(1000, 4000): 2.0,
        DeviceRequest(500, 4000): 2.0,
    }
    with pytest.raises(ValueError):
        DeviceRequest(0, 0)


def test_score_completes_a_hole_rather_than_open_a_new_one() -> None:
    score = ShareCompletion({DeviceRequest(500, 1000): 0.5, DeviceRequest(1000, 1000): 0.5})
    pod = make_pod("p", cpu="1", vgpu=500)
    node = make_node("n", gpus=2)
    node.gpu_free = [500, 1000]
    complete = score.score(pod, node, ((0, 500),), GangContext())
    fresh = score.score(pod, node, ((1, 500),), GangContext())
    assert complete > 50.0 > fresh
    assert score.memoizable


def test_score_pays_for_taking_the_cpu_an_open_hole_needs() -> None:
    score = ShareCompletion({DeviceRequest(500, 4000): 0.5, DeviceRequest(1000, 4000): 0.5})
    pod = make_pod("p", cpu="4", gpus=1)
    tight, roomy = make_node("tight", cpu="6", gpus=2), make_node("roomy", gpus=2)
    for node in (tight, roomy):
        node.gpu_free = [500, 1000]
    # Taking a whole GPU and 4 of 6 cores leaves the 500 hole no request fits.
    assert score.change(pod, tight, ((1, 1000),)) == pytest.approx(
        score.expected_waste((500,), 6000, "") - 500.0
    )
    assert score.change(pod, roomy, ((1, 1000),)) == 0.0
    assert score.score(pod, tight, ((1, 1000),), GangContext()) < score.score(
        pod, roomy, ((1, 1000),), GangContext()
    )


def test_fgd_complete_profile_puts_share_completion_before_fill() -> None:
    assert "fgd-complete" in OPENB_POLICIES and "fgd-complete" in PAPER_NAMES
    history = [
        pod_from_api(pod_object(OpenbPod("a", 1000, 1024, 1, 500), 0)),
        pod_from_api(pod_object(OpenbPod("b", 120_000, 1024, 8, 1000), 1)),
    ]
    profile = openb_profile(
        "fgd-complete", seed=1, max_cpu_milli=128_000, max_gpu_milli=8000, history=history
    )
    names = [score.name for score, _ in profile.node_scores]
    assert names == [
        "fragmentation-int",
        "keep-whole-nodes",
        "share-completion",
        "fill-fragmentation",
    ]
    weights = [weight for _, weight in profile.node_scores]
    # Share completion in fill fragmentation's place in fgd-keep-largest (at most 0.001,
    # below keep-whole's steps); fill at its best below a 1-point step of completion.
    assert weights[:2] == [1.0, 0.5] and weights[2] * 100 <= 0.001
    assert weights[3] * 100 < weights[2]
    assert profile.memoizable
