"""Priority preemption and reclaim evict only pods the scheduler bound itself
(cache/ownership.py), and a member it did not bind neither protects its gang nor is
evicted: a tenant who pins one tiny pod of each gang to a node while naming this
scheduler gains nothing (docs/security.md, "A pinned member shields nothing")."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType
from cache.gpu import SIGNATURE_ANNOTATION
from cache.quota import GPU
from scheduler.planner.result import Plan, Unschedulable
from scheduler.sharing.preemption import PRIORITY, RECLAIM
from tests.factories import node_obj, pod_obj
from tests.scheduler import test_reclaim as reclaim
from tests.scheduler.test_preemption_core import core_with, members, run

ADDED = EventType.ADDED


def pinned(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`members` bound as a tenant pins them: on their node at create, unsigned."""
    for pod in pods:
        pod["metadata"]["annotations"].pop(SIGNATURE_ANNOTATION, None)
    return pods


def pin(
    name: str,
    gang: str,
    node: str,
    *,
    namespace: str = "default",
    priority: int = 0,
    gpus: int = 0,
    min_member: int = 2,
) -> dict[str, Any]:
    """One tiny pod a tenant adds to its gang: our schedulerName, the gang label, its
    own `spec.nodeName` at create (so never bound, never signed, by the scheduler)."""
    return pod_obj(
        name,
        namespace=namespace,
        gang=gang,
        min_member=min_member,
        cpu="100m",
        memory="64Mi",
        gpus=gpus,
        priority=priority,
        node_name=node,
        phase="Running",
    )


def test_a_gang_with_every_member_pinned_is_never_a_victim() -> None:
    tenants = pinned(members("pinned", 2, 4, priority=1, nodes=["n0", "n0"]))
    high = members("high", 2, 4, priority=10)
    core = core_with([node_obj("n0", gpus=8)], tenants + high)
    [attempt] = run(core)
    assert isinstance(attempt.result, Unschedulable)
    assert attempt.preemption is None


def test_a_pinned_member_does_not_shield_its_gang_from_priority_preemption() -> None:
    """The pinned member even claims a priority far above the preemptor's: it is not
    the scheduler's, so it is no part of the victim, neither its priority nor its pods."""
    low = members("low", 2, 4, priority=1, nodes=["n0", "n0"])
    shield = pin("low-shield", "low", "n0", priority=1000, min_member=2)
    high = members("high", 2, 4, priority=10)
    core = core_with([node_obj("n0", gpus=8)], [*low, shield, *high])
    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None and decision.reason == PRIORITY
    assert [v.key for v in decision.victims] == ["default/low"]
    assert {p.name for v in decision.victims for p in v.pods} == {"low-0", "low-1"}
    assert decision.victims[0].priority == 1  # the pinned member's 1000 counts for nothing


def test_a_pinned_member_does_not_shield_a_borrowing_gang_from_reclaim() -> None:
    """The attack on a lender's min: team b borrows a's idle guarantee and pins a tiny
    member beside each of its gangs; a's gang, within a's min, takes the loan back all
    the same. The pinned members stay, charged to b's quota."""
    pods = [
        *reclaim.gang("b", "own", 1, 8, priority=100, nodes=["n0"]),
        pin("own-shield", "own", "n0", namespace="b", priority=100, min_member=1),
        *reclaim.gang("b", "extra", 1, 8, priority=100, nodes=["n1"]),
        pin("extra-shield", "extra", "n1", namespace="b", priority=100, min_member=1),
        *reclaim.gang("a", "job", 1, 8, priority=0),
    ]
    core = reclaim.core_with(2, {"a": (8, 16), "b": (8, 16)}, pods)
    [decision] = reclaim.decisions(run(core, 1.0))
    assert decision.reason == RECLAIM
    [victim] = decision.victims
    assert [p.name for p in victim.pods] == [victim.key.removeprefix("b/") + "-0"]
    reclaim.evict(core, decision, 2.0)
    placed = [a.gang.key for a in run(core, 3.0) if isinstance(a.result, Plan)]
    assert placed == ["a/job"]
    shields = {p.name: p.node_name for p in core.cache.pods() if p.name.endswith("-shield")}
    assert shields == {"own-shield": "n0", "extra-shield": "n1"}  # not the scheduler's
    assert core.cache.quotas.ledger.used("b").get("cpu", 0) >= 200  # and still charged
    assert reclaim.used_gpus(core, "a") == 8 and reclaim.used_gpus(core, "b") == 8


def test_a_pinned_pod_counts_against_its_namespaces_quota() -> None:
    """Pinning is no way around a quota: the pinned pod's GPUs are the namespace's
    usage, so the tenant's next gang is refused by `max` as if the scheduler had
    placed the pod."""
    pods = [
        pin("squatter", "side", "n0", namespace="b", gpus=8, min_member=1),
        *reclaim.gang("b", "next", 1, 1),
    ]
    core = reclaim.core_with(2, {"b": (0, 8)}, pods)
    assert core.cache.quotas.ledger.used("b").get(GPU, 0) == 8 * reclaim.MILLI
    [attempt] = run(core, 1.0)
    assert isinstance(attempt.result, Unschedulable)
    assert "quota b exceeds max" in attempt.result.message


def test_a_pinned_member_with_the_gpus_is_not_freed_in_the_what_if() -> None:
    """The pinned member holds the GPUs the preemptor needs: evicting the gang's
    members the scheduler bound would not make room (the pinned pod stays), so
    nothing is evicted."""
    low = members("low", 1, 1, priority=1, nodes=["n0"])
    hog = pin("low-hog", "low", "n0", gpus=7, min_member=1)
    high = members("high", 1, 8, priority=10)
    core = core_with([node_obj("n0", gpus=8)], [*low, hog, *high])
    [attempt] = run(core)
    assert isinstance(attempt.result, Unschedulable)
    assert attempt.preemption is None
