"""`DraCache`: ResourceSlices, DeviceClasses and ResourceClaims fed by watch events, the
pools they make, the devices each node reaches, and which devices are taken.

Taken means: charged by a claim's `status.allocation`, whoever allocated it
(kube-scheduler, another scheduler, this one), except results with admin access (as
kube-scheduler counts them): whole (a result without shareID) or a share (with one, its
consumedCapacity counted against the device: `use`); and the counters the pool's devices
in use draw from its counter sets (`counters_drawn`). Or held by a claim this scheduler
is allocating, reserved as cache/cluster.py reserves pods: `assume` a whole set of
allocations or none, `mark_written` when the API accepted the status write,
`mark_unknown` when the write ended unseen, `confirm` to record the allocation without
waiting for its event, and `forget` when the write definitely failed. Nothing expires on
a clock: a hold ends when the claim's event shows an allocation (the API's word replaces
it), when the claim is deleted, or through `forget` (never after the API accepted the
write). Or kept for a gang (`keep`: a preemptor, or a starvation reservation) until it
is planned again: a kept device is taken whole for every other plan (no share of it is
given, and it draws its counters), even where the gang planned only a share of it.

Events older than the stored object (both resourceVersions decimal) are dropped; a
relist replaces a kind wholesale, so the store equals one built fresh from the list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from cache.cluster import AssumeError, is_older
from cache.dra.claims import Allocation, Claim, claim_from_api
from cache.dra.classes import DeviceClass, class_from_api
from cache.dra.gpu_shares import SharedGpus, shared_gpus
from cache.dra.nodes import binding_reaches
from cache.dra.pools import Pool, assemble
from cache.dra.quota import claim_usage
from cache.dra.slices import NODE_NAME, PER_DEVICE, Device, DeviceId, PoolId, Slice, slice_from_api
from cache.dra.usage import Counters, DeviceUse, capacity_overrun, device_use, draw, overdrawn
from cache.extended_requests import DEVICE_CLASS_PREFIX, is_extended_resource_name
from cache.quota import QuotaLedger

DELETED = "DELETED"
# Nodes whose reachable devices are remembered between slice changes: one entry per
# node of the cluster; beyond this (node names churning) the memory starts over.
MAX_REMEMBERED_NODES = 20_000
# Metrics label for devices of drivers that publish no slice (not a DNS name, so no driver
# can be called so).
OTHER_DRIVERS = "_other"
# How `holder` names a device kept for a gang (`keep`), before the gang's key: never
# the start of a claim's "ns/name" (a namespace has no space).
KEPT_FOR = "gang "


def quota_key(claim_key: str) -> str:
    """The claim's entry in the quota ledger (beside pods' uids, which hold no "/")."""
    return f"claim:{claim_key}"


class Hold(StrEnum):
    """Where the status write of an assumed allocation stands."""

    WRITING = "writing"  # the write may be in flight
    WRITTEN = "written"  # the API accepted it; the event is not in yet
    UNKNOWN = "unknown"  # the writer ended without learning whether it landed


@dataclass(slots=True)
class _Assumed:
    claim_uid: str
    allocation: Allocation
    state: Hold = Hold.WRITING


@dataclass(frozen=True, slots=True)
class Candidate:
    """A device a node reaches, in a usable pool."""

    device_id: DeviceId
    device: Device
    slice: Slice


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """What one node reaches, in the allocator's order: pools by (driver, pool), slices
    by name, devices as listed. `unusable`: why each reached pool that cannot be
    allocated from (incomplete or invalid) cannot."""

    node: str
    candidates: tuple[Candidate, ...] = ()
    unusable: tuple[str, ...] = ()


class DraCache:
    def __init__(self, quota_ledger: QuotaLedger | None = None) -> None:
        # Where each allocated claim's devices are charged to its namespace's quota
        # (docs/quotas.md, "DRA devices"); None: not charged anywhere.
        self.quota_ledger = quota_ledger
        self.slices: dict[str, Slice] = {}
        self.classes: dict[str, DeviceClass] = {}
        self.claims: dict[str, Claim] = {}
        self.generation = 0
        # Slices change the devices nodes reach; claims and classes do not.
        self.slice_generation = 0
        self._by_pool: dict[PoolId, dict[str, Slice]] = {}
        self._pools: dict[PoolId, Pool] = {}
        self._local: dict[str, set[PoolId]] = {}  # node -> pools with a slice named for it
        self._local_of: dict[str, str] = {}  # slice -> the node it names
        self._shared: dict[PoolId, int] = {}  # pools with slices reaching many nodes
        self._allocated: dict[DeviceId, set[str]] = {}  # device -> claims whose status holds it
        self._assumed: dict[str, _Assumed] = {}
        self._held: dict[DeviceId, set[str]] = {}  # device -> assumed claims (shares: many)
        # Per pool with counter sets: the counters its devices in use draw, and which
        # devices those are (kept until the pool or what is taken of it changes).
        self._drawn: dict[PoolId, tuple[Counters, frozenset[str]]] = {}
        # Devices kept for a gang that evicted their claims' consumers (preemption) until
        # it is planned again: owner -> devices, and device -> owners. A kept device is
        # taken whole for everyone else (no share of it, and it draws its counters).
        self._kept: dict[str, frozenset[DeviceId]] = {}
        self._kept_for: dict[DeviceId, set[str]] = {}
        # pod uid -> claims reserved for it or controlled by it (what-ifs ask which
        # claims the pods taken away would release: cache/dra/view.py).
        self._by_pod: dict[str, set[str]] = {}
        self._nodes: dict[str, tuple[int, tuple[tuple[str, str], ...], NodeDevices]] = {}
        # Change tracking for answers kept per node (the planner's DRA reach): the
        # stamp of each node's last change to the devices it reaches or which of them
        # are taken, and an epoch for changes that may touch any node (classes, slices
        # reaching nodes by selector, allNodes or per device). Stamps come from one
        # clock, so a stamp never repeats.
        self.reach_epoch = 0
        self._change_clock = 0
        self._node_changed: dict[str, int] = {}
        self._extended: tuple[int, dict[str, str]] | None = None
        # Claims the planner made up for pods' DRA-backed extended resources, before
        # they exist (scheduler/planner/extended_claims.py): key -> record. Those held
        # by a plan are kept apart until the claim created for them shows its
        # allocation (linked by the pod's uid, the created claim's owner).
        self.virtual: dict[str, Claim] = {}
        self._virtual_held: dict[str, Claim] = {}
        self._held_for_pod: dict[str, str] = {}  # pod uid -> virtual key held
        self._extended_of_pod: dict[str, str] = {}  # pod uid -> its annotated claim's key

    # --- events -----------------------------------------------------------------------
    def apply_slice(self, event: str, obj: Mapping[str, Any]) -> Slice | None:
        record = slice_from_api(obj)
        old = self.slices.get(record.name)
        if old is not None and is_older(old.resource_version, record.resource_version):
            return old
        if event == DELETED:
            if old is not None:
                self._put_slice(record.name, None)
            return None
        if old != record:
            self._put_slice(record.name, record)
        return self.slices[record.name]

    def apply_class(self, event: str, obj: Mapping[str, Any]) -> DeviceClass | None:
        record = class_from_api(obj)
        old = self.classes.get(record.name)
        if old is not None and is_older(old.resource_version, record.resource_version):
            return old
        if event == DELETED:
            if self.classes.pop(record.name, None) is not None:
                self.generation += 1
                self.reach_epoch += 1
            return None
        if old != record:
            self.classes[record.name] = record
            self.generation += 1
            self.reach_epoch += 1
        return self.classes[record.name]

    def apply_claim(self, event: str, obj: Mapping[str, Any]) -> Claim | None:
        record = claim_from_api(obj)
        old = self.claims.get(record.key)
        if old is not None and is_older(old.resource_version, record.resource_version):
            return old
        if event == DELETED:
            if old is not None:
                self._put_claim(record.key, None)
            self._drop_hold(record.key)
            return None
        self._settle_hold(record)
        if old != record:
            self._put_claim(record.key, record)
        return self.claims[record.key]

    def relist(self, kind: str, objs: Iterable[Mapping[str, Any]]) -> None:
        """Replace every object of `kind` ("slices", "classes", "claims") by a fresh
        list: afterwards the store is what one built from the list would be (holds of
        claims still present and unallocated are kept)."""
        if kind == "slices":
            fresh_slices = {s.name: s for s in map(slice_from_api, objs)}
            for name in [n for n in self.slices if n not in fresh_slices]:
                self._put_slice(name, None)
            for name, piece in fresh_slices.items():
                if self.slices.get(name) != piece:
                    self._put_slice(name, piece)
        elif kind == "classes":
            fresh_classes = {c.name: c for c in map(class_from_api, objs)}
            if fresh_classes != self.classes:
                self.classes = fresh_classes
                self.generation += 1
                self.reach_epoch += 1
        elif kind == "claims":
            fresh_claims = {c.key: c for c in map(claim_from_api, objs)}
            for key in [k for k in self.claims if k not in fresh_claims]:
                self._put_claim(key, None)
                self._drop_hold(key)
            for key, claim in fresh_claims.items():
                self._settle_hold(claim)
                if self.claims.get(key) != claim:
                    self._put_claim(key, claim)
        else:
            raise ValueError(f"unknown kind {kind!r}")

    # --- slices and pools --------------------------------------------------------------
    def _put_slice(self, name: str, record: Slice | None) -> None:
        old = self.slices.get(name)
        if old is not None:
            self._touch_pool(old.pool_id)  # the nodes it named, before it goes
        self.slices.pop(name, None)
        if old is not None:
            members = self._by_pool.get(old.pool_id, {})
            members.pop(name, None)
            if not members:
                self._by_pool.pop(old.pool_id, None)
            self._pools.pop(old.pool_id, None)
            node = self._local_of.pop(name, None)
            if node is not None:
                self._unlink_local(node, old.pool_id)
            elif old.binding.kind:
                self._shared[old.pool_id] -= 1
                if not self._shared[old.pool_id]:
                    del self._shared[old.pool_id]
        if record is not None:
            self.slices[name] = record
            self._by_pool.setdefault(record.pool_id, {})[name] = record
            self._pools.pop(record.pool_id, None)
            if record.binding.kind == NODE_NAME:
                self._local_of[name] = record.binding.node_name
                self._local.setdefault(record.binding.node_name, set()).add(record.pool_id)
            elif record.binding.kind:
                self._shared[record.pool_id] = self._shared.get(record.pool_id, 0) + 1
            self._touch_pool(record.pool_id)
        if old is not None:
            self._touch_pool(old.pool_id)
        for piece in (old, record):
            if piece is not None and piece.binding.kind not in ("", NODE_NAME):
                self.reach_epoch += 1
        self.generation += 1
        self.slice_generation += 1

    def _touch_pool(self, pool_id: PoolId) -> None:
        """Stamp every node a slice of the pool names; a pool with slices reaching
        nodes otherwise changes the epoch."""
        self._drawn.pop(pool_id, None)
        if pool_id in self._shared:
            self.reach_epoch += 1
        members = self._by_pool.get(pool_id)
        if not members:
            return
        for slice_name in members:
            node = self._local_of.get(slice_name)
            if node is not None:
                self._touch_node(node)

    def _touch_node(self, node: str) -> None:
        if node not in self._node_changed and len(self._node_changed) >= MAX_REMEMBERED_NODES:
            self._node_changed.clear()  # node names churning: every kept answer goes
            self.reach_epoch += 1
        self._change_clock += 1
        # Re-inserted, so that the dict is in stamp order (nodes_changed_since).
        self._node_changed.pop(node, None)
        self._node_changed[node] = self._change_clock

    def _touch_devices(self, devices: Iterable[DeviceId]) -> None:
        """Devices became taken or free: stamp the nodes of their pools."""
        for pool_id in {(device.driver, device.pool) for device in devices}:
            self._touch_pool(PoolId(*pool_id))

    def node_stamp(self, node: str) -> tuple[int, int]:
        """Changes whenever what `node` reaches, or which of it is taken, may have
        changed (with the node's labels as the caller saw them: not tracked here)."""
        return self.reach_epoch, self._node_changed.get(node, 0)

    @property
    def change_clock(self) -> int:
        """The stamp of the latest per-node change (nodes_changed_since)."""
        return self._change_clock

    def nodes_changed_since(self, clock: int) -> list[str]:
        """The nodes whose devices, or what is taken of them, changed after `clock`
        (a `change_clock` read earlier), latest first. Changes that may touch any node
        move `reach_epoch` instead, which the caller checks too."""
        changed: list[str] = []
        for node, stamp in reversed(self._node_changed.items()):
            if stamp <= clock:
                break
            changed.append(node)
        return changed

    def shared_gpus(self, node: str, labels: Mapping[str, str]) -> SharedGpus:
        """The shared GPUs `node` reaches with what is free of each
        (cache/dra/gpu_shares.py): the GPU view the packing scores read."""
        candidates = self.node_devices(node, labels).candidates
        uses = {
            c.device_id: self.use(c.device_id)
            for c in candidates
            if c.device_id in self._allocated or c.device_id in self._held
        }
        return shared_gpus(((c.device_id, c.device) for c in candidates), uses)

    def reach_trackable(self) -> bool:
        """Whether node_stamp covers every change: no slice reaches nodes by selector,
        allNodes or per device (their devices' holders are not tracked per node)."""
        return not self._shared

    def _unlink_local(self, node: str, pool_id: PoolId) -> None:
        members = self._by_pool.get(pool_id, {})
        still = any(self._local_of.get(name) == node for name in members)
        if not still:
            pools = self._local.get(node)
            if pools is not None:
                pools.discard(pool_id)
                if not pools:
                    del self._local[node]

    def pool(self, pool_id: PoolId) -> Pool | None:
        cached = self._pools.get(pool_id)
        if cached is None:
            members = self._by_pool.get(pool_id)
            if not members:
                return None
            cached = assemble(pool_id, members.values())
            if cached is None:
                return None
            self._pools[pool_id] = cached
        return cached

    def pools(self) -> list[Pool]:
        found = (self.pool(pool_id) for pool_id in sorted(self._by_pool))
        return [p for p in found if p is not None]

    def may_reach_devices(self, node: str) -> bool:
        """False only when `node` certainly reaches no device: no slice names it and
        no slice reaches nodes by selector, allNodes or per device."""
        return bool(self._shared) or node in self._local

    def extended_resources(self) -> dict[str, str]:
        """Extended resource name -> the DeviceClass that provides it through DRA, as
        kube-scheduler 1.36's extended resource cache maps them: every class stands
        for `deviceclass.resource.kubernetes.io/<its name>`, and for its
        `spec.extendedResourceName` when that is an extended resource name (the API
        server refuses any other; a native name such as `cpu` or
        `x.kubernetes.io/y` is never taken over here either). Two classes naming one
        resource: the newer (creationTimestamp) wins, the lower name on a tie. A class
        that cannot be read stands for nothing. Remembered until a class changes."""
        kept = self._extended
        if kept is not None and kept[0] == self.generation:
            return kept[1]
        found: dict[str, DeviceClass] = {}
        for name, device_class in self.classes.items():
            if device_class.problems:
                continue
            found[DEVICE_CLASS_PREFIX + name] = device_class
        for device_class in self.classes.values():
            wanted = device_class.extended_resource_name
            if device_class.problems or not wanted or not is_extended_resource_name(wanted):
                continue
            other = found.get(wanted)
            if other is None or (-device_class.created, device_class.name) < (
                -other.created,
                other.name,
            ):
                found[wanted] = device_class
        mapping = {resource: c.name for resource, c in found.items()}
        self._extended = (self.generation, mapping)
        return mapping

    def node_devices(self, node: str, labels: Mapping[str, str]) -> NodeDevices:
        """The devices `node` (with `labels`) reaches, remembered until a slice changes."""
        fingerprint = tuple(sorted(labels.items()))
        kept = self._nodes.get(node)
        if kept is not None and kept[0] == self.slice_generation and kept[1] == fingerprint:
            return kept[2]
        found = self._reach(node, labels)
        if len(self._nodes) >= MAX_REMEMBERED_NODES:
            self._nodes.clear()
        self._nodes[node] = (self.slice_generation, fingerprint, found)
        return found

    def _reach(self, node: str, labels: Mapping[str, str]) -> NodeDevices:
        candidates: list[Candidate] = []
        unusable: list[str] = []
        pool_ids = set(self._local.get(node, ())) | set(self._shared)
        for pool_id in sorted(pool_ids):
            pool = self.pool(pool_id)
            if pool is None:
                continue
            reached: list[Candidate] = []
            relevant = False
            for piece in pool.slices:
                per_device = piece.binding.kind == PER_DEVICE
                if not per_device and not binding_reaches(piece.binding, node, labels):
                    continue
                relevant = relevant or not per_device
                for device in piece.devices:
                    if per_device and (
                        device.binding is None or not binding_reaches(device.binding, node, labels)
                    ):
                        continue
                    reached.append(Candidate(DeviceId(*pool_id, device.name), device, piece))
            if not (relevant or reached):
                continue
            if not pool.usable:
                unusable.append(pool.why_unusable())
                continue
            candidates.extend(reached)
        return NodeDevices(node, tuple(candidates), tuple(unusable))

    # --- claims and what they take -----------------------------------------------------
    def claim(self, key: str) -> Claim | None:
        """The claim of `key`: a watched one, else one the planner made up (virtual)."""
        found = self.claims.get(key)
        if found is not None:
            return found
        return self._virtual_held.get(key) or self.virtual.get(key)

    def extended_claims(self) -> list[Claim]:
        """Every annotated extended-resource claim controlled by a pod."""
        return [self.claims[key] for key in self._extended_of_pod.values() if key in self.claims]

    def extended_claim_of(self, pod_uid: str) -> Claim | None:
        """The annotated extended-resource claim the pod controls, when one exists."""
        key = self._extended_of_pod.get(pod_uid)
        return None if key is None else self.claims.get(key)

    def _put_claim(self, key: str, record: Claim | None) -> None:
        old = self.claims.pop(key, None)
        if old is not None:
            self._index_pods(key, old, add=False)
        if record is not None:
            self._index_pods(key, record, add=True)
        if old is not None and old.extended and self._extended_of_pod.get(old.owner_uid) == key:
            del self._extended_of_pod[old.owner_uid]
        if old is not None and old.allocation is not None:
            self._touch_devices(old.allocation.charged())
            for device in old.allocation.charged():
                holders = self._allocated.get(device)
                if holders is not None:
                    holders.discard(key)
                    if not holders:
                        del self._allocated[device]
        if record is not None:
            self.claims[key] = record
            if record.extended and record.owner_uid:
                self._extended_of_pod[record.owner_uid] = key
            if record.allocation is not None:
                self._touch_devices(record.allocation.charged())
                for device in record.allocation.charged():
                    self._allocated.setdefault(device, set()).add(key)
        self.generation += 1
        self._charge(key)

    def _charge(self, key: str) -> None:
        """Charge the claim's allocation (its status's, else the one held) to its
        namespace's quota, once however many pods share it; discharge it when it has
        none. Kept per claim, so a charge is replaced or removed exactly."""
        ledger = self.quota_ledger
        if ledger is None:
            return
        claim = self.claims.get(key)
        allocation = self.allocation_of(key)
        if claim is None or allocation is None:
            ledger.discharge(quota_key(key))
            return
        ledger.charge(quota_key(key), claim.namespace, claim_usage(claim, allocation))

    def _index_pods(self, key: str, claim: Claim, add: bool) -> None:
        pods = {c.uid for c in claim.reserved_for if c.resource == "pods" and not c.api_group}
        if claim.owner_uid:
            pods.add(claim.owner_uid)
        for uid in pods:
            if add:
                self._by_pod.setdefault(uid, set()).add(key)
                continue
            keys = self._by_pod.get(uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_pod[uid]

    def claims_of_pods(self, uids: Iterable[str]) -> set[str]:
        """The claims reserved for any of the pods `uids`, or controlled by one."""
        found: set[str] = set()
        for uid in uids:
            found |= self._by_pod.get(uid, set())
        return found

    def holder(self, device: DeviceId, released: frozenset[str] = frozenset()) -> str:
        """A claim ("ns/name") that takes `device`, whole or a share of it; "" when it
        is free; a device kept for a gang (`keep`) is taken by "gang <key>".
        `released`: claims whose allocations count as gone (a what-if:
        cache/dra/view.py)."""
        holders = self._allocated.get(device)
        if holders and released:
            holders = holders - released
        if holders:
            return min(holders)
        held = self._held.get(device)
        if held:
            return min(held)
        kept = self._kept_for.get(device)
        return f"{KEPT_FOR}{min(kept)}" if kept else ""

    def _taker(self, device: DeviceId) -> str:
        """Who takes `device`, as AssumeError names it ("claim ns/name" or "gang <key>"):
        a claim taking it whole, else the gang it is kept for, else a claim sharing it."""
        keys = self._allocated.get(device, set()) | self._held.get(device, set())
        for key in sorted(keys):
            allocation = self.allocation_of(key)
            if allocation is not None and device in allocation.whole():
                return f"claim {key}"
        kept = self._kept_for.get(device)
        if kept:
            return f"{KEPT_FOR}{min(kept)}"
        return f"claim {min(keys)}" if keys else ""

    def use(self, device: DeviceId, released: frozenset[str] = frozenset()) -> DeviceUse:
        """What allocations, holds and keeps take of `device`: whole, or the sum of
        shares (a kept device is taken whole). `released`: claims whose allocations
        count as gone (a what-if)."""
        keys = self._allocated.get(device, set()) | self._held.get(device, set())
        if released:
            keys = keys - released
        use = device_use(self._allocations(keys), device)
        if device in self._kept_for:
            use.whole = True
        return use

    def _allocations(self, keys: Iterable[str]) -> list[Allocation]:
        found = (self.allocation_of(key) for key in sorted(keys))
        return [allocation for allocation in found if allocation is not None]

    def device(self, device_id: DeviceId) -> Device | None:
        """The record of a device of a usable pool (None when it is not published)."""
        pool = self.pool(PoolId(device_id.driver, device_id.pool))
        if pool is None or not pool.usable:
            return None
        return pool.device(device_id.device)

    def _in_use(self, device: DeviceId, released: frozenset[str]) -> bool:
        if device in self._held or device in self._kept_for:
            return True  # holds are this scheduler's own: a what-if never releases them
        holders = self._allocated.get(device)
        if not holders:
            return False
        return not released or not holders <= released

    def counters_drawn(
        self, pool_id: PoolId, released: frozenset[str] = frozenset()
    ) -> tuple[Counters, frozenset[str]]:
        """What the pool's devices in use (allocated, held or kept, whole or shared) draw
        from its counter sets, and the names of those devices. `released`: claims whose
        allocations count as gone (a what-if; such an answer is not remembered)."""
        if not released:
            remembered = self._drawn.get(pool_id)
            if remembered is not None:
                return remembered
        drawn: Counters = {}
        names: set[str] = set()
        pool = self.pool(pool_id)
        if pool is not None and pool.counters:
            for piece in pool.slices:
                for device in piece.devices:
                    if not device.consumes_counters:
                        continue
                    device_id = DeviceId(pool_id.driver, pool_id.pool, device.name)
                    if self._in_use(device_id, released):
                        draw(drawn, device)
                        names.add(device.name)
        found = (drawn, frozenset(names))
        if not released:
            self._drawn[pool_id] = found
        return found

    def taken(self) -> frozenset[DeviceId]:
        """Every device an allocation, a hold or a gang's keep takes."""
        return frozenset(self._allocated) | frozenset(self._held) | frozenset(self._kept_for)

    # --- devices kept for a preemptor ----------------------------------------------------
    def keep(self, owner: str, devices: Iterable[DeviceId]) -> None:
        """Keep `devices` for `owner` (a gang that evicted their claims' consumers): no
        other plan is given them, allocated or not, until `release_kept(owner)`. Never
        refused: a device may be allocated still (its claim not yet deallocated) or
        kept for another owner too."""
        wanted = frozenset(devices)
        if self._kept.get(owner) == wanted:
            return
        self.release_kept(owner)
        if not wanted:
            return
        self._kept[owner] = wanted
        for device in wanted:
            self._kept_for.setdefault(device, set()).add(owner)
        self._touch_devices(wanted)
        self.generation += 1

    def release_kept(self, owner: str) -> None:
        kept = self._kept.pop(owner, None)
        if kept is None:
            return
        for device in kept:
            owners = self._kept_for.get(device)
            if owners is not None:
                owners.discard(owner)
                if not owners:
                    del self._kept_for[device]
        self._touch_devices(kept)
        self.generation += 1

    def kept(self, owner: str) -> frozenset[DeviceId]:
        return self._kept.get(owner, frozenset())

    # --- what-ifs (cache/dra/view.py) --------------------------------------------------
    @property
    def reach_source(self) -> DraCache:
        """The cache whose node stamps answers kept for this view are kept against."""
        return self

    def nodes_of_devices(self, devices: Iterable[DeviceId]) -> frozenset[str]:
        """The nodes a slice of the devices' pools names (those whose stamps change
        when the devices are taken or freed)."""
        nodes: set[str] = set()
        for pool_id in {(device.driver, device.pool) for device in devices}:
            for slice_name in self._by_pool.get(PoolId(*pool_id), {}):
                node = self._local_of.get(slice_name)
                if node is not None:
                    nodes.add(node)
        return frozenset(nodes)

    def taken_by_driver(self) -> dict[str, tuple[int, int, int]]:
        """Driver -> (devices a claim's status.allocation takes, devices only a claim
        this scheduler is allocating holds, devices only kept for a gang whose victims
        are leaving), for the metrics: each device in the first of those it is in.
        Drivers that publish no slice are summed under OTHER_DRIVERS: allocation
        results are read from claims, so their driver names are not bounded by what the
        cluster runs."""
        known = {s.driver for s in self.slices.values()}
        counts: dict[str, list[int]] = {}
        seen: set[DeviceId] = set()
        for state, devices in enumerate((self._allocated, self._held, self._kept_for)):
            for device in devices:
                if device in seen:
                    continue
                seen.add(device)
                driver = device.driver if device.driver in known else OTHER_DRIVERS
                counts.setdefault(driver, [0, 0, 0])[state] += 1
        return {driver: (row[0], row[1], row[2]) for driver, row in counts.items()}

    def allocation_of(self, key: str) -> Allocation | None:
        """The claim's allocation: its status's, else the one this scheduler holds."""
        claim = self.claims.get(key)
        if claim is not None and claim.allocation is not None:
            return claim.allocation
        held = self._assumed.get(key)
        return None if held is None else held.allocation

    # --- assume / confirm / forget -----------------------------------------------------
    def is_assumed(self, key: str) -> bool:
        return key in self._assumed

    def hold_state(self, key: str) -> Hold | None:
        held = self._assumed.get(key)
        return None if held is None else held.state

    def assume(self, allocations: Sequence[tuple[str, Allocation]]) -> None:
        """Hold every allocation ("ns/name", allocation) or none (AssumeError says why):
        each claim known, unallocated and not held, and no device taken or named twice."""
        wanted: dict[DeviceId, set[str]] = {}
        keys: set[str] = set()
        for key, allocation in allocations:
            claim = self.claim(key)
            if claim is None or claim.allocation is not None or key in self._assumed or key in keys:
                raise AssumeError(f"claim {key} is unknown, allocated or already held")
            keys.add(key)
            for device in allocation.charged():
                wanted.setdefault(device, set()).add(key)
        why = self._overcommit(allocations, wanted)
        if why:
            raise AssumeError(why)
        for key, allocation in allocations:
            record = self.claim(key)
            assert record is not None  # checked above
            self._assumed[key] = _Assumed(record.uid, allocation)
            if key not in self.claims:  # virtual: kept while held
                self._virtual_held[key] = record
                self.virtual.pop(key, None)
                if record.owner_uid:
                    self._held_for_pod[record.owner_uid] = key
            self._charge(key)
        for device, claims in wanted.items():
            self._held.setdefault(device, set()).update(claims)
        self._touch_devices(wanted)
        if allocations:
            self.generation += 1

    def _overcommit(
        self, allocations: Sequence[tuple[str, Allocation]], wanted: Mapping[DeviceId, set[str]]
    ) -> str:
        """Why holding `allocations` would over-commit a device or a counter set ("" when
        it would not): a device taken whole is used by nothing else; shares fit the
        device's capacity, with every other share; no counter set gives more than it
        holds. A device kept for a gang (`keep`) counts as taken whole: no claim is
        held on it, and it draws its counters."""
        adding = [allocation for _, allocation in allocations]
        for key, allocation in allocations:
            whole = allocation.whole()
            if len(set(whole)) != len(whole):
                return f"claim {key} names a device twice"
        touched_pools: set[PoolId] = set()
        for device_id, claims in wanted.items():
            before = self.use(device_id)
            new = device_use(adding, device_id)
            key = min(claims)
            if new.whole and (before.in_use or len(claims) > 1 or new.shares):
                other = self._taker(device_id) or f"claim {max(claims)}"
                return f"device {device_id} of claim {key} is taken by {other}"
            device = self.device(device_id)
            if new.shares:
                if before.whole:
                    other = self._taker(device_id)
                    return f"device {device_id} of claim {key} is taken by {other}"
                if device is None or not device.allow_multiple_allocations:
                    return f"device {device_id} of claim {key} cannot be shared"
                overrun = capacity_overrun(device, before.consumed, new.consumed)
                if overrun:
                    return f"claim {key}: {overrun}"
            if device is not None and device.consumes_counters and not before.in_use:
                touched_pools.add(PoolId(device_id.driver, device_id.pool))
        for pool_id in sorted(touched_pools):
            pool = self.pool(pool_id)
            if pool is None:
                continue
            drawn, counted = self.counters_drawn(pool_id)
            total: Counters = {name: dict(c) for name, c in drawn.items()}
            for device_id in wanted:
                if PoolId(device_id.driver, device_id.pool) != pool_id:
                    continue
                device = pool.device(device_id.device)
                if device is not None and device.name not in counted:
                    draw(total, device)
            why = overdrawn(pool.counters, total)
            if why:
                return f"pool {pool_id}: {why}"
        return ""

    def mark_written(self, key: str) -> None:
        held = self._assumed.get(key)
        if held is not None:
            held.state = Hold.WRITTEN

    def mark_unknown(self, key: str) -> None:
        held = self._assumed.get(key)
        if held is not None and held.state == Hold.WRITING:
            held.state = Hold.UNKNOWN

    def confirm(self, key: str) -> None:
        """The write succeeded: record the allocation on the claim now (the simulator's
        way; the claim's event then changes nothing)."""
        held = self._assumed.get(key)
        claim = self.claim(key)
        if held is None or claim is None:
            return
        self._drop_hold(key)
        # A virtual claim (no API in the simulator) becomes the claim itself.
        self._put_claim(key, replace(claim, allocation=held.allocation))

    def forget(self, key: str) -> None:
        """The write definitely failed: release the hold. A write the API accepted is
        never forgotten."""
        held = self._assumed.get(key)
        if held is None or held.state == Hold.WRITTEN:
            return
        self._drop_hold(key)

    def taken_back(self, key: str) -> None:
        """This scheduler removed the allocation it had written (its gang broke): the
        hold ends whatever its state. An event that still shows the allocation charges
        its devices again until the event of its removal."""
        self._drop_hold(key)

    def _drop_hold(self, key: str) -> None:
        held = self._assumed.pop(key, None)
        if held is None:
            return
        virtual = self._virtual_held.pop(key, None)
        if virtual is not None and self._held_for_pod.get(virtual.owner_uid) == key:
            del self._held_for_pod[virtual.owner_uid]
        for device in held.allocation.charged():
            claims = self._held.get(device)
            if claims is not None:
                claims.discard(key)
                if not claims:
                    del self._held[device]
        self._touch_devices(held.allocation.charged())
        self.generation += 1
        self._charge(key)

    def _settle_hold(self, claim: Claim) -> None:
        """A claim's event ends its hold when it shows an allocation (the API's word) or
        is another object of the same name (the one held was deleted)."""
        if claim.extended and claim.allocation is not None:
            # The claim created for a pod's extended resources now shows its
            # allocation: the hold of the virtual claim it was planned as ends.
            virtual = self._held_for_pod.get(claim.owner_uid)
            if virtual is not None:
                self._drop_hold(virtual)
        held = self._assumed.get(claim.key)
        if held is None:
            return
        if claim.allocation is not None or (claim.uid and claim.uid != held.claim_uid):
            self._drop_hold(claim.key)
