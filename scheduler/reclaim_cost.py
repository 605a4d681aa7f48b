"""The reclaim cost bound applied to one reclaim search (policies/reclaim_cost.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

from cache.pod import PodInfo
from cache.quota import GPU
from policies.reclaim_cost import ReclaimCost
from scheduler.gang import Gang
from scheduler.quotas import needed_usage

RECLAIM_COST = ReclaimCost()


class _Victim(Protocol):
    @property
    def pods(self) -> tuple[PodInfo, ...]: ...


V = TypeVar("V", bound=_Victim)


def cost_bounded(
    gang: Gang,
    now: float,
    victims: Mapping[str, V],
    admissible: Callable[[frozenset[str]], bool],
    cost: ReclaimCost = RECLAIM_COST,
) -> tuple[dict[str, V], Callable[[frozenset[str]], bool]]:
    """The victims and admissibility of a reclaim by `gang`, within what it may cost:
    a victim alone over the limit is left out (fewer sets to weigh), and a set over it
    is not admissible. The reclaimer's wait counts from its oldest member's creation
    (a gang recreated after an eviction waits anew)."""
    gpus = {key: sum(pod.gpu.total_milli for pod in v.pods) for key, v in victims.items()}
    limit = cost.limit(needed_usage(gang).get(GPU, 0), now - gang.created)
    if limit is None:
        return dict(victims), admissible
    kept = {key: victim for key, victim in victims.items() if gpus[key] <= limit}

    def within(keys: frozenset[str]) -> bool:
        return sum(gpus[key] for key in keys) <= limit and admissible(keys)

    return kept, within
