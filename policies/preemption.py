"""Which gangs to evict so that a gang fits: the victim search, pure (docs/quotas.md).

Not wired to the Eviction API yet. The caller says which running gangs may be victims
(lower priority than the preemptor, or borrowing beyond their quota's min when the
preemptor reclaims its guarantee) and gives `fits(victims)`: whether the preemptor's
gang would be placed once those whole gangs are gone (the planner, on a snapshot
without them). The search then picks:

- whole gangs only: a victim is a gang key, and all its members go;
- nothing at all when even every candidate evicted would not let the gang fit (never
  preempt for a gang that still would not be placed);
- the minimal set, compared in this order: fewest victims, then the lowest priority
  among them (the highest victim priority as low as possible, then their sum), then
  the least GPU-time lost (GPUs held times how long they have run: work thrown away).

Exact: sets are tried by size, and within a size in cost order, so the first set that
fits is the minimal one. `max_checks` bounds the calls to `fits` (each one is a
planning pass); when it runs out before any set fitted, None (no preemption this time;
the gang retries later), never a set that is not minimal among those checked.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

DEFAULT_MAX_CHECKS = 256


@dataclass(frozen=True, slots=True)
class Candidate:
    """A running gang that may be evicted."""

    key: str
    priority: int
    gpu_milli: int  # GPUs its members hold, in milli of a GPU
    running_seconds: float  # how long it has run (its GPU-time lost if evicted)

    @property
    def gpu_time(self) -> float:
        return self.gpu_milli * max(0.0, self.running_seconds)


# The order victim sets of one size are compared in (lower is better).
Cost = tuple[int, int, float]


def cost(victims: Sequence[Candidate]) -> Cost:
    if not victims:
        return (0, 0, 0.0)
    return (
        max(v.priority for v in victims),
        sum(v.priority for v in victims),
        sum(v.gpu_time for v in victims),
    )


@dataclass(frozen=True, slots=True)
class Victims:
    gangs: tuple[Candidate, ...]
    checks: int  # calls to `fits` it took

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(v.key for v in self.gangs)


def choose_victims(
    candidates: Sequence[Candidate],
    fits: Callable[[frozenset[str]], bool],
    *,
    max_checks: int = DEFAULT_MAX_CHECKS,
) -> Victims | None:
    """The minimal set of whole gangs whose eviction lets the preemptor fit, or None
    (no set does, or the budget of checks ran out first). Asked only for a gang that
    does not fit as things are (the planner said so)."""
    unique = {c.key: c for c in candidates}
    pool = sorted(unique.values(), key=lambda c: (cost([c]), c.key))
    if not pool or max_checks < 1:
        return None
    checks = 1
    if not fits(frozenset(unique)):
        return None  # even all of them would not make room: never preempt
    for size in range(1, len(pool) + 1):
        for chosen in _by_cost(pool, size):
            keys = frozenset(c.key for c in chosen)
            if size == len(pool):
                return Victims(tuple(chosen), checks)  # all of them: already known to fit
            if checks >= max_checks:
                return None
            checks += 1
            if fits(keys):
                return Victims(tuple(chosen), checks)
    return None


def _by_cost(pool: Sequence[Candidate], size: int) -> Iterator[tuple[Candidate, ...]]:
    """Every subset of `size` candidates, cheapest first (by `cost`). Lazily: a heap of
    index combinations grown from the cheapest, so a search that stops early never
    enumerates the rest (C(100, 3) is 161,700)."""
    if size > len(pool):
        return
    start = tuple(range(size))
    heap = [(cost([pool[i] for i in start]), start)]
    seen = {start}
    while heap:
        _, combo = heapq.heappop(heap)
        yield tuple(pool[i] for i in combo)
        # Successors: move one index one step right, keeping the indexes increasing.
        for position in range(size):
            moved = combo[position] + 1
            limit = combo[position + 1] if position + 1 < size else len(pool)
            if moved >= limit:
                continue
            successor = (*combo[:position], moved, *combo[position + 1 :])
            if successor not in seen:
                seen.add(successor)
                heapq.heappush(heap, (cost([pool[i] for i in successor]), successor))
