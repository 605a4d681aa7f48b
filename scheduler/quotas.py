"""ElasticQuota `max`, enforced gang-wide (docs/quotas.md).

A gang is placed only if its namespace stays within its quota's max once every member
the plan places is counted: usage (bound and assumed pods of the namespace, the gang's
own bound members among them) plus the plan's ask. Checked twice: before planning,
with the cheapest members the gang needs (a gang that cannot fit under max is refused
without planning it), and on the plan itself, which may place members beyond
minMember: those extras are left out, largest first, until the rest fits; a plan
whose needed members alone exceed max is refused, never reserved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

from cache import resources as res
from cache.pod import PodInfo
from cache.quota import DIMENSIONS, Excess, QuotaBook, QuotaInfo, excess, usage_of
from scheduler.gang import Gang
from scheduler.planner import Plan, Unschedulable


def _usage(pod: PodInfo) -> dict[str, int]:
    return usage_of(pod.requests, pod.gpu)


def _total(pods: Iterable[PodInfo]) -> dict[str, int]:
    return res.total_of(_usage(pod) for pod in pods)


def _size(pod: PodInfo) -> tuple[int, ...]:
    usage = _usage(pod)
    return tuple(usage.get(dim, 0) for dim in DIMENSIONS)


def refusal_message(gang: Gang, quota: QuotaInfo, over: Excess) -> str:
    return f"gang {gang.key}: quota {quota.namespace} {over.describe()}"


def _refuse(gang: Gang, quota: QuotaInfo, over: Excess) -> Unschedulable:
    message = refusal_message(gang, quota, over)
    return Unschedulable(
        gang.key,
        needed=gang.needed,
        placeable=0,
        message=message,
        reasons={pod.uid: message for pod in gang.pending},
    )


def refuse_before_planning(gang: Gang, book: QuotaBook) -> Unschedulable | None:
    """The gang's refusal when even its cheapest needed members exceed its quota's max;
    None when it may be planned."""
    quota = book.governing(gang.namespace)
    if quota is None or not quota.max or gang.needed == 0:
        return None
    cheapest = sorted(gang.placeable, key=_size)[: gang.needed]
    over = excess(quota, book.ledger.used(gang.namespace), _total(cheapest))
    return None if over is None else _refuse(gang, quota, over)


def within_quota(
    gang: Gang, plan: Plan, book: QuotaBook, pod_of: Callable[[str], PodInfo | None]
) -> Plan | Unschedulable:
    """The plan, trimmed of members beyond the gang's need until its namespace stays
    within max, or the gang's refusal. Members of a gang with inter-pod terms are never
    trimmed (a kept member may have been placed for a dropped one)."""
    quota = book.governing(gang.namespace)
    if quota is None or not quota.max:
        return plan
    used = book.ledger.used(gang.namespace)
    members = {p.pod_uid: pod_of(p.pod_uid) for p in plan.placements}
    placed = [pod for pod in members.values() if pod is not None]
    over = excess(quota, used, _total(placed))
    if over is None:
        return plan
    if any(pod.has_pod_constraints for pod in placed):
        return _refuse(gang, quota, over)
    kept = sorted(placed, key=_size)
    left_out: dict[str, str] = {}
    # Every member left out is told what the whole plan would have taken.
    first = over
    why = refusal_message(gang, quota, first)
    while over is not None and len(kept) > gang.needed:
        left_out[kept.pop().uid] = why
        over = excess(quota, used, _total(kept))
    if over is not None or not kept:
        # As the planner: a plan places at least one member, else the gang waits.
        return _refuse(gang, quota, first)
    return _trimmed(plan, left_out)


def _trimmed(plan: Plan, left_out: Mapping[str, str]) -> Plan:
    return dataclasses.replace(
        plan,
        placements=tuple(p for p in plan.placements if p.pod_uid not in left_out),
        left_out={**plan.left_out, **left_out},
        volumes={uid: v for uid, v in plan.volumes.items() if uid not in left_out},
    )
