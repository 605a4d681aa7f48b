"""Equal values of pod records held once (issue 31: 150,000 pods in 300 MiB).

The pods of one workload carry the same labels, requests and tolerations: a
Deployment's 300 replicas decode into 300 equal label dicts, 300 equal request dicts
and 300 equal toleration tuples, each with its own strings. A record keeps the first
equal value seen instead of its own (`share`); what it saves is ~1 KB a pod
(docs/benchmarks.md, "Memory of the running pods").

Why this is safe: records never change these values in place (cache/pod_copy.py
relies on it too; PodInfo types them as read-only Mappings and tuples, so mypy refuses
a write); sharing changes which object a record holds, never what it reads.

How it stays small: the table is keyed by the value's hash alone (an int, not a copy of
the value), holds one value per hash (a collision shares nothing, which is harmless),
and is swept of values no record holds any more each time it doubles, so a stream of
distinct values (a Job's pods, each with its own controller-uid label) costs at most one
entry per live value, never a leak. Pure: no I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Mapping
from typing import TypeVar

V = TypeVar("V")
M = TypeVar("M", bound=Mapping[str, object])

# Below this many entries the table is never swept (a sweep walks it all).
_MIN_SWEEP = 4096
# A value held by the table alone: the table's reference and getrefcount's argument.
_TABLE_ONLY = 2


class SharedValues:
    """hash -> the first value seen with it, while some record holds it."""

    def __init__(self, min_sweep: int = _MIN_SWEEP) -> None:
        self._by_hash: dict[int, object] = {}
        self._min_sweep = min_sweep
        self._sweep_at = min_sweep

    def __len__(self) -> int:
        return len(self._by_hash)

    def share(self, value: V, digest: int) -> V:
        """The value held for `digest` when it equals `value` (and is of its type),
        else `value` itself, kept for the next equal one when the slot is free."""
        held = self._by_hash.get(digest)
        if held is not None:
            if type(held) is type(value) and held == value:
                return held  # the same type, checked above
            return value
        if len(self._by_hash) >= self._sweep_at:
            self._sweep()
        self._by_hash[digest] = value
        return value

    def _sweep(self) -> None:
        """Drop the values no record holds any more (CPython's reference count)."""
        by_hash = self._by_hash
        for digest in list(by_hash):
            if sys.getrefcount(by_hash[digest]) <= _TABLE_ONLY:
                del by_hash[digest]
        self._sweep_at = max(self._min_sweep, 2 * len(self._by_hash))


_TABLE = SharedValues()


def shared_mapping(value: M) -> M:
    """An equal mapping some record already holds, else `value`. Its keys and values
    must be hashable (labels: strings; requests: ints)."""
    try:
        digest = hash(tuple(value.items()))
    except TypeError:  # an unhashable value: not shared
        return value
    return _TABLE.share(value, digest)


def shared_tuple(value: V) -> V:
    """An equal tuple (of hashable records: tolerations, ports) some record already
    holds, else `value`."""
    if not value or not isinstance(value, Hashable):
        return value  # the empty tuple is one object already
    try:
        digest = hash(value)
    except TypeError:  # a tuple holding something unhashable
        return value
    return _TABLE.share(value, digest)


def table_size() -> int:
    """How many values the process-wide table holds (tests read it)."""
    return len(_TABLE)
