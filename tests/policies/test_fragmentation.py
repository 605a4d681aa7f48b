"""The FGD fragmentation measure, its target workloads and the fragmentation score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.gpu import PRODUCT_LABEL, GpuDevice
from cache.node import NodeInfo
from policies.interface import GangContext, Score
from policies.scores.fragmentation import (
    Fragmentation,
    OnlineWorkload,
    TargetWorkload,
    WorkloadShape,
    most_frequent,
    node_fragmentation,
    shape_of,
)
from tests.factories import make_node, make_pod

CPU_ONLY = WorkloadShape(cpu_milli=1000)
HALF = WorkloadShape(cpu_milli=1000, gpu_milli=500, gpu_count=1)
WHOLE = WorkloadShape(cpu_milli=1000, gpu_milli=1000, gpu_count=1)
TWO_WHOLE = WorkloadShape(cpu_milli=1000, gpu_milli=1000, gpu_count=2)


def only(shape: WorkloadShape) -> TargetWorkload:
    return TargetWorkload({shape: 1.0})


def product_affinity(*terms: Sequence[tuple[str, str, list[str]]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": k, "operator": o, "values": v} for k, o, v in t]}
                    for t in terms
                ]
            }
        }
    }


# --- node_fragmentation, by hand ---------------------------------------------------------


def test_hand_computed_examples() -> None:
    free = [1000, 300, 0, 0]
    # The 500-milli shape fits on device 0; device 1's 300 it cannot use.
    assert node_fragmentation(8000, free, "A100", only(HALF)) == pytest.approx(300)
    # A CPU-only shape uses no GPU: all idle is fragmented.
    assert node_fragmentation(8000, free, "A100", only(CPU_ONLY)) == pytest.approx(1300)
    # Fewer than two devices have 1000 free: all idle.
    assert node_fragmentation(8000, free, "A100", only(TWO_WHOLE)) == pytest.approx(1300)
    # One whole GPU fits: only the 300 is lost.
    assert node_fragmentation(8000, free, "A100", only(WHOLE)) == pytest.approx(300)


def test_shares_weight_the_shapes() -> None:
    workload = TargetWorkload({HALF: 0.5, CPU_ONLY: 0.25, TWO_WHOLE: 0.25})
    expected = 0.5 * 300 + 0.25 * 1300 + 0.25 * 1300
    assert node_fragmentation(8000, [1000, 300, 0, 0], "", workload) == pytest.approx(expected)


def test_cpu_that_does_not_fit_makes_all_idle_fragmented() -> None:
    assert node_fragmentation(999, [1000, 300], "", only(HALF)) == pytest.approx(1300)
    assert node_fragmentation(1000, [1000, 300], "", only(HALF)) == pytest.approx(300)


def test_model_constraint() -> None:
    a100_only = WorkloadShape(1000, 500, 1, frozenset({"A100"}))
    assert node_fragmentation(8000, [1000, 300], "A100", only(a100_only)) == pytest.approx(300)
    assert node_fragmentation(8000, [1000, 300], "T4", only(a100_only)) == pytest.approx(1300)
    assert node_fragmentation(8000, [1000, 300], "", only(a100_only)) == pytest.approx(1300)


def test_unusable_free_counts_as_nothing() -> None:
    assert node_fragmentation(8000, [-200, 300], "", only(CPU_ONLY)) == pytest.approx(300)
    assert node_fragmentation(8000, [], "", only(CPU_ONLY)) == 0.0
    assert node_fragmentation(8000, [1000, 300], "", TargetWorkload({})) == 0.0


def reference_fragmentation(
    free_cpu: int, gpu_free: Sequence[int], model: str, workload: TargetWorkload
) -> float:
    """The README's rule, written as plainly as possible."""
    free = [max(0, f) for f in gpu_free]
    idle = sum(free)
    total = 0.0
    for shape, share in workload.shares.items():
        if shape.gpu_count == 0 or (shape.models is not None and model not in shape.models):
            part = idle
        elif sum(f >= shape.gpu_milli for f in free) >= shape.gpu_count and (
            free_cpu >= shape.cpu_milli
        ):
            part = sum(f for f in free if f < shape.gpu_milli)
        else:
            part = idle
        total += share * part
    return total


shapes = st.builds(
    WorkloadShape,
    cpu_milli=st.sampled_from([0, 1000, 4000, 16000]),
    gpu_milli=st.sampled_from([100, 250, 500, 810, 1000]),
    gpu_count=st.sampled_from([1, 1, 2, 4]),
    models=st.sampled_from([None, frozenset({"A"}), frozenset({"A", "B"}), frozenset({"B"})]),
).map(lambda s: s if s.gpu_count == 1 else WorkloadShape(s.cpu_milli, 1000, s.gpu_count, s.models))
workloads = st.dictionaries(
    st.one_of(shapes, st.builds(WorkloadShape, st.integers(0, 8000))),
    st.floats(0.01, 10.0),
    min_size=1,
    max_size=12,
).map(TargetWorkload)


@settings(max_examples=80, deadline=None)
@given(
    workload=workloads,
    free=st.lists(st.integers(-300, 1000), max_size=8),
    free_cpu=st.integers(-1000, 20000),
    model=st.sampled_from(["A", "B", ""]),
)
def test_matches_the_plain_reading_of_the_rule(
    workload: TargetWorkload, free: list[int], free_cpu: int, model: str
) -> None:
    expected = reference_fragmentation(free_cpu, free, model, workload)
    actual = node_fragmentation(free_cpu, free, model, workload)
    assert actual == pytest.approx(expected, abs=1e-6)
    assert 0.0 <= actual <= sum(max(0, f) for f in free) + 1e-6


# --- shapes ------------------------------------------------------------------------------


def test_shape_of_gpu_pods() -> None:
    assert shape_of(make_pod("p", cpu="3152m", vgpu=810)) == WorkloadShape(3152, 810, 1)
    assert shape_of(make_pod("p", cpu="8", gpus=4)) == WorkloadShape(8000, 1000, 4)
    assert shape_of(make_pod("p", cpu="8", vgpu=2000)) == WorkloadShape(8000, 1000, 2)


def test_shape_of_reads_the_model_from_node_selector_and_affinity() -> None:
    by_selector = make_pod("p", vgpu=500, node_selector={PRODUCT_LABEL: "V100M16"})
    assert shape_of(by_selector).models == frozenset({"V100M16"})
    by_affinity = make_pod(
        "p",
        vgpu=500,
        affinity=product_affinity(
            [(PRODUCT_LABEL, "In", ["V100M16", "V100M32"])], [(PRODUCT_LABEL, "In", ["T4"])]
        ),
    )
    assert shape_of(by_affinity).models == frozenset({"V100M16", "V100M32", "T4"})
    both = make_pod(
        "p",
        vgpu=500,
        node_selector={PRODUCT_LABEL: "V100M32"},
        affinity=product_affinity([(PRODUCT_LABEL, "In", ["V100M16", "V100M32"])]),
    )
    assert shape_of(both).models == frozenset({"V100M32"})


def test_shape_of_without_model_constraint() -> None:
    # One ORed term says nothing about the model: any model may do.
    open_term = make_pod(
        "p",
        vgpu=500,
        affinity=product_affinity([(PRODUCT_LABEL, "In", ["T4"])], [("zone", "In", ["a"])]),
    )
    assert shape_of(open_term).models is None
    not_in = make_pod("p", vgpu=500, affinity=product_affinity([(PRODUCT_LABEL, "NotIn", ["T4"])]))
    assert shape_of(not_in).models is None
    # A CPU-only pod's constraint does not matter to fragmentation, and is dropped.
    cpu_pod = make_pod("p", cpu="2", node_selector={PRODUCT_LABEL: "T4"})
    assert shape_of(cpu_pod) == WorkloadShape(2000)


@pytest.mark.parametrize("args", [(-1, 0, 0), (0, 500, 0), (0, 0, 1), (0, 1001, 1), (0, 500, -1)])
def test_impossible_shapes_are_refused(args: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        WorkloadShape(*args)


# --- target workloads --------------------------------------------------------------------


def shape(cpu: int) -> WorkloadShape:
    return WorkloadShape(cpu)


def test_coverage_keeps_the_most_frequent_shapes_reaching_95_percent() -> None:
    counts = {shape(4): 5, shape(1): 50, shape(3): 15, shape(2): 30}
    assert most_frequent(counts, 0.95) == {shape(1): 50, shape(2): 30, shape(3): 15}
    assert list(most_frequent(counts, 0.90)) == [shape(1), shape(2), shape(3)]
    assert list(most_frequent(counts, 0.80)) == [shape(1), shape(2)]
    assert list(most_frequent(counts, 1.0)) == [shape(1), shape(2), shape(3), shape(4)]
    workload = TargetWorkload.from_counts(counts)
    assert dict(workload.shares) == pytest.approx(
        {shape(1): 50 / 95, shape(2): 30 / 95, shape(3): 15 / 95}
    )


def test_coverage_rule_on_many_rare_shapes() -> None:
    # 20 shapes of 1 pod each: 95% is 19 pods, so 19 shapes, the first met kept on ties.
    counts = {shape(i): 1 for i in range(20)}
    assert list(most_frequent(counts)) == [shape(i) for i in range(19)]


@pytest.mark.parametrize("coverage", [0.0, -0.1, 1.5])
def test_bad_coverage_is_refused(coverage: float) -> None:
    with pytest.raises(ValueError):
        most_frequent({shape(1): 1}, coverage)
    with pytest.raises(ValueError):
        OnlineWorkload(coverage)


def test_from_pods_counts_shapes() -> None:
    pods = [make_pod(f"a{i}", cpu="1", vgpu=500) for i in range(6)]
    pods += [make_pod(f"b{i}", cpu="2", gpus=2) for i in range(3)]
    pods += [make_pod("c", cpu="1")]
    workload = TargetWorkload.from_pods(pods, coverage=0.9)
    assert dict(workload.shares) == pytest.approx(
        {WorkloadShape(1000, 500, 1): 6 / 9, WorkloadShape(2000, 1000, 2): 3 / 9}
    )
    assert workload.current() is workload


def test_target_workload_normalises_and_checks_shares() -> None:
    workload = TargetWorkload({HALF: 3.0, WHOLE: 1.0, CPU_ONLY: 0.0})
    assert dict(workload.shares) == {HALF: 0.75, WHOLE: 0.25}
    assert len(workload) == 2
    with pytest.raises(ValueError):
        TargetWorkload({HALF: -1.0})


def test_online_workload_learns_lazily_and_counts_each_pod_once() -> None:
    online = OnlineWorkload()
    assert len(online.current()) == 0
    first = make_pod("a", cpu="1", vgpu=500)
    assert online.observe(first)
    learned = online.current()
    assert dict(learned.shares) == {WorkloadShape(1000, 500, 1): 1.0}
    assert online.current() is learned  # nothing new: not recomputed
    assert not online.observe(first)  # a retried pod is not counted twice
    assert online.current() is learned
    online.observe(make_pod("b", cpu="1", gpus=1))
    assert dict(online.current().shares) == pytest.approx(
        {WorkloadShape(1000, 500, 1): 0.5, WorkloadShape(1000, 1000, 1): 0.5}
    )
    assert online.observed == 2


def test_online_workload_moves_in_steps_past_its_first_pods() -> None:
    """After each of the first pods, then each time the pods seen grow by a tenth
    (rebuild_due): between two steps `current()` and `learning_step()` stay put."""
    online = OnlineWorkload()
    steps = []
    held = online.current()
    for i in range(41):
        online.observe(make_pod(f"p{i}", cpu="1", gpus=1 + i % 2))
        step = online.learning_step()
        if not steps or step != steps[-1]:
            steps.append(step)
            assert online.current() is not held
            held = online.current()
        assert online.current() is held
    assert steps == [*range(1, 11), 11, 13, 15, 17, 19, 21, 24, 27, 30, 33, 37, 41]
    every = OnlineWorkload(growth=0.0)
    every.observe(make_pod("a", cpu="1", gpus=1))
    first = every.current()
    every.observe(make_pod("b", cpu="1", gpus=2))
    assert every.current() is not first  # growth 0: each new pod
    with pytest.raises(ValueError, match="growth"):
        OnlineWorkload(growth=-1.0)


# --- the score ---------------------------------------------------------------------------


def test_protocol_attributes() -> None:
    score: Score = Fragmentation(only(HALF))
    assert (score.name, score.candidate_order) == ("fragmentation", None)


def test_filling_a_hole_beats_opening_a_new_gpu() -> None:
    node = make_node("n", cpu="64", gpus=2, model="A100")
    node.charge({}, ((1, 500),))  # free [1000, 500]
    workload = TargetWorkload({HALF: 0.5, WHOLE: 0.5})
    fgd = Fragmentation(workload)
    pod = make_pod("p", cpu="1", vgpu=500)
    into_hole = fgd.score(pod, node, ((1, 500),), GangContext())
    new_gpu = fgd.score(pod, node, ((0, 500),), GangContext())
    # before 250 (the WHOLE shape cannot use the 500); hole: after 0; new GPU: after 500.
    assert into_hole == pytest.approx(100 / (1 + 2.718281828459045**-0.25))
    assert new_gpu == pytest.approx(100 - into_hole)
    assert into_hole > 50 > new_gpu
    assert node.gpu_free == [1000, 500]  # the node is never touched


def test_no_change_scores_50_and_cpu_counts_in_after() -> None:
    node = make_node("n", cpu="4", gpus=1)
    fgd = Fragmentation(only(HALF))
    # A pod with no GPU taking no CPU changes nothing.
    assert fgd.score(make_pod("p", cpu="0"), node, (), GangContext()) == pytest.approx(50.0)
    # Taking all the CPU leaves the free GPU unusable for the shape: worse.
    assert fgd.score(make_pod("p", cpu="4"), node, (), GangContext()) < 50.0


def test_model_comes_from_the_product_label() -> None:
    a100 = WorkloadShape(1000, 1000, 1, frozenset({"NVIDIA-A100"}))
    node = make_node("n", cpu="64", gpus=2, model="NVIDIA-A100")
    fgd = Fragmentation(only(a100))
    pod = make_pod("p", cpu="1", gpus=1)
    # On its model the shape still fits after the pod: no fragmentation either way.
    assert fgd.fragmentation_change(pod, node, ((0, 1000),)) == pytest.approx(0.0)
    other = make_node("m", cpu="64", gpus=2, model="T4")
    # Not its model: all idle is fragmented, and taking a GPU lowers it by 1000.
    assert fgd.fragmentation_change(pod, other, ((0, 1000),)) == pytest.approx(1000.0)


def test_unhealthy_devices_offer_nothing() -> None:
    devices = tuple(GpuDevice(i, f"G{i}", "A100", 0, 0, healthy=i == 0) for i in range(2))
    node = NodeInfo("n", allocatable={"cpu": 8000}, devices=devices)
    fgd = Fragmentation(only(CPU_ONLY))
    # Only device 0's 1000 counts; taking 300 of it lowers idle by 300.
    pod = make_pod("p", cpu="0", vgpu=300)
    assert fgd.fragmentation_change(pod, node, ((0, 300),)) == pytest.approx(300.0)


def test_a_new_online_workload_is_used_at_once() -> None:
    online = OnlineWorkload()
    fgd = Fragmentation(online)
    node = make_node("n", cpu="64", gpus=2)
    node.charge({}, ((1, 500),))
    pod = make_pod("p", cpu="1", vgpu=500)
    assert fgd.score(pod, node, ((1, 500),), GangContext()) == pytest.approx(50.0)
    online.observe(make_pod("w", cpu="1", gpus=1))
    # Now whole-GPU pods are expected: the hole of 500 is waste, filling it helps.
    assert fgd.score(pod, node, ((1, 500),), GangContext()) > 50.0


def test_small_memo_gives_the_same_answers() -> None:
    workload = TargetWorkload({HALF: 0.5, WHOLE: 0.3, CPU_ONLY: 0.2})
    big, tiny = Fragmentation(workload), Fragmentation(workload, memo_size=1)
    node = make_node("n", cpu="16", gpus=4)
    node.charge({"cpu": 4000}, ((0, 700), (2, 200)))
    pod = make_pod("p", cpu="2", vgpu=300)
    for _ in range(2):
        for device in range(4):
            shares = ((device, 300),)
            assert big.score(pod, node, shares, GangContext()) == tiny.score(
                pod, node, shares, GangContext()
            )
    with pytest.raises(ValueError):
        Fragmentation(workload, memo_size=0)


@settings(max_examples=60, deadline=None)
@given(
    workload=workloads,
    used=st.lists(st.integers(0, 1200), min_size=4, max_size=4),
    cpu_used=st.integers(0, 70_000),
    vgpu=st.sampled_from([0, 100, 500, 1000, 2000, 4000]),
    device=st.integers(0, 3),
)
def test_score_stays_within_0_and_100(
    workload: TargetWorkload, used: list[int], cpu_used: int, vgpu: int, device: int
) -> None:
    node = make_node("n", cpu="64", gpus=4, model="A")
    node.charge({"cpu": cpu_used}, tuple(enumerate(used)))
    pod = make_pod("p", cpu="4", vgpu=vgpu)
    if pod.gpu.fractional:
        shares: tuple[tuple[int, int], ...] = ((device, pod.gpu.milli),)
    else:
        shares = tuple((i, pod.gpu.milli) for i in range(pod.gpu.count))
    value = Fragmentation(workload).score(pod, node, shares, GangContext())
    assert 0.0 <= value <= 100.0
