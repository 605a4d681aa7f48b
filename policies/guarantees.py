"""What an ElasticQuota's `min` protects from eviction (docs/quotas.md, "Reclaim").

Pure. A namespace's usage up to its `min` is guaranteed: a gang of another namespace
may take back only what the namespace holds beyond its min, whether it reclaims its own
guarantee or preempts by priority (a guarantee beats priority). So a gang of a
namespace with a quota is a victim for another namespace's gang only when

- the namespace holds more than its min in a resource the preemptor asks for, and the
  gang holds some of that resource (it is part of what is borrowed, not guaranteed);
- and, for the whole set of victims, the namespace keeps at least its min in every
  resource it holds beyond its min now (`within_floors`).

A gang of the preemptor's own namespace, and gangs of namespaces without a quota (or a
quota without a min), are outside this rule: priority alone decides for them.

Why this also rules out A-evicts-B-evicts-A between namespaces: a gang evicted this way
holds some resource R its namespace borrowed, and its namespace keeps at least its min
in R; recreated, the gang asks for R again, so it would borrow and may not reclaim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cache.quota import QuotaBook
from policies.fair_share import beyond_min


@dataclass(frozen=True, slots=True)
class Holding:
    """A running gang as the guarantee rule sees it: its namespace and what its bound
    members count against that namespace's quota."""

    key: str
    namespace: str
    usage: Mapping[str, int]


def guarded(book: QuotaBook, namespace: str) -> bool:
    """Whether the namespace has a quota with a min (something to protect)."""
    quota = book.governing(namespace)
    return quota is not None and bool(quota.min)


def borrowed(book: QuotaBook, namespace: str, asked: Iterable[str]) -> frozenset[str]:
    """The resources among `asked` the namespace holds beyond its min."""
    quota = book.governing(namespace)
    if quota is None or not quota.min:
        return frozenset()
    over = beyond_min(quota, book.ledger.used(namespace))
    return frozenset(dim for dim in asked if dim in over)


def may_take(
    book: QuotaBook, preemptor_namespace: str, asked: Iterable[str], gang: Holding
) -> bool:
    """Whether `gang` may be a victim for a gang of `preemptor_namespace` asking for the
    resources `asked`: outside the rule, or part of what its namespace borrows."""
    if gang.namespace == preemptor_namespace or not guarded(book, gang.namespace):
        return True
    return any(gang.usage.get(dim, 0) > 0 for dim in borrowed(book, gang.namespace, asked))


def within_floors(book: QuotaBook, preemptor_namespace: str, victims: Iterable[Holding]) -> bool:
    """Whether evicting `victims` together leaves every other namespace with a quota
    at least its min in each resource it now holds beyond its min."""
    taken: dict[str, dict[str, int]] = {}
    for gang in victims:
        if gang.namespace == preemptor_namespace:
            continue
        into = taken.setdefault(gang.namespace, {})
        for dim, amount in gang.usage.items():
            into[dim] = into.get(dim, 0) + amount
    for namespace, amounts in taken.items():
        quota = book.governing(namespace)
        if quota is None or not quota.min:
            continue
        for dim, spare in beyond_min(quota, book.ledger.used(namespace)).items():
            if amounts.get(dim, 0) > spare:
                return False
    return True
