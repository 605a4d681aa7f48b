"""The devices as a what-if sees them: the DraCache once some pods are gone.

Preemption, reclaim and the starvation guard plan a gang on a copy of the snapshot
without some pods (the victims, or the pods a reservation waits for). Those pods'
ResourceClaims do not go with them: the resourceclaim controller removes a gone pod
from a claim's `reservedFor`, and when nobody is left it deallocates the claim (only a
claim carrying the `resource.kubernetes.io/delete-protection` finalizer, which every
allocator puts on before writing an allocation), or deletes it when it was made from a
template for that pod. So, once the pods are gone, a claim is released when:

- it is allocated (its status says so: a hold of this scheduler is not released), and
- every consumer in its `reservedFor` is one of the pods gone (a claim still reserved
  for a pod that stays, or for a consumer that is not a pod, keeps its devices), and
- the controller will act on it: it carries the finalizer and was reserved for one of
  them, or it is controlled by one of them (made from its template: deleted with it).

`ReleasedView` answers what the planner asks of a DraCache, with those claims
unallocated and reserved for nobody and their devices free (unless another
allocation, a hold or a preemptor's keep also takes them): a device a released claim
took whole is free, a share it took gives its consumed capacity back to the device, and
a partition (a device drawing on its pool's counter sets) no longer in use gives its
counters back to the pool. It never changes the
DraCache it reads: the core's stays as the API says, and the answers the planner keeps
per node (scheduler/planner/dra_reach.py) are reused from it only on nodes the released
devices do not touch; on those the view has no stamp, so nothing is kept for them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from cache.dra.claims import Allocation, Claim
from cache.dra.classes import DeviceClass
from cache.dra.pools import Pool
from cache.dra.slices import DeviceId, PoolId
from cache.dra.store import DraCache, NodeDevices
from cache.dra.usage import Counters, DeviceUse


class DeviceView(Protocol):
    """What the planner reads of the devices: a DraCache, or a what-if over one."""

    @property
    def claims(self) -> Mapping[str, Claim]: ...

    @property
    def classes(self) -> Mapping[str, DeviceClass]: ...

    @property
    def reach_source(self) -> DraCache: ...

    @property
    def virtual(self) -> dict[str, Claim]: ...

    def claim(self, key: str) -> Claim | None: ...

    def is_assumed(self, key: str) -> bool: ...

    def extended_claim_of(self, pod_uid: str) -> Claim | None: ...

    def allocation_of(self, key: str) -> Allocation | None: ...

    def holder(self, device: DeviceId) -> str: ...

    def use(self, device: DeviceId) -> DeviceUse: ...

    def pool(self, pool_id: PoolId) -> Pool | None: ...

    def counters_drawn(self, pool_id: PoolId) -> tuple[Counters, frozenset[str]]: ...

    def node_devices(self, node: str, labels: Mapping[str, str]) -> NodeDevices: ...

    def extended_resources(self) -> dict[str, str]: ...

    def may_reach_devices(self, node: str) -> bool: ...

    def reach_trackable(self) -> bool: ...

    def node_stamp(self, node: str) -> tuple[int, int] | None: ...


def released_by(claim: Claim | None, gone: frozenset[str]) -> bool:
    """Whether `claim` is deallocated (or deleted) once the pods `gone` (uids) are
    (module docstring)."""
    if claim is None or claim.allocation is None:
        return False
    for consumer in claim.reserved_for:
        if consumer.resource != "pods" or consumer.api_group or consumer.uid not in gone:
            return False  # a consumer stays: the controller keeps the allocation
    if claim.owner_uid and claim.owner_uid in gone:
        return True  # made from a template for a pod gone: deleted with it
    return bool(claim.reserved_for) and claim.protected


def released_claims(dra: DraCache, gone: frozenset[str]) -> frozenset[str]:
    """The claims (keys) released once the pods `gone` are."""
    return frozenset(
        key for key in dra.claims_of_pods(gone) if released_by(dra.claims.get(key), gone)
    )


def without_pods(dra: DraCache, gone: frozenset[str]) -> DeviceView:
    """The devices as they would be once the pods `gone` are: `dra` itself when that
    releases no claim."""
    released = released_claims(dra, gone) if gone else frozenset()
    return ReleasedView(dra, released) if released else dra


class _Claims(Mapping[str, Claim]):
    """The base's claims, the released ones unallocated and reserved for nobody."""

    __slots__ = ("_base", "_released")

    def __init__(self, base: Mapping[str, Claim], released: Mapping[str, Claim]) -> None:
        self._base = base
        self._released = released

    def __getitem__(self, key: str) -> Claim:
        found = self._released.get(key)
        return found if found is not None else self._base[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)

    def __contains__(self, key: object) -> bool:
        return key in self._base


class ReleasedView:
    """A DraCache as it would be with the claims `released` deallocated."""

    __slots__ = ("_base", "_drawn", "_freed", "_freed_pools", "_touched", "claims", "released")

    def __init__(self, base: DraCache, released: Iterable[str]) -> None:
        self._base = base
        self.released = frozenset(released)
        records = {
            key: dataclasses.replace(claim, allocation=None, reserved_for=())
            for key in self.released
            if (claim := base.claims.get(key)) is not None
        }
        self.claims: Mapping[str, Claim] = _Claims(base.claims, records)
        freed: set[DeviceId] = set()
        for key in self.released:
            claim = base.claims.get(key)
            if claim is not None and claim.allocation is not None:
                freed.update(claim.allocation.charged())
        self._freed = frozenset(freed)
        self._freed_pools = frozenset(PoolId(d.driver, d.pool) for d in freed)
        # Counters drawn in the pools of freed devices, as of the base's generation.
        self._drawn: dict[PoolId, tuple[int, tuple[Counters, frozenset[str]]]] = {}
        # Nodes whose devices this view frees: answers for them are this view's only.
        self._touched = base.nodes_of_devices(self._freed)

    @property
    def freed(self) -> frozenset[DeviceId]:
        """The devices the released claims take (free here unless something else takes
        them too)."""
        return self._freed

    @property
    def classes(self) -> Mapping[str, DeviceClass]:
        return self._base.classes

    @property
    def reach_source(self) -> DraCache:
        return self._base

    @property
    def virtual(self) -> dict[str, Claim]:
        """The claims the planner made up (extended resources): the base's."""
        return self._base.virtual

    def claim(self, key: str) -> Claim | None:
        found = self.claims.get(key)
        return found if found is not None else self._base.claim(key)

    def is_assumed(self, key: str) -> bool:
        return self._base.is_assumed(key)

    def extended_claim_of(self, pod_uid: str) -> Claim | None:
        return self._base.extended_claim_of(pod_uid)

    def allocation_of(self, key: str) -> Allocation | None:
        if key in self.released:
            return None
        return self._base.allocation_of(key)

    def holder(self, device: DeviceId) -> str:
        if device in self._freed:
            return self._base.holder(device, self.released)
        return self._base.holder(device)

    def use(self, device: DeviceId) -> DeviceUse:
        """What stays taken of `device`: the released claims' shares give their
        consumed capacity back."""
        if device in self._freed:
            return self._base.use(device, self.released)
        return self._base.use(device)

    def pool(self, pool_id: PoolId) -> Pool | None:
        return self._base.pool(pool_id)

    def counters_drawn(self, pool_id: PoolId) -> tuple[Counters, frozenset[str]]:
        """What the pool's devices still in use draw: a partition only the released
        claims used draws nothing here."""
        if pool_id not in self._freed_pools:
            return self._base.counters_drawn(pool_id)
        generation = self._base.generation
        remembered = self._drawn.get(pool_id)
        if remembered is not None and remembered[0] == generation:
            return remembered[1]
        found = self._base.counters_drawn(pool_id, self.released)
        self._drawn[pool_id] = (generation, found)
        return found

    def node_devices(self, node: str, labels: Mapping[str, str]) -> NodeDevices:
        return self._base.node_devices(node, labels)

    def extended_resources(self) -> dict[str, str]:
        return self._base.extended_resources()

    def may_reach_devices(self, node: str) -> bool:
        return self._base.may_reach_devices(node)

    def reach_trackable(self) -> bool:
        return self._base.reach_trackable()

    def node_stamp(self, node: str) -> tuple[int, int] | None:
        """The base's stamp where this view changes nothing; None (keep no answer)
        where it frees devices."""
        if node in self._touched:
            return None
        return self._base.node_stamp(node)
