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
admissible set that fits is the minimal one.

Two things keep that affordable on a cluster of thousands of candidates:
- `refuses(victims)`, when the caller gives it, is a cheap test that a set cannot fit
  (the resources it frees cannot hold the gang: scheduler/sharing/victim_fit.py's bound). A
  set it refuses costs no planning pass and is not counted against `max_checks`, which
  bounds only the calls to `fits` (each one a planning pass).
- `gpu_floor`, for reclaim's order (whose first key is the GPUs taken back, a plain
  sum): the fewest GPU milli any fitting set frees (the gang's GPUs less those already
  free). Sets below it are skipped in bulk, never enumerated: the heap holds, beside
  sets, groups of sets (a prefix with any non-empty choice of the gangs after a
  position) keyed by a lower bound of the ranks they hold from the floor up, so the
  first set looked at already frees enough GPUs (otherwise thousands of one-GPU gangs
  make billions of cheaper sets, none of which fits).

`max_checks * SETS_PER_CHECK` bounds the sets and groups looked at. When a budget runs
out before a set fitted, None (no preemption this time; the gang retries later), never
a set that is not minimal among those checked.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

DEFAULT_MAX_CHECKS = 256
# Sets skipped as inadmissible or refused cost no planning pass, but are bounded too.
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
    if len(victims) == 1:  # the pool is sorted by this: thousands of calls per search
        only = victims[0]
        return (1, only.priority, only.priority, only.gpu_time)
    return (len(victims), *cost(victims))


def fewest_gpus(victims: Sequence[Candidate]) -> tuple[float, ...]:
    """Reclaim's order: fewest GPUs taken back, then the lowest priority (highest
    victim priority, then fewest victims, then the sum: the count comes before the sum
    so that adding a gang of no GPUs and a negative priority still ranks after), then
    the least GPU-time lost."""
    if not victims:
        return (0, 0, 0, 0, 0.0)
    if len(victims) == 1:  # the pool is sorted by this: thousands of calls per search
        only = victims[0]
        return (only.gpu_milli, only.priority, 1, only.priority, only.gpu_time)
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
    refuses: Callable[[frozenset[str]], bool] | None = None,
    gpu_floor: int = 0,
) -> Victims | None:
    """The minimal admissible set of whole gangs whose eviction lets the preemptor fit,
    or None (no set does, or a budget ran out first). Asked only for a gang that does
    not fit as things are (the planner said so). `fits` must be monotone (more gangs
    gone never makes the gang fit less); `admissible` need not be. `refuses(keys)` true
    must mean `fits(keys)` false; `gpu_floor` must be at most the GPU milli of any set
    that fits (used with `FEWEST_GPUS` only)."""
    unique = {c.key: c for c in candidates}
    pool = sorted(unique.values(), key=lambda c: (rank([c]), c.key))
    if not pool or max_checks < 1:
        return None
    everyone = frozenset(unique)
    checks = 1
    if not fits(everyone):
        return None  # even all of them would not make room: never preempt
    if rank is FEWEST_GPUS and gpu_floor > 0:
        order = _from_gpu_floor(pool, gpu_floor)
    else:
        order = _in_rank_order(pool, rank)
    for looked, chosen in enumerate(order):
        if looked >= max_checks * SETS_PER_CHECK:
            return None
        if not chosen:
            continue  # a group of sets opened: looked at, nothing to check
        keys = frozenset(c.key for c in chosen)
        if admissible is not None and not admissible(keys):
            continue
        if keys == everyone:
            return Victims(chosen, checks)  # already known to fit
        if refuses is not None and refuses(keys):
            continue  # cannot fit, and no planning pass spent to know it
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


# What `_from_gpu_floor`'s heap holds: a lower bound of the ranks of the sets an entry
# stands for, whether it is a group (0, opened before a set of equal key) or a set (1),
# and the indexes of the pool it names.
_Entry = tuple[tuple[float, ...], int, tuple[int, ...]]
_GROUP, _SET = 0, 1


def _from_gpu_floor(pool: Sequence[Candidate], floor: int) -> Iterator[tuple[Candidate, ...]]:
    """The subsets of the pool (sorted by `FEWEST_GPUS` alone, so by GPUs first) whose
    GPUs reach `floor`, in `FEWEST_GPUS` order; between them, empty tuples for each
    group of sets opened, so that the caller counts the work.

    A group (prefix P, position k) stands for every set P + T, T a non-empty subset of
    the pool from k on; it opens into the set P + {k} and the groups (P + {k}, k + 1)
    and (P, k + 1), which partition it. Its key is a lower bound of its sets' ranks
    among those reaching the floor: GPUs at least the floor and at least P's plus
    pool[k]'s (the smallest after k), the highest priority at least P's, at least one
    gang more than P; the rest unknown. A group whose every gang from k on would not
    reach the floor holds no such set and is dropped. So a set is popped only when no
    group can hold a cheaper one, and the sets below the floor are never made."""
    size = len(pool)
    after = [0] * (size + 1)  # GPUs of the pool from index i on
    for i in range(size - 1, -1, -1):
        after[i] = after[i + 1] + pool[i].gpu_milli
    unknown = -math.inf

    def push_group(heap: list[_Entry], prefix: tuple[int, ...], gpus: int, k: int) -> None:
        if k >= size or gpus + after[k] < floor:
            return
        top = max((pool[i].priority for i in prefix), default=unknown)
        low = max(floor, gpus + pool[k].gpu_milli)
        heapq.heappush(heap, ((low, top, len(prefix) + 1, unknown, unknown), _GROUP, (*prefix, k)))

    # The groups of one gang and any after it, (nothing, k), open first as long as
    # pool[k] holds at most the floor: their key (the floor, nothing above) is the
    # lowest there is. Opened in one pass and heapified, not popped one by one.
    heap: list[_Entry] = []
    k = 0
    while k < size and pool[k].gpu_milli <= floor and after[k] >= floor:
        yield ()
        if pool[k].gpu_milli == floor:
            heap.append((fewest_gpus((pool[k],)), _SET, (k,)))
        if k + 1 < size and pool[k].gpu_milli + after[k + 1] >= floor:
            low = max(floor, pool[k].gpu_milli + pool[k + 1].gpu_milli)
            key = (low, pool[k].priority, 2, unknown, unknown)
            heap.append((key, _GROUP, (k, k + 1)))
        k += 1
    heapq.heapify(heap)
    push_group(heap, (), 0, k)
    while heap:
        _, kind, combo = heapq.heappop(heap)
        chosen = tuple(pool[i] for i in combo)
        if kind == _SET:
            yield chosen
            continue
        yield ()
        *start, k = combo
        prefix = tuple(start)
        gpus = sum(pool[i].gpu_milli for i in prefix)
        if gpus + pool[k].gpu_milli >= floor:
            heapq.heappush(heap, (fewest_gpus(chosen), _SET, combo))
        push_group(heap, combo, gpus + pool[k].gpu_milli, k + 1)
        push_group(heap, prefix, gpus, k + 1)
