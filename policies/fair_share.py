"""Borrowing beyond an ElasticQuota's `min`, with a weighted fair share (docs/quotas.md).

Pure. Judged per dimension a namespace's own quota guarantees (GPU, cpu, memory with a
`min`); in the others only `max` limits it.

- Within min: a namespace whose usage plus the ask stays within its min takes what it
  is guaranteed; nothing else is checked here.
- Beyond min it borrows, from what other quotas guarantee and leave idle: all quotas'
  usage plus the ask must stay within the sum of their mins (scheduler-plugins'
  CapacityScheduling rule: borrowed capacity is always someone's idle guarantee).
- Fair share: the idle guarantees of the others (the pool) are divided between the
  namespaces borrowing (those already borrowing, and the asker) in proportion to their
  weights. A namespace may borrow up to its weighted share of the pool in every
  dimension: its dominant share (the largest fraction of the pool it holds in any one
  dimension) may not pass its weight's fraction. Alone, a borrower may take the whole
  pool (work-conserving); what it took is reclaimed when a lender needs it back
  (scheduler/sharing/reclaim.py).
- Order: among gangs that would borrow, the namespace with the smallest dominant share
  per weight goes first (`dominant_share`), so idle capacity is divided over time by
  share, not by arrival.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cache.quota import QuotaBook, QuotaInfo, display_name, format_amount


@dataclass(frozen=True, slots=True)
class BorrowRefusal:
    """Why a namespace may not borrow what an ask needs, in one dimension."""

    dim: str
    borrow: int  # what the namespace would hold beyond its min
    limit: int  # the most it may hold beyond its min now
    pool: int  # idle guarantees of the other quotas
    fair: bool  # False: the pool is short; True: beyond its weighted share

    def describe(self) -> str:
        name = display_name(self.dim)
        borrow, limit = format_amount(self.dim, self.borrow), format_amount(self.dim, self.limit)
        if self.fair:
            return (
                f"would borrow {borrow} {name} beyond min, above its fair share {limit} "
                f"of {format_amount(self.dim, self.pool)} idle in other quotas"
            )
        return f"would borrow {borrow} {name} beyond min, only {limit} idle in other quotas"


def beyond_min(quota: QuotaInfo, used: Mapping[str, int]) -> dict[str, int]:
    """What a namespace holds beyond its min, in the dimensions its min sets."""
    held = {dim: used.get(dim, 0) - floor for dim, floor in quota.min.items()}
    return {dim: amount for dim, amount in held.items() if amount > 0}


def borrowing(book: QuotaBook, namespace: str, asked: Mapping[str, int]) -> bool:
    """Whether the ask takes the namespace beyond its min in some dimension."""
    quota = book.governing(namespace)
    if quota is None or not quota.min:
        return False
    used = book.ledger.used(namespace)
    after = {dim: used.get(dim, 0) + asked.get(dim, 0) for dim in quota.min}
    return bool(beyond_min(quota, after))


def refuse_borrowing(
    book: QuotaBook, namespace: str, asked: Mapping[str, int]
) -> BorrowRefusal | None:
    """Why the namespace may not take `asked` (None: it may). `max` is checked apart."""
    quota = book.governing(namespace)
    if quota is None or not quota.min:
        return None
    used = book.ledger.used(namespace)
    after = {dim: used.get(dim, 0) + asked.get(dim, 0) for dim in quota.min}
    wanted = beyond_min(quota, after)
    dims = [dim for dim in wanted if asked.get(dim, 0)]
    if not dims:
        return None
    for dim, room in borrow_room(book, namespace, dims).items():
        if wanted[dim] > room.net:
            return BorrowRefusal(dim, wanted[dim], max(0, room.net), room.pool, fair=False)
        if wanted[dim] > room.share:
            return BorrowRefusal(dim, wanted[dim], room.share, room.pool, fair=True)
    return None


@dataclass(frozen=True, slots=True)
class BorrowRoom:
    """What a namespace may hold beyond its min in one dimension, as things are."""

    pool: int  # the idle guarantees of the other quotas
    net: int  # the pool less what the others already borrow (negative: over-lent)
    share: int  # its weighted share of the pool, itself counted among the borrowers

    @property
    def limit(self) -> int:
        """The most it may hold beyond its min now."""
        return max(0, min(self.net, self.share))


def borrow_room(
    book: QuotaBook, namespace: str, dims: Iterable[str] | None = None
) -> dict[str, BorrowRoom]:
    """Per dimension its quota's min sets (or those of `dims`), the room the namespace
    has to borrow: the idle guarantees of the others, net of what they borrow, and its
    fair share of them (its weight against the weights of the namespaces borrowing,
    itself included). Empty for a namespace without a quota or a min."""
    quota = book.governing(namespace)
    if quota is None or not quota.min:
        return {}
    others = [q for ns, q in book.governed().items() if ns != namespace]
    weights = quota.weight + sum(
        q.weight for q in others if beyond_min(q, book.ledger.used(q.namespace))
    )
    rooms: dict[str, BorrowRoom] = {}
    for dim in quota.min if dims is None else dims:
        pool = net = 0
        for other in others:
            if dim not in other.min:
                continue
            held = book.ledger.used(other.namespace).get(dim, 0)
            pool += max(0, other.min[dim] - held)
            net += other.min[dim] - held  # idle guarantees less what others borrow
        rooms[dim] = BorrowRoom(pool, net, int(pool * quota.weight / weights))
    return rooms


def dominant_share(book: QuotaBook, namespace: str) -> float:
    """What the namespace borrows now, as DRF weighs it: in each dimension its min sets,
    what it holds beyond its min as a fraction of all quotas' mins there (the most that
    can ever be borrowed: a denominator that does not move with usage, so one
    namespace's pods never change another's share); the largest of those fractions,
    divided by its weight. 0 when it borrows nothing (or has no quota)."""
    quota = book.governing(namespace)
    if quota is None or not quota.min:
        return 0.0
    total = book.guaranteed()
    held = beyond_min(quota, book.ledger.used(namespace))
    fractions = [amount / total[dim] for dim, amount in held.items() if total.get(dim, 0) > 0]
    return max(fractions, default=0.0) / quota.weight
