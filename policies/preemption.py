"""Which gangs to evict so that a gang fits: the victim search, pure (docs/quotas.md).

The caller says which running gangs may be victims (lower priority than the preemptor,
or borrowing beyond their quota's min when the preemptor reclaims its guarantee), gives
`fits(victims)`: whether the preemptor's gang would be placed once those whole gangs
are gone (the planner, on a snapshot without them), and may give `admissible(victims)`:
whether a set may be evicted at all (reclaim takes no namespace below its own min). The
search then picks:

- whole gangs only: a victim is a gang key, and all its members go;
- nothing at all when even every candidate evicted would not let the gang fit (never
  preempt for a gang that still would not be placed);
- the minimal set in the caller's order (`rank`). Priority preemption
  (`FEWEST_VICTIMS`): fewest victims, then the lowest priority among them (the highest
  victim priority as low as possible, then their sum), then the least GPU-time lost
  (GPUs held times how long they have run: work thrown away). Reclaim
  (`FEWEST_GPUS`): the fewest GPUs taken back, then the lowest priority, then fewest
  victims, then the least GPU-time lost.

Exact: sets are enumerated cheapest first in `rank` order (every rank here can only
grow when a gang is added to a set or swapped for a later one in the pool's order, so
a heap of sets grown from the cheapest yields them all in order), and the first
admissible set that fits is the minimal one. `max_checks` bounds the calls to `fits`
(each one is a planning pass), and `max_checks * SETS_PER_CHECK` the sets looked at;
when either runs out before a set fitted, None (no preemption this time; the gang
retries later), never a set that is not minimal among those checked.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

DEFAULT_MAX_CHECKS = 256
# Sets skipped as inadmissible cost no planning pass, but are bounded too.
SETS_PER_CHECK = 64


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


# How victim sets are ordered: a key that never decreases when a candidate is added to
# a set or replaced by one later in the pool (sorted by the key of each alone).
Rank = Callable[[Sequence[Candidate]], tuple[float, ...]]


def fewest_victims(victims: Sequence[Candidate]) -> tuple[float, ...]:
    """Priority preemption's order: fewest victims, then `cost`."""
    return (len(victims), *cost(victims))


def fewest_gpus(victims: Sequence[Candidate]) -> tuple[float, ...]:
    """Reclaim's order: fewest GPUs taken back, then the lowest priority (highest
    victim priority, then fewest victims, then the sum: the count comes before the sum
    so that adding a gang of no GPUs and a negative priority still ranks after), then
    the least GPU-time lost."""
    if not victims:
        return (0, 0, 0, 0, 0.0)
    return (
        sum(v.gpu_milli for v in victims),
        max(v.priority for v in victims),
        len(victims),
        sum(v.priority for v in victims),
        sum(v.gpu_time for v in victims),
    )


FEWEST_VICTIMS: Rank = fewest_victims
FEWEST_GPUS: Rank = fewest_gpus


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
    rank: Rank = FEWEST_VICTIMS,
    admissible: Callable[[frozenset[str]], bool] | None = None,
) -> Victims | None:
    """The minimal admissible set of whole gangs whose eviction lets the preemptor fit,
    or None (no set does, or a budget ran out first). Asked only for a gang that does
    not fit as things are (the planner said so). `fits` must be monotone (more gangs
    gone never makes the gang fit less); `admissible` need not be."""
    unique = {c.key: c for c in candidates}
    pool = sorted(unique.values(), key=lambda c: (rank([c]), c.key))
    if not pool or max_checks < 1:
        return None
    everyone = frozenset(unique)
    checks = 1
    if not fits(everyone):
        return None  # even all of them would not make room: never preempt
    for looked, chosen in enumerate(_in_rank_order(pool, rank)):
        if looked >= max_checks * SETS_PER_CHECK:
            return None
        keys = frozenset(c.key for c in chosen)
        if admissible is not None and not admissible(keys):
            continue
        if keys == everyone:
            return Victims(chosen, checks)  # already known to fit
        if checks >= max_checks:
            return None
        checks += 1
        if fits(keys):
            return Victims(chosen, checks)
    return None


def _in_rank_order(pool: Sequence[Candidate], rank: Rank) -> Iterator[tuple[Candidate, ...]]:
    """Every non-empty subset of the pool, cheapest first by `rank` (ties by index).
    Lazily: each set (indexes increasing, last one m) has two successors, itself with
    m + 1 added and with m replaced by m + 1; every set has exactly one predecessor, and
    a successor never ranks lower, so a heap grown from {0} pops them all in order
    without enumerating the rest (C(100, 3) is 161,700)."""

    def entry(combo: tuple[int, ...]) -> tuple[tuple[float, ...], tuple[int, ...]]:
        return (rank([pool[i] for i in combo]), combo)

    heap = [entry((0,))]
    while heap:
        _, combo = heapq.heappop(heap)
        yield tuple(pool[i] for i in combo)
        last = combo[-1]
        if last + 1 < len(pool):
            heapq.heappush(heap, entry((*combo, last + 1)))
            heapq.heappush(heap, entry((*combo[:-1], last + 1)))
