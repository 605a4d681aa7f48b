"""The simulator's own policy, `fgd-complete-reserve` (BEST_POLICY): fgd-complete's
scores, picked within the whole-node reserve, with ModelReserve's preference; each part
measured alone in docs/decisions.md ("Tried and not kept"). Both reserves at work on
gpuspec33: tests/sim/test_model_reserve_replay.py."""

from __future__ import annotations

from cache.pod import pod_from_api
from policies.model_reserve import ModelReserve
from policies.scores.fragmentation import shape_counts
from scheduler.sim.openb import (
    OpenbPod,
    pod_object,
)
from scheduler.sim.profiles import (
    BEST_POLICY,
    OPENB_POLICIES,
    RESERVE_LAST_RESORT,
    RESERVE_MARGIN,
    openb_profile,
)

KWARGS = {"seed": 1, "max_cpu_milli": 128_000, "max_gpu_milli": 8000}


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
    assert best.preference.workload == shape_counts(history)
    reserve = best.whole_node_reserve
    assert reserve is not None
    assert (reserve.last_resort, reserve.margin) == (RESERVE_LAST_RESORT, RESERVE_MARGIN)
    assert [r.cpu_milli for r in reserve.requests] == [120_000]
    assert complete.preference is None and complete.whole_node_reserve is None
