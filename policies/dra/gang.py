"""A gang's device choices within one planning attempt, and a reference search that
revisits earlier members' choices.

`Tentative` is what earlier members took: their new claims' devices ("in use" for the
members after them) and their claims, so that a claim shared by several members is
allocated once and reused by the others. A member's choice is taken and released
whole; a shared claim stays while any member that uses it holds it.

`allocate_gang` is the search the planner's member-choice kind performs: member by
member, each member's alternatives in the allocator's order; when a member has none,
the member before it moves to its next alternative (and so on back). It is bounded by
MAX_GANG_ALTERNATIVES alternatives tried over the whole gang, beside the allocator's
own bound per member and node.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cache.dra.claims import Allocation
from cache.dra.slices import DeviceId
from cache.dra.usage import DeviceUse, device_use

# Alternatives tried over a whole gang before the search gives up: each is one pod's
# allocation on its node, found by the allocator (itself bounded per pod and node).
MAX_GANG_ALTERNATIVES = 1_000


@dataclass(frozen=True, slots=True)
class ClaimChoice:
    """One claim of a pod: allocated now (`new`), or reused (allocated before, or by
    an earlier member of the gang)."""

    key: str
    allocation: Allocation
    new: bool


@dataclass(frozen=True, slots=True)
class PodAllocation:
    claims: tuple[ClaimChoice, ...]

    def taken(self) -> tuple[DeviceId, ...]:
        return tuple(d for c in self.claims if c.new for d in c.allocation.charged())

    def new_allocations(self) -> tuple[tuple[str, Allocation], ...]:
        """What `DraCache.assume` holds for this pod."""
        return tuple((c.key, c.allocation) for c in self.claims if c.new)


@dataclass(slots=True)
class _Shared:
    allocation: Allocation
    owners: set[str] = field(default_factory=set)


class Tentative:
    """The devices and claims earlier members of one attempt took."""

    __slots__ = ("_by_pod", "_claims", "_taken")

    def __init__(self) -> None:
        self._taken: dict[DeviceId, set[str]] = {}  # device -> claim keys (shares: many)
        self._claims: dict[str, _Shared] = {}
        self._by_pod: dict[str, PodAllocation] = {}

    def holder(self, device: DeviceId) -> str:
        """A claim that takes the device, whole or a share of it ("" when none)."""
        keys = self._taken.get(device)
        return min(keys) if keys else ""

    def use(self, device: DeviceId) -> DeviceUse:
        """What the earlier members' new claims take of the device."""
        keys = self._taken.get(device)
        if not keys:
            return DeviceUse()
        return device_use((self._claims[key].allocation for key in sorted(keys)), device)

    def devices(self) -> frozenset[DeviceId]:
        return frozenset(self._taken)

    def held(self) -> Mapping[DeviceId, set[str]]:
        """Every device earlier members took, whole or a share (device -> claim keys)."""
        return self._taken

    def claim(self, key: str) -> Allocation | None:
        shared = self._claims.get(key)
        return None if shared is None else shared.allocation

    def by_pod(self) -> Mapping[str, PodAllocation]:
        return self._by_pod

    def copy(self) -> Tentative:
        """The same holdings, apart from this one's later changes."""
        copied = Tentative()
        copied._taken = {device: set(keys) for device, keys in self._taken.items()}
        copied._claims = {k: _Shared(s.allocation, set(s.owners)) for k, s in self._claims.items()}
        copied._by_pod = dict(self._by_pod)
        return copied

    def take(self, uid: str, choice: PodAllocation) -> None:
        self.release(uid)
        for claim in choice.claims:
            shared = self._claims.get(claim.key)
            if shared is None:
                if not claim.new:
                    continue  # allocated before the gang: nothing to hold here
                shared = self._claims[claim.key] = _Shared(claim.allocation)
                for device in claim.allocation.charged():
                    self._taken.setdefault(device, set()).add(claim.key)
            shared.owners.add(uid)
        self._by_pod[uid] = choice

    def release(self, uid: str) -> None:
        choice = self._by_pod.pop(uid, None)
        if choice is None:
            return
        for claim in choice.claims:
            shared = self._claims.get(claim.key)
            if shared is None:
                continue
            shared.owners.discard(uid)
            if not shared.owners:
                del self._claims[claim.key]
                for device in shared.allocation.charged():
                    keys = self._taken.get(device)
                    if keys is not None:
                        keys.discard(claim.key)
                        if not keys:
                            del self._taken[device]


@dataclass(frozen=True, slots=True)
class GangMember:
    """One pod of the gang on the node its placement chose."""

    uid: str
    namespace: str
    claims: tuple[str, ...]  # claim keys "ns/name", in the pod's order
    node: str
    labels: Mapping[str, str] = field(default_factory=dict)
    # Devices to try first, in this order (the shared GPUs the planner's device choice
    # took: docs/dra.md, "Packing DRA shares"); only the order changes.
    prefer: tuple[DeviceId, ...] = ()


class AlternativesSource(Protocol):
    """What `allocate_gang` needs of the allocator (ClaimAllocator implements it)."""

    def alternatives(self, member: GangMember, tentative: Tentative) -> Iterator[PodAllocation]: ...

    def why_none(self, member: GangMember, tentative: Tentative) -> str: ...


def allocate_gang(
    source: AlternativesSource,
    members: Sequence[GangMember],
    budget: int = MAX_GANG_ALTERNATIVES,
) -> dict[str, PodAllocation] | str:
    """Every member's allocation, or why none was found (the member that failed last
    at the deepest point of the search, or the bound)."""
    tentative = Tentative()
    streams: list[Iterator[PodAllocation]] = []
    deepest, reason = -1, ""
    tried = 0
    index = 0
    while 0 <= index < len(members):
        member = members[index]
        if len(streams) <= index:
            streams.append(source.alternatives(member, tentative))
        choice = next(streams[index], None)
        if choice is not None:
            tried += 1
            if tried > budget:
                return f"device search bound reached ({budget} alternatives over the gang)"
            tentative.take(member.uid, choice)
            index += 1
            continue
        if index >= deepest:
            deepest, reason = index, source.why_none(member, tentative)
        streams.pop()
        index -= 1
        if index >= 0:
            tentative.release(members[index].uid)
    if index < 0:
        return reason
    return dict(tentative.by_pod())
