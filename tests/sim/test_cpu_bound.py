"""policies/cpu_bound.py: the CPU pressure of a workload on a cluster, and where
fgd-complete-reserve steps aside for FGD (issue 32)."""

from __future__ import annotations

import math

import pytest

from cache.pod import pod_from_api
from policies.cpu_bound import (
    MIN_PODS_SEEN,
    STEP_ASIDE_PRESSURE,
    LearnedCpuBound,
    cpu_bound,
    cpu_pressure,
)
from policies.profile import POLICIES, build_profile
from policies.scores.fragmentation import OnlineWorkload, WorkloadShape
from scheduler.sim.openb import OpenbPod, pod_object
from scheduler.sim.profiles import BEST_POLICY, openb_profile

GPU_POD = WorkloadShape(8000, 1000, 1)  # 8 cores with one whole GPU
CPU_POD = WorkloadShape(16000)


def test_pressure_is_the_workload_cpu_per_gpu_over_the_clusters() -> None:
    # The cluster: 16 cores per GPU. The workload: (8 + 16) cores per GPU.
    assert cpu_pressure({GPU_POD: 1, CPU_POD: 1}, 16_000, 1000) == pytest.approx(1.5)
    # Shares and counts weigh alike.
    assert cpu_pressure({GPU_POD: 0.75, CPU_POD: 0.25}, 16_000, 1000) == pytest.approx(
        cpu_pressure({GPU_POD: 3, CPU_POD: 1}, 16_000, 1000)
    )
    assert cpu_pressure({GPU_POD: 1}, 16_000, 1000) == pytest.approx(0.5)


def test_nothing_known_is_no_pressure_and_cpu_only_work_is_all_pressure() -> None:
    assert cpu_pressure({}, 16_000, 1000) == 0.0
    assert cpu_pressure({GPU_POD: 1}, 0, 1000) == 0.0
    assert cpu_pressure({GPU_POD: 1}, 16_000, 0) == 0.0
    assert math.isinf(cpu_pressure({CPU_POD: 1}, 16_000, 1000))


def test_cpu_bound_at_the_measured_pressure() -> None:
    cluster_cpu = 16_000
    # 8 cores of a GPU pod plus x cores of CPU-only work per GPU, against 16 per GPU.
    at = WorkloadShape(round(16_000 * STEP_ASIDE_PRESSURE) - 8000)
    assert cpu_bound({GPU_POD: 1, at: 1}, cluster_cpu, 1000)
    below = WorkloadShape(at.cpu_milli - 200)
    assert not cpu_bound({GPU_POD: 1, below: 1}, cluster_cpu, 1000)


def history(cpu_only: int) -> list:
    pods = [OpenbPod(f"g{i}", 8000, 1024, 1, 1000) for i in range(4)]
    pods += [OpenbPod(f"c{i}", 16000, 1024, 0, 0) for i in range(cpu_only)]
    return [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]


def names(profile) -> list:  # type: ignore[no-untyped-def]
    return [(score.name, weight) for score, weight in profile.node_scores]


def test_the_best_policy_is_fgds_profile_where_cpu_runs_out_first() -> None:
    sizes = {"seed": 1, "max_cpu_milli": 16_000, "max_gpu_milli": 1000}
    cluster = {"cluster_cpu_milli": 4 * 16_000, "cluster_gpu_milli": 4 * 1000}
    fgd = openb_profile("fgd", history=history(4), **sizes)
    # Pressure (32 + 64) / 64 = 1.5: FGD's scores, no preference, no reserve.
    stepped = openb_profile(BEST_POLICY, history=history(4), **sizes, **cluster)
    assert names(stepped) == names(fgd)
    assert stepped.preference is None and stepped.whole_node_reserve is None
    # Pressure 0.5: its own tie-breaks.
    own = openb_profile(BEST_POLICY, history=history(0), **sizes, **cluster)
    assert len(own.node_scores) > len(fgd.node_scores)
    # Without the cluster's totals it cannot tell, and keeps its own.
    blind = openb_profile(BEST_POLICY, history=history(4), **sizes)
    assert len(blind.node_scores) > len(fgd.node_scores)


def test_the_kubernetes_profile_steps_aside_for_the_fgd_policy() -> None:
    profile = build_profile("fgd-complete-reserve")
    gate = profile.step_aside
    assert isinstance(gate, LearnedCpuBound) and gate.workload is profile.workload
    fallback = gate.fallback
    assert [(s.name, w) for s, w in fallback.node_scores] == [
        (s.name, w) for s, w in build_profile("fgd").node_scores
    ]
    assert fallback.workload is profile.workload
    assert fallback.preference is None and fallback.whole_node_reserve is None
    assert fallback.step_aside is None
    assert all(
        build_profile(name).step_aside is None
        for name in POLICIES
        if name != "fgd-complete-reserve"
    )


def test_the_learnt_gate_follows_the_pods_seen() -> None:
    workload = OnlineWorkload()
    gate = LearnedCpuBound(workload, build_profile("fgd"))
    assert not gate.applies(64_000, 4000)  # nothing seen yet
    gpu_pods = [OpenbPod(f"g{i}", 8000, 1024, 1, 1000) for i in range(MIN_PODS_SEEN)]
    cpu_pods = [OpenbPod(f"c{i}", 16000, 1024, 0, 0) for i in range(MIN_PODS_SEEN)]
    pods = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(gpu_pods + cpu_pods)]
    # Too few pods seen to read: 2 GPU pods and 2 CPU-only pods (pressure 1.5).
    for pod in pods[:2] + pods[MIN_PODS_SEEN : MIN_PODS_SEEN + 2]:
        workload.observe(pod)
    assert not gate.applies(64_000, 4000)
    for pod in pods[2:MIN_PODS_SEEN]:
        workload.observe(pod)
    assert not gate.applies(64_000, 4000)  # 100 GPU pods, 2 CPU-only: 0.52
    for pod in pods[MIN_PODS_SEEN:]:
        workload.observe(pod)
    assert gate.applies(64_000, 4000)  # as many of each: 1.5
    assert not gate.applies(4 * 64_000, 4000)  # four times the CPU: 0.375
