"""Priority preemption evicts only gangs the scheduler bound itself (cache/ownership.py):
a lower-priority gang a tenant pinned to its nodes while naming this scheduler is never
a victim, not even in part."""

from __future__ import annotations

from typing import Any

from cache.gpu import SIGNATURE_ANNOTATION
from scheduler.planner.result import Unschedulable
from tests.factories import node_obj
from tests.scheduler.test_preemption_core import core_with, members, run


def pinned(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`members` bound as a tenant pins them: on their node at create, unsigned."""
    for pod in pods:
        pod["metadata"]["annotations"].pop(SIGNATURE_ANNOTATION, None)
    return pods


def test_a_pinned_lower_priority_gang_is_never_a_victim() -> None:
    tenants = pinned(members("pinned", 2, 4, priority=1, nodes=["n0", "n0"]))
    high = members("high", 2, 4, priority=10)
    core = core_with([node_obj("n0", gpus=8)], tenants + high)
    [attempt] = run(core)
    assert isinstance(attempt.result, Unschedulable)
    assert attempt.preemption is None


def test_a_gang_with_one_pinned_member_is_not_evicted_in_part_a_signed_one_is() -> None:
    mixed = members("mixed", 2, 4, priority=1, nodes=["n0", "n0"])
    pinned(mixed[1:])  # mixed-0 bound by the scheduler before a restart, mixed-1 pinned
    ours = members("ours", 2, 4, priority=2, nodes=["n1", "n1"])
    high = members("high", 2, 4, priority=10)
    core = core_with([node_obj("n0", gpus=8), node_obj("n1", gpus=8)], mixed + ours + high)
    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None
    assert [v.key for v in decision.victims] == ["default/ours"]
