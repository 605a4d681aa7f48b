"""ElasticQuota `max` and borrowing beyond `min`, enforced gang-wide (docs/quotas.md).

A gang is placed only if its namespace stays within its quota's max, and borrows beyond
its min only what idle guarantees and its fair share allow (policies/fair_share.py),
once every member the plan places is counted: usage (bound and assumed pods of the
namespace, the gang's own bound members among them) plus the plan's ask. Checked
twice: before planning, with the cheapest members the gang needs (a gang that cannot
fit is refused without planning it), and on the plan itself, which may place members beyond
minMember: those extras are left out, largest first, until the rest fits; a plan
whose needed members alone go over is refused, never reserved.

DRA devices (docs/quotas.md, "DRA devices"): the plan's claims that it allocates count
as well, each claim once however many members share it (a claim allocated already,
by anyone, is in the ledger). A member left out takes its `reservedFor` entries with
it, and a claim no kept member uses is not allocated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

from cache import resources as res
from cache.dra.claims import EXACT_COUNT
from cache.dra.quota import MILLI, claim_usage, devices_resource
from cache.dra.store import DraCache
from cache.pod import PodInfo
from cache.quota import QuotaBook, excess, ordered, usage_of
from policies.fair_share import borrowing, dominant_share, refuse_borrowing
from scheduler.gangs.gang import Gang
from scheduler.gangs.queue import GangQueue
from scheduler.planner.result import ClaimAllocation, Plan, Unschedulable


def _usage(pod: PodInfo) -> dict[str, int]:
    return usage_of(pod.requests, pod.gpu)


def _total(pods: Iterable[PodInfo]) -> dict[str, int]:
    return res.total_of(_usage(pod) for pod in pods)


def _size(pod: PodInfo, claims: Mapping[str, Mapping[str, int]] | None = None) -> tuple[int, ...]:
    """How large a member is, for trimming: GPU, cpu, memory, then its claims' DRA
    resources (`claims`: pod uid -> what the claims it uses would count)."""
    usage = dict(_usage(pod))
    if claims:
        res.add(usage, claims.get(pod.uid, {}))
    return tuple(usage.get(dim, 0) for dim in ordered(usage))


def _allocates(claim: ClaimAllocation, kept: Iterable[str]) -> bool:
    """Whether the plan still allocates the claim once only the `kept` members stay: it
    allocates it, and a kept member (or a consumer that is not a pod, a PodGroup) uses
    it."""
    if claim.allocation is None:
        return False
    members = set(kept)
    return any(c.resource != "pods" or c.uid in members for c in claim.reserved_for)


def _claims_usage(plan: Plan, kept: Iterable[str], dra: DraCache | None) -> dict[str, int]:
    """What the claims the plan allocates for the `kept` members count against the
    quota, each claim once."""
    total: dict[str, int] = {}
    if dra is None or not plan.claims:
        return total
    members = set(kept)
    for claim in plan.claims:
        record = dra.claims.get(claim.key)
        if record is None or claim.allocation is None or not _allocates(claim, members):
            continue
        res.add(total, claim_usage(record, claim.allocation))
    return total


def _member_claims(plan: Plan, dra: DraCache | None) -> dict[str, dict[str, int]]:
    """pod uid -> what the claims the plan allocates for it would count (a shared claim
    counted for each of its members: for ordering only)."""
    found: dict[str, dict[str, int]] = {}
    if dra is None:
        return found
    for claim in plan.claims:
        record = dra.claims.get(claim.key)
        if record is None or claim.allocation is None:
            continue
        usage = claim_usage(record, claim.allocation)
        for consumer in claim.reserved_for:
            res.add(found.setdefault(consumer.uid, {}), usage)
    return found


def _limit(gang: Gang, book: QuotaBook, asked: Mapping[str, int]) -> str | None:
    """Why the gang's namespace may not take `asked`: over max, or borrowing beyond
    min that the idle guarantees or its fair share do not allow (policies/fair_share.py).
    None when it may."""
    quota = book.governing(gang.namespace)
    if quota is None:
        return None
    over = excess(quota, book.ledger.used(gang.namespace), asked)
    if over is not None:
        return f"gang {gang.key}: quota {quota.namespace} {over.describe()}"
    refusal = refuse_borrowing(book, gang.namespace, asked)
    if refusal is not None:
        return f"gang {gang.key}: quota {quota.namespace} {refusal.describe()}"
    return None


def _refuse(gang: Gang, message: str) -> Unschedulable:
    return Unschedulable(
        gang.key,
        needed=gang.needed,
        placeable=0,
        message=message,
        reasons={pod.uid: message for pod in gang.pending},
    )


def _cheapest_needed(gang: Gang, dra: DraCache | None = None) -> dict[str, int]:
    needed = sorted(gang.placeable, key=_size)[: gang.needed]
    total = _total(needed)
    if dra is not None:
        res.add(total, claims_demand(needed, dra))
    return total


def pod_claim_keys(pod: PodInfo) -> list[str]:
    """The keys ("ns/name") of the ResourceClaims the pod names, made ones included
    (a template's claim as `status.resourceClaimStatuses` names it)."""
    keys = []
    for ref in pod.resource_claims:
        name = ref.claim_name or pod.claim_statuses.get(ref.name, "")
        if name:
            keys.append(f"{pod.namespace}/{name}")
    return keys


def claims_demand(pods: Iterable[PodInfo], dra: DraCache) -> dict[str, int]:
    """What the pods' claims not allocated yet will count, at least, once allocated:
    the devices of their `exactly` requests of ExactCount, each claim once (an `All`
    request and a `firstAvailable` one count nothing before the plan says which
    devices; shares count as devices: what they consume is known from the plan). The
    plan's own claims are checked exactly (`within_quota`)."""
    total: dict[str, int] = {}
    seen: set[str] = set()
    for pod in pods:
        for key in pod_claim_keys(pod):
            claim = dra.claims.get(key)
            if key in seen or claim is None or dra.allocation_of(key) is not None:
                continue
            seen.add(key)
            for request in claim.requests:
                exact = request.exactly
                if exact is None or exact.mode != EXACT_COUNT or not exact.device_class:
                    continue
                name = devices_resource(exact.device_class)
                total[name] = total.get(name, 0) + max(0, exact.count) * MILLI
    return total


def claims_held(pods: Iterable[PodInfo], dra: DraCache) -> dict[str, int]:
    """What the allocated claims reserved for the pods count (whoever allocated them),
    each claim once: a running gang's DRA usage, as a victim."""
    members = list(pods)
    uids = {pod.uid for pod in members}
    total: dict[str, int] = {}
    seen: set[str] = set()
    for pod in members:
        for key in pod_claim_keys(pod):
            claim = dra.claims.get(key)
            allocation = dra.allocation_of(key)
            if key in seen or claim is None or allocation is None:
                continue
            seen.add(key)
            if any(c.uid in uids for c in claim.reserved_for):
                res.add(total, claim_usage(claim, allocation))
    return total


def refuse_before_planning(
    gang: Gang, book: QuotaBook, dra: DraCache | None = None
) -> Unschedulable | None:
    """The gang's refusal when even its cheapest needed members exceed what its quota
    allows; None when it may be planned. `dra`: where its members' claims are read
    (their ExactCount devices counted); None counts no claim."""
    if book.governing(gang.namespace) is None or gang.needed == 0:
        return None
    message = _limit(gang, book, _cheapest_needed(gang, dra))
    return None if message is None else _refuse(gang, message)


def would_borrow(gang: Gang, book: QuotaBook, dra: DraCache | None = None) -> bool:
    """Whether placing the gang's needed members takes its namespace beyond its min
    (the queue places guaranteed gangs first)."""
    quota = book.governing(gang.namespace)
    if quota is None or not quota.min:
        return False
    return borrowing(book, gang.namespace, _cheapest_needed(gang, dra))


def within_quota(
    gang: Gang,
    plan: Plan,
    book: QuotaBook,
    pod_of: Callable[[str], PodInfo | None],
    dra: DraCache | None = None,
) -> Plan | Unschedulable:
    """The plan, trimmed of members beyond the gang's need until its namespace stays
    within what its quota allows, or the gang's refusal. Members of a gang with
    inter-pod terms are never trimmed (a kept member may have been placed for a
    dropped one). `dra`: where the plan's claims are read (their requests name the
    DeviceClass of each device allocated); None counts no claim."""
    if book.governing(gang.namespace) is None:
        return plan
    members = [pod_of(p.pod_uid) for p in plan.placements]
    placed = [pod for pod in members if pod is not None]

    def asked(pods: list[PodInfo]) -> dict[str, int]:
        total = _total(pods)
        res.add(total, _claims_usage(plan, (pod.uid for pod in pods), dra))
        return total

    first = _limit(gang, book, asked(placed))
    if first is None:
        return plan
    if any(pod.has_pod_constraints for pod in placed):
        return _refuse(gang, first)
    member_claims = _member_claims(plan, dra)
    kept = sorted(placed, key=lambda pod: _size(pod, member_claims))
    left_out: dict[str, str] = {}
    # Every member left out is told what the whole plan would have taken.
    message: str | None = first
    while message is not None and len(kept) > gang.needed:
        left_out[kept.pop().uid] = first
        message = _limit(gang, book, asked(kept))
    if message is not None or not kept:
        # As the planner: a plan places at least one member, else the gang waits.
        return _refuse(gang, first)
    return _trimmed(plan, left_out)


def _trimmed(plan: Plan, left_out: Mapping[str, str]) -> Plan:
    claims = []
    for claim in plan.claims:
        reserved = tuple(c for c in claim.reserved_for if c.uid not in left_out)
        if reserved:
            claims.append(dataclasses.replace(claim, reserved_for=reserved))
    return dataclasses.replace(
        plan,
        placements=tuple(p for p in plan.placements if p.pod_uid not in left_out),
        left_out={**plan.left_out, **left_out},
        volumes={uid: v for uid, v in plan.volumes.items() if uid not in left_out},
        claims=tuple(claims),
    )


def needed_usage(gang: Gang, dra: DraCache | None = None) -> dict[str, int]:
    """What the gang's cheapest needed members would count against its quota (their
    claims' ExactCount devices too, with `dra`)."""
    return _cheapest_needed(gang, dra)


class BorrowerOrder:
    """Keeps the queue's order of borrowing gangs by their namespace's dominant share
    (docs/quotas.md, "Borrowers ordered by dominant share") up to date at a cost that
    does not grow with the gangs waiting: each cycle, only the namespaces whose usage
    changed since the last are recomputed (the ledger says which); every namespace in
    use, when a quota changed (its min moves every share's denominator)."""

    def __init__(self) -> None:
        self._generation = -1

    def update(self, queue: GangQueue, book: QuotaBook) -> None:
        changed = book.ledger.take_changed()
        if not book.governed() and not queue.shared_namespaces():
            return  # no quota: no share (a quota added later changes the generation)
        if book.generation != self._generation:
            self._generation = book.generation
            changed.update(book.ledger.namespaces())
            changed.update(queue.shared_namespaces())
        for namespace in changed:
            queue.set_share(namespace, dominant_share(book, namespace))
