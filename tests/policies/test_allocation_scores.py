"""MostAllocated (bin-packing) and LeastAllocated (spread) over cpu, memory and GPU milli."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.gpu import GpuDevice
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.interface import GangContext, Score
from policies.scores.least_allocated import LeastAllocated
from policies.scores.most_allocated import MostAllocated
from tests.factories import make_node, make_pod

GIB = 2**30


def gpu_node(name: str = "n", gpus: int = 4) -> NodeInfo:
    return make_node(name, cpu="64", memory="256Gi", gpus=gpus, model="A100")


def test_names_and_candidate_order_satisfy_the_protocol() -> None:
    scores: list[Score] = [MostAllocated(), LeastAllocated()]
    assert [(s.name, s.candidate_order) for s in scores] == [
        ("most-allocated", "tight"),
        ("least-allocated", "roomy"),
    ]


def test_formula_by_hand_for_whole_gpus() -> None:
    # After placing: cpu 16/64, memory 64/256, GPU 2000/4000 milli; weights 1, 1, 2.
    pod = make_pod("p", cpu="16", memory="64Gi", gpus=2)
    used = (0.25 + 0.25 + 2 * 0.5) / 4
    shares = ((0, 1000), (1, 1000))
    assert MostAllocated().score(pod, gpu_node(), shares, GangContext()) == pytest.approx(
        100 * used
    )
    assert LeastAllocated().score(pod, gpu_node(), shares, GangContext()) == pytest.approx(
        100 * (1 - used)
    )


def test_existing_load_counts() -> None:
    node = gpu_node()
    node.charge({"cpu": 16000, "memory": 64 * GIB}, ((0, 1000), (1, 500)))
    pod = make_pod("p", cpu="16", memory="64Gi", gpus=1)
    # cpu 32/64, memory 128/256, GPU (1500 + 1000)/4000
    used = (0.5 + 0.5 + 2 * 2500 / 4000) / 4
    score = MostAllocated().score(pod, node, ((2, 1000),), GangContext())
    assert score == pytest.approx(100 * used)


def test_fractional_pod_folds_device_tightness_into_the_gpu_term() -> None:
    node = gpu_node()
    node.charge({}, ((0, 600),))  # device 0 has 400 free, devices 1..3 1000
    pod = make_pod("p", cpu="0", memory="0", vgpu=300)
    node_part = (600 + 300) / 4000
    tight = (node_part + (1 - 100 / 1000)) / 2
    roomy = (node_part + (1 - 700 / 1000)) / 2
    most, least = MostAllocated({"gpu": 1}), LeastAllocated({"gpu": 1})
    gang = GangContext()
    assert most.score(pod, node, ((0, 300),), gang) == pytest.approx(100 * tight)
    assert most.score(pod, node, ((1, 300),), gang) == pytest.approx(100 * roomy)
    assert least.score(pod, node, ((1, 300),), gang) > least.score(pod, node, ((0, 300),), gang)


def test_most_allocated_prefers_the_fuller_node_and_least_the_emptier() -> None:
    empty, busy = gpu_node("empty"), gpu_node("busy")
    busy.charge({"cpu": 32000, "memory": 100 * GIB}, ((0, 1000), (1, 1000)))
    pod = make_pod("p", cpu="4", memory="8Gi", gpus=1)
    gang = GangContext()
    most, least = MostAllocated(), LeastAllocated()
    assert most.score(pod, busy, ((2, 1000),), gang) > most.score(pod, empty, ((0, 1000),), gang)
    assert least.score(pod, empty, ((0, 1000),), gang) > least.score(pod, busy, ((2, 1000),), gang)


def test_gpu_is_skipped_on_a_node_without_gpus() -> None:
    node = make_node("cpu-only", cpu="64", memory="256Gi")
    pod = make_pod("p", cpu="16", memory="128Gi")
    assert MostAllocated().score(pod, node, (), GangContext()) == pytest.approx(
        100 * (0.25 + 0.5) / 2
    )


def test_cpu_pod_on_a_gpu_node_still_counts_the_gpus_load() -> None:
    node = gpu_node()
    node.charge({}, ((0, 1000), (1, 1000)))
    pod = make_pod("p", cpu="16", memory="64Gi")
    used = (0.25 + 0.25 + 2 * 0.5) / 4
    assert MostAllocated().score(pod, node, (), GangContext()) == pytest.approx(100 * used)


def test_unhealthy_devices_are_neither_room_nor_load() -> None:
    devices = tuple(GpuDevice(i, f"GPU-{i}", "A100", 81920, 0, healthy=i < 2) for i in range(4))
    node = NodeInfo("n", allocatable={"cpu": 64000}, devices=devices)
    pod = PodInfo("u", "default", "p", requests={"cpu": 0})
    # Two healthy GPUs, both free: GPU utilisation 0 (not 0.5), cpu 0.
    assert MostAllocated().score(pod, node, (), GangContext()) == pytest.approx(0.0)


def test_over_committed_node_is_clipped_to_full() -> None:
    node = make_node("n", cpu="4", memory="4Gi")
    node.charge({"cpu": 8000, "memory": 8 * GIB}, ())
    pod = make_pod("p", cpu="1", memory="1Gi")
    assert MostAllocated().score(pod, node, (), GangContext()) == pytest.approx(100.0)
    assert LeastAllocated().score(pod, node, (), GangContext()) == pytest.approx(0.0)


def test_custom_weights_and_unknown_resources() -> None:
    node = make_node("n", cpu="10", memory="100Gi")
    pod = make_pod("p", cpu="5", memory="1Gi")
    only_cpu = MostAllocated({"cpu": 1, "example.com/fpga": 3})  # node lacks the fpga
    assert only_cpu.score(pod, node, (), GangContext()) == pytest.approx(50.0)
    # Nothing weighted exists on the node: 0, as kube-scheduler gives.
    assert MostAllocated({"gpu": 1}).score(pod, node, (), GangContext()) == 0.0
    assert LeastAllocated({"gpu": 1}).score(pod, node, (), GangContext()) == 0.0


@pytest.mark.parametrize("weights", [{"cpu": -1.0}, {"cpu": 0.0}, {"cpu": float("nan")}, {}])
def test_bad_weights_are_refused(weights: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        MostAllocated(weights)
    with pytest.raises(ValueError):
        LeastAllocated(weights)


@settings(max_examples=60, deadline=None)
@given(
    cpu_used=st.integers(0, 200_000),
    mem_used=st.integers(0, 600 * GIB),
    gpu_used=st.lists(st.integers(-500, 1000), min_size=4, max_size=4),
    pod_cpu=st.integers(0, 100),
    vgpu=st.sampled_from([0, 100, 470, 999, 1000, 2000]),
    device=st.integers(0, 3),
)
def test_scores_stay_within_0_and_100_and_mirror_each_other(
    cpu_used: int, mem_used: int, gpu_used: list[int], pod_cpu: int, vgpu: int, device: int
) -> None:
    node = gpu_node()
    node.charge({"cpu": cpu_used, "memory": mem_used}, tuple(enumerate(gpu_used)))
    pod = make_pod("p", cpu=str(pod_cpu), memory="1Gi", vgpu=vgpu)
    if pod.gpu.count == 0:
        shares: tuple[tuple[int, int], ...] = ()
    elif pod.gpu.fractional:
        shares = ((device, pod.gpu.milli),)
    else:
        shares = tuple((i, 1000) for i in range(pod.gpu.count))
    most = MostAllocated().score(pod, node, shares, GangContext())
    least = LeastAllocated().score(pod, node, shares, GangContext())
    assert 0.0 <= most <= 100.0
    assert 0.0 <= least <= 100.0
    assert most + least == pytest.approx(100.0)
