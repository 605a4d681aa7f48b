"""Reclaim's cost bound (policies/reclaim_cost.py, docs/quotas.md "Reclaim: what a
small ask may cost"): a small ask does not evict a much larger borrowing gang while it
has waited less than the grace; after the grace its guarantee is honoured."""

from __future__ import annotations

from policies.reclaim_cost import ReclaimCost
from scheduler.preemption import RECLAIM
from tests.factories import pod_obj
from tests.scheduler.test_reclaim import core_with, gang, run


def _reclaims(now: float, ask_gpus: int) -> list[str]:
    # 4 nodes of 8 GPUs. "borrower" (min 0) runs a gang of 4 x 8 GPUs (32), the whole
    # cluster, all borrowed. "team" (min 16) holds nothing and asks `ask_gpus`.
    running = gang("borrower", "big", 4, 8, priority=100, nodes=["n0", "n1", "n2", "n3"])
    core = core_with(4, {"team": (16, 32), "borrower": (0, 32)}, running)
    run(core, 0.0)
    pods = [pod_obj("ask-0", namespace="team", gang="ask", min_member=1, gpus=ask_gpus)]
    for pod in pods:
        pod["metadata"]["creationTimestamp"] = "1970-01-01T00:00:00Z"  # created at t=0
        core.apply_pod("ADDED", pod, 0.0)
    decisions = []
    for attempt in run(core, now):
        if attempt.preemption is not None and attempt.preemption.reason == RECLAIM:
            decisions.extend(victim.key for victim in attempt.preemption.victims)
    return decisions


def test_a_small_ask_does_not_evict_a_gang_many_times_its_size_within_the_grace() -> None:
    assert _reclaims(60.0, 2) == []  # 32 GPUs evicted for 2: over 4 x 2


def test_after_the_grace_the_guarantee_is_honoured_whatever_it_costs() -> None:
    assert _reclaims(ReclaimCost().grace_seconds + 1.0, 2) == ["borrower/big"]


def test_an_ask_within_the_factor_reclaims_at_once() -> None:
    assert _reclaims(60.0, 8) == ["borrower/big"]  # 32 GPUs for 8: within 4 x 8


def test_the_limit() -> None:
    cost = ReclaimCost(factor=4, grace_seconds=900.0)
    assert cost.limit(2000, 10.0) == 8000
    assert cost.limit(2000, 900.0) is None
    assert cost.limit(0, 10.0) is None
