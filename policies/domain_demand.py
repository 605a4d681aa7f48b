"""The learnt demand for topology domains by size: which GPU counts the gangs that
require one domain of a level have asked, so that the choice of a domain for a gang
keeps whole the domains the larger gangs to come will need (in the spirit of the
whole-node reserve, policies/whole_node_reserve.py, one level up).

Placing a gang of `need` GPUs in a domain with `free` free takes that domain away from
every later gang larger than this one of a size in (free - need, free]: it could hold
them before and cannot after. What that costs is each such size's share of the recent
gangs requiring the level, over how many domains hold that size now (losing the only
domain that holds a 64-GPU gang costs more than losing one of ten): `lost`. The domain
losing the least is preferred, best fit (least free) among equals. Sizes up to the
gang's own are not counted (as the whole-node reserve lets a pod of the class take its
room): with no history, or gangs of one size, the choice is plain best fit.

What it reads: the sizes of gangs seen, each gang once (a gang retried while it waits
is not counted again), the last `window` of them per level; never arrival order
beyond that window. Pure: no I/O; the planner feeds it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, OrderedDict, deque
from collections.abc import Sequence

DEFAULT_WINDOW = 512
# Gang keys remembered as counted (a bound on memory; one forgotten is counted again).
_REMEMBERED_GANGS = 8192


class DomainDemand:
    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self.window = window
        self._sizes: dict[str, deque[int]] = {}
        self._counts: dict[str, Counter[int]] = {}
        self._counted: OrderedDict[str, None] = OrderedDict()

    def observe(self, gang_key: str, level: str, gpu_milli: int) -> None:
        """A gang requiring one domain of `level` asks `gpu_milli` in all."""
        if gang_key in self._counted:
            self._counted.move_to_end(gang_key)
            return
        self._counted[gang_key] = None
        if len(self._counted) > _REMEMBERED_GANGS:
            self._counted.popitem(last=False)
        sizes = self._sizes.setdefault(level, deque())
        counts = self._counts.setdefault(level, Counter())
        sizes.append(gpu_milli)
        counts[gpu_milli] += 1
        if len(sizes) > self.window:
            old = sizes.popleft()
            counts[old] -= 1
            if not counts[old]:
                del counts[old]

    def lost(self, level: str, free: int, need: int, holders: Sequence[int]) -> float:
        """What a domain with `free` GPU milli costs the level's learnt demand once a
        gang of `need` takes its room (0.0 with no history). `holders`: every domain's
        free GPU milli, ascending (how many hold a size)."""
        counts = self._counts.get(level)
        if not counts:
            return 0.0
        after = free - need
        total = sum(counts.values())
        cost = 0.0
        for size, n in counts.items():
            if size > need and after < size <= free:
                holding = len(holders) - bisect_left(holders, size)
                cost += n / total / max(1, holding)
        return cost
