"""`/debug/queues`: the queue as the scheduler sees it, and every quota it enforces.

Read on the event loop between two cycles (scheduler/process/http.py), like `/debug/gangs`,
and served on the loopback debug listener only: it names every tenant's namespaces
and gangs (docs/security.md, "Endpoints").

- `gangs`: the gangs in the queue, in the order the scheduler takes them (in flight,
  then active in pop order, then backing off by expiry, then unschedulable by how long
  they waited): size and priority, the quota that governs their namespace and whether
  placing them stays within its min (guaranteed) or borrows beyond it, how long they
  have been in the queue, until when they back off, the last reason they were not
  placed, and the room held for them: nodes nominated by a preemption decision (with
  its victims) and nodes reserved by the starvation guard when the core has one;
  `deviceClaims`: how many of its pending members use DRA ResourceClaims (their waits
  read "cannot allocate all claims" or "waiting for ResourceClaim ...").
- `quotas`: every ElasticQuota that governs a namespace: min, max, used, borrowed
  (used beyond min), weight, ready gangs waiting by guaranteed or borrowing, and per
  dimension its min sets, the room it has to borrow (policies/fair_share.py: idle
  guarantees of the others, net of what they borrow, its weighted fair share).
- `draDevices`: DRA devices taken, per driver: `allocated` (a claim's status.allocation
  names them) and `held` (a claim this scheduler is allocating, its write not yet seen);
  drivers that publish no ResourceSlice under `_other`. Cluster-wide, whatever the
  namespace filter (the same figures as gang_scheduler_dra_devices).

Both lists stop at `limit` entries; `gangsLeftOut` and `quotasLeftOut` say how many
more there were, so a reply stays bounded on a cluster with thousands of gangs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from cache.quota import (
    DIMENSIONS,
    QuotaBook,
    QuotaInfo,
    display_name,
    format_amount,
    ordered,
)
from policies.fair_share import beyond_min, borrow_room
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import Gang
from scheduler.gangs.queue import GangStatus
from scheduler.sharing.quotas import would_borrow

DEFAULT_LIMIT = 500
MAX_LIMIT = 10_000
GUARANTEED = "guaranteed"
BORROWING = "borrowing"


def rfc3339(epoch: float | None) -> str | None:
    """RFC 3339 in UTC, as the API writes timestamps; None for an unknown time."""
    if epoch is None or not math.isfinite(epoch) or epoch <= 0:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def queue_report(
    core: SchedulingCore, now: float, limit: int = DEFAULT_LIMIT, namespace: str | None = None
) -> dict[str, Any]:
    """The report `/debug/queues` serves (module docstring); `namespace` keeps only
    that namespace's gangs and quota."""
    book = core.cache.quotas
    queued = [
        entry
        for entry in core.queue.snapshot()
        if not namespace or entry.key.partition("/")[0] == namespace
    ]
    reserved = _reservations(core)
    admission = {entry.key: _admission(core.gangs.get(entry.key), book) for entry in queued}
    gangs = [
        _gang(entry, core.gangs.get(entry.key), core, now, admission[entry.key], reserved)
        for entry in queued[:limit]
    ]
    governed = sorted(
        (q for ns, q in book.governed().items() if not namespace or ns == namespace),
        key=lambda q: q.namespace,
    )
    waiting = _waiting_by_namespace(queued, admission)
    quotas = [_quota(quota, book, waiting.get(quota.namespace, {})) for quota in governed[:limit]]
    return {
        "now": rfc3339(now),
        "gangs": gangs,
        "gangCount": len(queued),
        "gangsLeftOut": len(queued) - len(gangs),
        "quotas": quotas,
        "quotaCount": len(governed),
        "quotasLeftOut": len(governed) - len(quotas),
        "starvationGuard": reserved is not None,
        "draDevices": {
            driver: {"allocated": allocated, "held": held, "kept": kept}
            for driver, (allocated, held, kept) in sorted(core.dra.taken_by_driver().items())
        },
    }


def _reservations(core: SchedulingCore) -> Mapping[str, frozenset[str]] | None:
    """Gang key -> nodes the starvation guard reserved for it; None when the core has
    no guard (an older core: the method is looked up, not assumed)."""
    method: Callable[[], Mapping[str, frozenset[str]]] | None = getattr(
        core, "starvation_reservations", None
    )
    return None if method is None else method()


def _admission(gang: Gang | None, book: QuotaBook) -> str | None:
    """Whether placing the gang stays within its quota's min; None without a quota."""
    if gang is None or book.governing(gang.namespace) is None:
        return None
    return BORROWING if would_borrow(gang, book) else GUARANTEED


def _gang(
    entry: GangStatus,
    gang: Gang | None,
    core: SchedulingCore,
    now: float,
    admission: str | None,
    reserved: Mapping[str, frozenset[str]] | None,
) -> dict[str, Any]:
    namespace, _, name = entry.key.partition("/")
    quota = core.cache.quotas.governing(namespace)
    decision = core.preempter.decisions.get(entry.key)
    backoff = entry.retry_at if entry.retry_at is not None and entry.retry_at > now else None
    report: dict[str, Any] = {
        "key": entry.key,
        "namespace": namespace,
        "name": name,
        "state": entry.state,
        "size": gang.min_member if gang is not None else None,
        "pending": len(gang.pending) if gang is not None else None,
        "deviceClaims": (
            sum(1 for pod in gang.pending if pod.resource_claims) if gang is not None else None
        ),
        "priority": entry.priority,
        "quota": quota.key if quota is not None else None,
        "quotaNamespace": quota.namespace if quota is not None else None,
        "admission": admission,
        "inQueueSince": rfc3339(entry.added_at),
        "waitingSeconds": round(max(0.0, now - entry.added_at), 3),
        "attempts": entry.attempts,
        "backoffUntil": rfc3339(backoff),
        "lastReason": entry.last_reason,
        "nominatedNodes": sorted({p.node for p in decision.placements}) if decision else [],
        "preempting": [victim.key for victim in decision.victims] if decision else [],
        # The DRA devices kept for its decision, and the victims' claims it waits for.
        "keptDevices": [str(device) for device in decision.devices] if decision else [],
        "releasingClaims": [key for key, _ in decision.released_claims] if decision else [],
    }
    if reserved is not None:
        report["reservedNodes"] = sorted(reserved.get(entry.key, ()))
    return report


def _waiting_by_namespace(
    queued: Iterable[GangStatus], admission: Mapping[str, str | None]
) -> dict[str, dict[str, int]]:
    waiting: dict[str, dict[str, int]] = {}
    for entry in queued:
        kind = admission.get(entry.key)
        if kind is not None:
            counts = waiting.setdefault(
                entry.key.partition("/")[0], dict.fromkeys((GUARANTEED, BORROWING), 0)
            )
            counts[kind] += 1
    return waiting


def _amounts(amounts: Mapping[str, int]) -> dict[str, str]:
    """As a ResourceList reads: GPUs as nvidia.com/gpu (decimal for shares), cpu and
    memory as quantities, then DRA resources by name; only the dimensions present."""
    return {display_name(dim): format_amount(dim, amounts[dim]) for dim in ordered(amounts)}


def _quota(quota: QuotaInfo, book: QuotaBook, waiting: Mapping[str, int]) -> dict[str, Any]:
    used = book.ledger.used(quota.namespace)
    rooms = borrow_room(book, quota.namespace)
    return {
        "key": quota.key,
        "namespace": quota.namespace,
        "weight": quota.weight,
        "min": _amounts(quota.min),
        "max": _amounts(quota.max),
        "used": _amounts({**{dim: used.get(dim, 0) for dim in DIMENSIONS}, **used}),
        "borrowed": _amounts(beyond_min(quota, used)),
        "pendingGangs": {
            GUARANTEED: waiting.get(GUARANTEED, 0),
            BORROWING: waiting.get(BORROWING, 0),
        },
        "fairShare": {
            display_name(dim): {
                "idleInOthers": format_amount(dim, room.pool),
                "netOfBorrowed": format_amount(dim, max(0, room.net)),
                "share": format_amount(dim, room.share),
                "mayBorrow": format_amount(dim, room.limit),
            }
            for dim, room in rooms.items()
        },
        "problems": list(book.problems(quota)),
    }
