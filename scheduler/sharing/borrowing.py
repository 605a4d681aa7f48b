"""Keeping the queue's "guaranteed first" order current (docs/quotas.md, "Guaranteed
first").

Whether a gang would borrow beyond its namespace's quota `min` is judged when the gang
enters the queue or changes; it also changes when its namespace's usage does (a job of
the namespace placed or finished). The queue judges a gang again when it reaches the
head as guaranteed (scheduler/gangs/queue.py, `borrows_now`), which catches a gang that now
borrows; this catches the other way round, a gang ordered among the borrowers whose
namespace is back under its `min`: the namespaces with a `min` whose usage changed since
the last look have their queued gangs judged again, when it fell (a team's queued
gangs, typically few, once per cycle at most).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from cache.quota import QuotaBook


@dataclass
class BorrowingWatch:
    book: QuotaBook
    # namespace -> keys of its gangs seen in the queue.
    _gangs: dict[str, set[str]] = field(default_factory=dict)
    # namespace -> its usage when its gangs were last judged.
    _usage: dict[str, dict[str, int]] = field(default_factory=dict)
    _generation: int = -1  # the quotas' generation then (a changed min judges all)

    def queued(self, key: str, namespace: str) -> None:
        self._gangs.setdefault(namespace, set()).add(key)

    def gone(self, key: str, namespace: str) -> None:
        keys = self._gangs.get(namespace)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._gangs[namespace]
                self._usage.pop(namespace, None)

    def to_judge(self) -> Iterator[str]:
        """Keys of the queued gangs of namespaces with a `min` whose usage changed (every
        namespace's, after a quota changed)."""
        if self._generation != self.book.generation:
            self._generation = self.book.generation
            self._usage.clear()
        for namespace, keys in self._gangs.items():
            quota = self.book.governing(namespace)
            if quota is None or not quota.min:
                continue
            usage: Mapping[str, int] = self.book.ledger.used(namespace)
            before = self._usage.get(namespace)
            if before == usage:
                continue
            self._usage[namespace] = dict(usage)
            # Usage that only rose makes no gang guaranteed (those that now borrow are
            # caught at the head of the queue), so the work is done only when it fell.
            if before is None or any(usage.get(dim, 0) < held for dim, held in before.items()):
                yield from list(keys)
