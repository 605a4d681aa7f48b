"""The simulator's `fgd-keep-models` policy: fgd-keep-largest with unpinned pods steered
off the GPU models that model-pinned pods still need (policies/model_reserve.py)."""

from __future__ import annotations

import random

import pytest

from cache.pod import PodInfo, pod_from_api
from policies.model_reserve import ModelReserve
from policies.profile import Profile
from policies.scores.fragmentation import shape_counts
from scheduler.sim.openb import (
    NODE_FILE,
    TRACES,
    OpenbPod,
    arrival_order,
    bundled_file,
    cluster_size,
    load_nodes,
    load_pods,
    pod_object,
)
from scheduler.sim.profiles import BEST_POLICY, OPENB_POLICIES, openb_profile
from scheduler.sim.replay import replay_openb


def profile(name: str, history: list[PodInfo], seed: int = 1) -> Profile:
    return openb_profile(
        name, seed=seed, max_cpu_milli=128_000, max_gpu_milli=8000, history=history
    )


def test_fgd_keep_models_is_fgd_keep_largest_with_a_model_reserve() -> None:
    assert "fgd-keep-models" in OPENB_POLICIES
    history = [
        pod_from_api(pod_object(OpenbPod("a", 1000, 1024, 1, 500, frozenset({"P100"})), 0)),
        pod_from_api(pod_object(OpenbPod("b", 120_000, 1024, 8, 1000), 1)),
    ]
    models = profile("fgd-keep-models", history)
    largest = profile("fgd-keep-largest", history)
    assert [(s.name, w) for s, w in models.node_scores] == [
        (s.name, w) for s, w in largest.node_scores
    ]
    assert isinstance(models.preference, ModelReserve)
    assert models.preference.workload == shape_counts(history)
    assert largest.preference is None


def test_without_pinned_pods_it_places_as_fgd_keep_largest() -> None:
    nodes_csv = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},{32000 + 32000 * (i % 3)},131072,{2 + 2 * (i % 3)},{'G2' if i % 2 else 'T4'}\n"
        for i in range(12)
    )
    nodes = load_nodes(nodes_csv)
    draw = random.Random(14)
    pods = [
        OpenbPod(f"p{i}", draw.choice([1000, 4000, 12000]), 1024, *draw.choice(shapes))
        for i, shapes in enumerate([[(0, 0), (1, 300), (1, 1000), (2, 1000), (4, 1000)]] * 80)
    ]
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]
    order = arrival_order(pods, cluster_size(nodes).total_gpu_milli, 7)
    largest = replay_openb(nodes, order, profile("fgd-keep-largest", history, seed=7))
    models = replay_openb(nodes, order, profile("fgd-keep-models", history, seed=7))
    assert models.failed_pods == largest.failed_pods > 0
    assert models.readings.allocated == largest.readings.allocated


@pytest.mark.parametrize(
    ("without", "steered"),
    [("fgd-keep-largest", "fgd-keep-models"), ("fgd-complete", BEST_POLICY)],
    ids=["keep-models", "best-policy"],
)
def test_on_gpuspec33_unpinned_pods_leave_the_pinned_pods_room(without: str, steered: str) -> None:
    """The first 3,000 pods of gpuspec33 (seed 42): a policy without the reserve has by
    then put unpinned pods where pinned ones fail; with it, none fails yet, also when
    the whole-node reserve bounds which nodes a pod may take (BEST_POLICY)."""
    nodes = load_nodes(bundled_file(NODE_FILE))
    pods = load_pods(bundled_file(TRACES["gpuspec33"]))
    size = cluster_size(nodes)
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]
    order = arrival_order(pods, size.total_gpu_milli, 42)[:3000]
    failed = {
        policy: replay_openb(
            nodes,
            order,
            openb_profile(
                policy,
                seed=42,
                max_cpu_milli=size.max_cpu_milli,
                max_gpu_milli=size.max_gpu_milli,
                history=history,
            ),
        ).failed_pods
        for policy in (without, steered)
    }
    assert failed[steered] == 0 < failed[without]
