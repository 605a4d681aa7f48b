"""The simulator's own policy, `fgd-complete-reserve` (BEST_POLICY): fgd-complete's
scores, picked within the whole-node reserve, with ModelReserve's preference; each part
measured alone in docs/benchmarks.md (issue 14, fourth pass)."""

from __future__ import annotations

from importlib import resources

from cache.pod import pod_from_api
from policies.model_reserve import ModelReserve
from scheduler.sim.openb import (
    NODE_FILE,
    TRACES,
    OpenbPod,
    arrival_order,
    cluster_size,
    load_nodes,
    load_pods,
    pod_object,
)
from scheduler.sim.profiles import (
    BEST_POLICY,
    OPENB_POLICIES,
    RESERVE_LAST_RESORT,
    RESERVE_MARGIN,
    openb_profile,
)
from scheduler.sim.replay import replay_openb

KWARGS = {"seed": 1, "max_cpu_milli": 128_000, "max_gpu_milli": 8000}


def bundled(filename: str) -> str:
    return resources.files("scheduler.sim").joinpath("data", "openb", filename).read_text()


def test_the_best_policy_is_fgd_complete_within_both_reserves() -> None:
    assert BEST_POLICY == "fgd-complete-reserve" in OPENB_POLICIES
    history = [
        pod_from_api(pod_object(OpenbPod("a", 1000, 1024, 1, 500, frozenset({"P100"})), 0)),
        pod_from_api(pod_object(OpenbPod("b", 120_000, 1024, 8, 1000), 1)),
    ]
    best = openb_profile(BEST_POLICY, history=history, **KWARGS)
    complete = openb_profile("fgd-complete", history=history, **KWARGS)
    assert [(s.name, w) for s, w in best.node_scores] == [
        (s.name, w) for s, w in complete.node_scores
    ]
    assert isinstance(best.preference, ModelReserve)
    assert best.preference.history == tuple(history)
    reserve = best.whole_node_reserve
    assert reserve is not None
    assert (reserve.last_resort, reserve.margin) == (RESERVE_LAST_RESORT, RESERVE_MARGIN)
    assert [r.cpu_milli for r in reserve.requests] == [120_000]
    assert complete.preference is None and complete.whole_node_reserve is None


def test_on_gpuspec33_the_pinned_pods_keep_their_room_under_both_reserves() -> None:
    """The first 3,000 pods of gpuspec33 (seed 42): fgd-complete has by then put
    unpinned pods where pinned ones fail; the model preference still works when the
    whole-node reserve bounds which nodes a pod may take."""
    nodes = load_nodes(bundled(NODE_FILE))
    pods = load_pods(bundled(TRACES["gpuspec33"]))
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
        for policy in ("fgd-complete", BEST_POLICY)
    }
    assert failed[BEST_POLICY] == 0 < failed["fgd-complete"]
