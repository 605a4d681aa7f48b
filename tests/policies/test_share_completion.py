"""Share completion: the expected milli a node's open holes end up wasting."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.pod import PodInfo, pod_from_api
from policies.interface import GangContext
from policies.profile import build_profile
from policies.scores.fragmentation import OnlineWorkload, TargetWorkload, shape_of
from policies.scores.share_completion import (
    MAX_CPU_STEPS,
    DeviceRequest,
    LearnedShareCompletion,
    ShareCompletion,
    coarsened,
    device_requests,
    device_requests_of_shapes,
    waste_table,
)
from scheduler.sim.openb import TRACES, OpenbPod, bundled_file, load_pods, pod_object
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


def _mixed_pods() -> list[PodInfo]:
    return [
        make_pod("two", cpu="8", gpus=2),
        make_pod("share-a", cpu="4", vgpu=500),
        make_pod("share-b", cpu="4", vgpu=500),
        make_pod("cpu", cpu="16"),
    ]


def test_device_requests_split_multi_gpu_pods_and_skip_cpu_only() -> None:
    assert device_requests(_mixed_pods()) == {
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


def test_device_requests_of_shapes_count_as_device_requests_of_the_pods() -> None:
    pods = _mixed_pods()
    counts = Counter(shape_of(pod) for pod in pods)
    assert device_requests_of_shapes(counts) == device_requests(pods)


def _hole_or_fresh(score: LearnedShareCompletion) -> tuple[float, float]:
    """The score of a 160 share completing the 190 hole an 810 share left, and of it
    opening a fresh device, on one node."""
    pod = make_pod("small", cpu="1", vgpu=160)
    node = make_node("n", gpus=2)
    node.gpu_free = [190, 1000]
    context = GangContext()
    return score.score(pod, node, ((0, 160),), context), score.score(
        pod, node, ((1, 160),), context
    )


def test_learned_from_an_online_workload_counts_the_rare_shapes_coverage_drops() -> None:
    workload = OnlineWorkload()
    score = LearnedShareCompletion(workload)
    # It moves in steps as pods are observed; within one its answers may be kept.
    assert score.memoizable and score.learning_step() == 1
    # No pod seen yet: no request is expected, so every open hole is waste for good.
    assert score.learnt.expected_waste((190, 1000), 4000, "") == 190.0
    pods = [make_pod(f"big-{i}", cpu="1", vgpu=810) for i in range(97)]
    pods += [make_pod(f"small-{i}", cpu="1", vgpu=160) for i in range(3)]
    for pod in pods:
        workload.observe(pod)
    # The 160s are 3% of the pods: the target workload FGD reads leaves them out...
    assert shape_of(pods[-1]) not in workload.current().shares
    # ...share completion counts them, as from the whole history.
    learnt = score.learnt.score(pods[-1], make_node("m", gpus=1), ((0, 160),), GangContext())
    whole = ShareCompletion(device_requests(pods))
    assert learnt == pytest.approx(
        whole.score(pods[-1], make_node("m", gpus=1), ((0, 160),), GangContext())
    )
    complete, fresh = _hole_or_fresh(score)
    assert complete > fresh
    assert score.learning_step() == 2  # one build since: all 100 pods at once


def test_learned_share_completion_is_rebuilt_as_the_observed_pods_grow_by_a_tenth() -> None:
    workload = OnlineWorkload()
    score = LearnedShareCompletion(workload, growth=0.1)
    builds = []
    for i in range(120):
        workload.observe(make_pod(f"p-{i}", cpu="1", vgpu=500))
        learnt = score.learnt
        if not builds or learnt is not builds[-1][1]:
            builds.append((workload.observed, learnt))
        assert score.learnt is learnt  # nothing new observed: the same one
    # After each of the first ten pods, then each time the count grows by a tenth.
    assert [seen for seen, _ in builds] == [
        *range(1, 11),
        11,
        13,
        15,
        17,
        19,
        21,
        24,
        27,
        30,
        33,
        37,
        41,
        46,
        51,
        57,
        63,
        70,
        77,
        85,
        94,
        104,
        115,
    ]


def test_learned_from_a_fixed_workload_is_memoizable_and_built_once() -> None:
    pods = [make_pod("big", cpu="1", vgpu=810), make_pod("small", cpu="1", vgpu=160)]
    workload = TargetWorkload.from_pods(pods, coverage=1.0)
    score = LearnedShareCompletion(workload)
    assert score.memoizable
    assert score.learnt is score.learnt
    complete, fresh = _hole_or_fresh(score)
    assert complete > fresh


def test_fgd_complete_named_policy_breaks_fgd_ties_by_share_completion_then_fill() -> None:
    profile = build_profile("fgd-complete")
    weights = {score.name: weight for score, weight in profile.node_scores}
    assert weights["fragmentation-int"] == 1.0
    assert weights["fragmentation-int"] > 100 * weights["share-completion"]
    assert weights["share-completion"] > 100 * weights["fill-fragmentation"]
    learnt = [s for s, _ in profile.node_scores if isinstance(s, LearnedShareCompletion)]
    assert learnt and learnt[0].workload is profile.workload  # the core feeds this one


def test_tenants_cannot_make_the_learnt_model_costly() -> None:
    # Every GPU pod of its own share size and CPU amount: the learnt requests keep at
    # most 100 share sizes and MAX_CPU_STEPS CPU amounts, each rounded up, never down.
    workload = OnlineWorkload()
    for i in range(3000):
        workload.observe(make_pod(f"odd-{i}", cpu=f"{1000 + 7 * i}m", vgpu=1 + i % 999))
    requests = LearnedShareCompletion(workload).learnt.requests
    assert len({r.milli for r in requests}) <= 100
    assert len({r.cpu_milli for r in requests}) <= MAX_CPU_STEPS
    assert max(r.cpu_milli for r in requests) == 1000 + 7 * 2999
    exact = device_requests_of_shapes(workload.shape_counts())
    assert sum(coarsened(exact).values()) == pytest.approx(sum(exact.values()))  # all kept
    for request in exact:
        (rounded,) = coarsened({request: 1.0})
        assert rounded.milli >= request.milli and rounded.cpu_milli >= request.cpu_milli


def test_requests_within_the_bounds_are_learnt_exactly() -> None:
    requests = {DeviceRequest(810, 4000): 3.0, DeviceRequest(160, 2000, frozenset({"T4"})): 1.0}
    assert coarsened(requests) == requests


@pytest.mark.parametrize("trace", sorted(TRACES))
def test_the_bundled_traces_requests_are_within_the_bounds(trace: str) -> None:
    trace_pods = load_pods(bundled_file(TRACES[trace]))
    pods = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(trace_pods)]
    requests = device_requests(pods)
    assert coarsened(requests) == requests
