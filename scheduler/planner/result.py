"""What a planning call returns (a plan, or why the gang waits), and what it needs to
know of a gang."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cache.cluster import Placement
from cache.pod import PodInfo
from policies.filters.volume_binding import ClaimChoice


class PlannableGang(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def pending(self) -> Sequence[PodInfo]: ...

    @property
    def needed(self) -> int: ...

    @property
    def min_member(self) -> int: ...

    @property
    def bound(self) -> Sequence[PodInfo]: ...

    @property
    def role_needed(self) -> Mapping[str, int]: ...

    def roles_missing(self, placed: Iterable[PodInfo]) -> Mapping[str, tuple[int, int]]: ...

    def role_of(self, pod: PodInfo) -> str | None: ...


@dataclass(frozen=True)
class Plan:
    gang_key: str
    placements: tuple[Placement, ...]
    # Pending members beyond minMember that found no room this time, with the reason.
    left_out: dict[str, str] = field(default_factory=dict)
    score: float = 0.0
    attempt: str = ""
    # pod uid -> what PreBind writes for its unbound WaitForFirstConsumer claims.
    volumes: Mapping[str, tuple[ClaimChoice, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Unschedulable:
    gang_key: str
    needed: int
    placeable: int
    message: str
    # pod uid -> the message that pod should carry (PodScheduled=False, event).
    reasons: dict[str, str] = field(default_factory=dict)


PlanResult = Plan | Unschedulable
