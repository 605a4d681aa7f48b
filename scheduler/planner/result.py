"""What a planning call returns (a plan, or why the gang waits), and what it needs to
know of a gang."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cache.cluster import Placement
from cache.dra.claims import Allocation, Consumer
from cache.gpu import GpuRequest
from cache.pod import PodInfo
from cache.topology_requirement import TopologyRequirement
from policies.filters.volume_binding import ClaimChoice
from scheduler.planner.extended_claims import ExtendedClaim


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

    # Where the members may run (None: no topology stated).
    @property
    def topology(self) -> TopologyRequirement | None: ...


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
    # The DRA claims of the placed members (docs/dra.md): each claim once, however many
    # members share it; written to the claim's status before the first Binding.
    claims: tuple[ClaimAllocation, ...] = ()
    # pod uid -> the GPU demand of its claim, for the placed members the planner judged
    # by it (scheduler/planner/dra_claims.py): what the cache records they hold.
    claim_gpus: tuple[tuple[str, GpuRequest], ...] = ()


@dataclass(frozen=True)
class ClaimAllocation:
    """What the binder writes to one ResourceClaim's status before any member binds:
    `allocation` (None: the claim was already allocated, by us or by others, and only
    `reserved_for` is added) and the placed members that use it, each a `reservedFor`
    entry. The write is conditional on `resource_version`, the version this plan read,
    so a claim changed since (re-allocated, deleted and re-created) fails the write and
    breaks the gang instead of being overwritten."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    allocation: Allocation | None
    reserved_for: tuple[Consumer, ...]
    # A claim for a pod's DRA-backed extended resources that does not exist yet: the
    # binder creates it (owned by the pod, annotated, its name generated), writes its
    # status, then the pod's status.extendedResourceClaimStatus. `name` is then the
    # planner's made-up one (docs/dra.md, "Extended resources").
    extended: ExtendedClaim | None = None
    # A claim of the whole gang (its native PodGroup's spec.resourceClaims): the uids of
    # the placed members that use it, while `reserved_for` holds the PodGroup. A
    # rollback takes the PodGroup's entry back only once all of them are known unbound;
    # empty where the PodGroup held the claim before this plan (not ours to release).
    group_members: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Unschedulable:
    gang_key: str
    needed: int
    placeable: int
    message: str
    # pod uid -> the message that pod should carry (PodScheduled=False, event).
    reasons: dict[str, str] = field(default_factory=dict)


PlanResult = Plan | Unschedulable
