"""ClusterCache: the scheduler's model of the cluster, fed by watch events.

Rules it keeps (docs/architecture.md explains them):
- Every object carries its `metadata.resourceVersion`. Order normally comes from the
  stream; where two versions are both decimal integers (as every API server backed by
  etcd writes them) an event older than what is stored is dropped, so a relist racing
  a watch, or a late event after `assume`, never rolls state back.
- Every pod bound to a node and not terminal takes resources there, whoever scheduled
  it. GPU devices are charged as this scheduler decided them: the plan it assumed or
  confirmed, else the pod's `gang-scheduler.io/gpu-devices` annotation when it carries
  the scheduler's signature (`assignment_key`) and matches the pod's request; otherwise
  (a value a tenant wrote, a pod bound by another scheduler) they are inferred
  (cache.node.inferred_shares), exactly as if no value were written. One exception: an
  assignment that carries a signature none of the keys verifies may be a real bind
  signed with a key this process lacks (a lost or rotated-out key), which the device
  plugin served as written, so it is charged at its worst: its share on every GPU of
  its node (never inferred onto a GPU that looks free). Inferred charges
  are recomputed for the whole node in a canonical order whenever its pods change, so
  the accounting depends only on which pods are there, never on the order events
  arrived in. Reservations (assumed, bind not yet seen) are charged after the inferred
  guesses they were planned against, so assuming a plan never moves a guess onto the
  devices the plan took.
- `assume` reserves a plan before its binds; the bound pod's event (watch or relist)
  confirms it; `forget` undoes it when the bind definitely failed; the pod's deletion
  ends it. Nothing else does, and no clock: a reservation whose bind may still land, or
  did land (`mark_bound`) but whose event is late, keeps its room charged, so the room
  is never planned twice. An outcome the binder could not learn (`mark_unknown`) stays
  reserved until a re-read of the pod settles it (docs/kubernetes.md, "Reservations").
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cache.gang_index import GangIndex
from cache.gpu import DeviceShares, GpuDevice, GpuRequest
from cache.jsonobj import metadata, object_uid
from cache.node import NodeInfo, inferred_shares, node_from_api
from cache.ownership import BoundByUs
from cache.pod import DEFAULT_GANG_KEYS, GangKeys, PodInfo, pod_from_api
from cache.podgroup import PodGroupInfo, podgroup_from_api
from cache.ports import HostPort
from cache.quota import QuotaBook, usage_of
from cache.resources import MILLI_PER_GPU, SHARED_GPU, WHOLE_GPU
from cache.signing import SigningKeys
from cache.snapshot import Snapshot


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


class Reservation(StrEnum):
    """Where the bind of an assumed pod stands."""

    BINDING = "binding"  # its binding request may be in flight
    BOUND = "bound"  # the API accepted it (201); the event showing it bound is not in yet
    UNKNOWN = "unknown"  # the binder ended without learning whether it landed
    # Held for a preemptor while its victims terminate (scheduler/sharing/preemption.py): the
    # room is charged so nothing else takes it, but no bind is made or in flight.
    NOMINATED = "nominated"
    # Held for a gang that waited too long (scheduler/sharing/starvation.py): charged on the
    # nodes it would fit on soonest, often beyond what they have free now, so that no
    # other work takes the room it needs there. Not a bind, and not counted against
    # the gang's quota (it uses nothing yet).
    RESERVED = "reserved"


class AssumeError(ValueError):
    """A plan that cannot be reserved (unknown pod or node, pod already bound)."""


@dataclass(frozen=True, slots=True)
class Placement:
    """One member of a plan: this pod on this node, taking these GPU shares."""

    pod_uid: str
    node: str
    shares: DeviceShares = ()


@dataclass(slots=True)
class _Charge:
    node: str
    requests: Mapping[str, int]
    gpu: GpuRequest
    # The devices to charge as written (an assumed plan, or a trusted assignment; ()
    # for a pod without GPUs); None when they must be inferred.
    written: DeviceShares | None
    # The pod's creation time: inferred charges are made in (created, uid) order
    # (`_canonical_order`); kept as the float, not as a tuple per pod (memory).
    created: float
    shares: DeviceShares = ()  # what is charged on the node now
    ports: tuple[HostPort, ...] = ()  # host ports the pod holds on the node
    uid: str = ""
    # Its assignment carries a signature no key of this process verifies: charged on
    # every GPU of the node (_worst_case_shares) instead of inferred.
    unverified: bool = False


def _canonical_order(charge: _Charge) -> tuple[float, str]:
    """The order inferred charges are made in: oldest pod first, then by uid."""
    return (charge.created, charge.uid)


def _kubelet_shares(
    charge: _Charge, node: NodeInfo, stale: tuple[str, tuple[int, ...]] | None
) -> DeviceShares | None:
    """The GPUs the kubelet really gave the pod, as its node agent reports them
    (cache.kubelet_devices), when the report fits the pod: whole GPUs, as many as it
    asks for, all on the node. They replace what was assigned or inferred. `stale`: the
    entry this node's report held for the pod when this scheduler reserved it there
    (ClusterCache._reported_before_reserved); that same entry counts for nothing."""
    indices = node.kubelet_devices.get(charge.uid) if node.kubelet_devices else None
    if (
        not indices
        or stale == (node.name, indices)
        or charge.gpu.milli != MILLI_PER_GPU
        or len(indices) != charge.gpu.count
        or indices[-1] >= len(node.devices)
    ):
        return None
    return tuple((index, MILLI_PER_GPU) for index in indices)


def _worst_case_shares(charge: _Charge, node: NodeInfo) -> DeviceShares:
    """Every GPU of the node at the pod's share: whichever devices it really holds are
    charged, so nothing placed next can land on them. Over-charges the others until the
    pod ends; that costs room, never a GPU given twice."""
    if not charge.gpu.count:
        return ()
    return tuple((index, charge.gpu.milli) for index in range(len(node.devices)))


def _as_written(charge: _Charge, node: NodeInfo) -> bool:
    """The charge's devices are known and exist on this node."""
    written = charge.written
    if written is None:
        return False
    count = len(node.devices)
    return all(index < count for index, _ in written)


@dataclass(slots=True)
class _Assumed:
    placement: Placement
    since: float  # when it was assumed (for display; nothing expires on it)
    state: Reservation = Reservation.BINDING


def is_older(stored: str, incoming: str) -> bool:
    """True when `incoming` is known to be older than `stored` (both decimal integers);
    otherwise resourceVersions are opaque and the stream's order is trusted."""
    if not (stored.isascii() and stored.isdigit() and incoming.isascii() and incoming.isdigit()):
        return False
    # Compared as digit strings: int() refuses 4,300+ digits, and "²" passes isdigit().
    stored, incoming = stored.lstrip("0"), incoming.lstrip("0")
    return (len(incoming), incoming) < (len(stored), stored)


class ClusterCache:
    def __init__(
        self,
        share_milli: int = 1,
        gang_keys: GangKeys = DEFAULT_GANG_KEYS,
        assignment_key: SigningKeys | bytes | None = None,
    ) -> None:
        # Milli of a GPU one unit of nvidia.com/vgpu is worth (resources.shares_in_milli).
        self.share_milli = share_milli
        self.gang_keys = gang_keys
        # The keys that sign this scheduler's assignments (cache/signing.py: the newest
        # signs, any verifies); None: no signed value is trusted, only what this cache
        # decided itself.
        self.assignment_keys = SigningKeys.of(assignment_key)
        # pod uid -> (node, devices) this scheduler decided for a bound pod: the plan it
        # bound, or a signed assignment once verified. Kept until the pod goes, so that a
        # later change of the annotation (by a tenant, where the admission policy is not
        # installed) cannot move the charge.
        self._decided: dict[str, tuple[str, DeviceShares]] = {}
        # pod uid -> (node, entry) that node's kubelet report already held for the pod
        # when this scheduler reserved it there. The kubelet reports only pods bound to
        # its node, and this pod was not bound before its reservation: that entry is
        # forged or stale, never the kubelet's account of this bind, so it moves no
        # charge (_kubelet_shares); a different entry, written later, counts. Kept until
        # the pod goes.
        self._reported_before_reserved: dict[str, tuple[str, tuple[int, ...]]] = {}
        # The bound pods this scheduler bound itself: the only ones it may delete or
        # evict (cache/ownership.py; a pod a tenant pinned to a node is not one).
        self._bound_by_us = BoundByUs()
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._gangs = GangIndex()  # the same pods by gang key (cache/gang_index.py)
        self._podgroups: dict[str, PodGroupInfo] = {}
        # Namespace name -> its labels (pod affinity's namespaceSelector reads them).
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self._charges: dict[str, _Charge] = {}
        self._on_node: dict[str, dict[str, _Charge]] = {}
        # node name -> how many of the charges on it are not as written (_as_written)
        # against its current record: counted by _rebuild_node, kept by _apply_change,
        # so that adding a pod need not re-check every pod already on its node. Held
        # only for nodes present; a node without an entry is rebuilt.
        self._not_as_written: dict[str, int] = {}
        self._assumed: dict[str, _Assumed] = {}
        # node name -> the DRA shared GPUs shown as its devices, with their free milli
        # (show_shared_gpus), for nodes that advertise no GPU of their own.
        self._shared_gpus: dict[str, tuple[tuple[GpuDevice, ...], tuple[int, ...]]] = {}
        # ElasticQuotas and each namespace's usage, charged with every pod charge.
        self.quotas = QuotaBook(share_milli)
        self._generation = 0
        # node name -> generation of its last change, least recently changed first, so
        # that a snapshot update walks only the nodes changed since it last looked.
        self._node_changes: OrderedDict[str, int] = OrderedDict()
        self._node_removals: list[tuple[int, str]] = []
        # Snapshots brought up to date here: a removal is kept until each has seen it
        # (weakly held, so that a snapshot dropped by its reader holds nothing back).
        self._readers: weakref.WeakSet[Snapshot] = weakref.WeakSet()

    @property
    def assignment_key(self) -> bytes | None:
        """The key that signs (the newest of `assignment_keys`)."""
        return self.assignment_keys.newest if self.assignment_keys is not None else None

    @assignment_key.setter
    def assignment_key(self, key: SigningKeys | bytes | None) -> None:
        self.assignment_keys = SigningKeys.of(key)

    # --- reading ----------------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self._generation

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def nodes(self) -> Iterable[NodeInfo]:
        return self._nodes.values()

    def pod(self, uid: str) -> PodInfo | None:
        return self._pods.get(uid)

    def pods(self) -> Iterable[PodInfo]:
        return self._pods.values()

    def podgroups(self) -> Mapping[str, PodGroupInfo]:
        return self._podgroups

    def pods_by_gang(self) -> Mapping[str, Mapping[str, PodInfo]]:
        """Every pod, by gang key then uid (kept as pods change, not grouped per read)."""
        return self._gangs.gangs()

    def bound_by_us(self, pod: PodInfo) -> bool:
        """Whether this scheduler bound `pod` itself (cache/ownership.py): only such a pod
        may it delete or evict. A pod pinned to its node by whoever created it, or bound
        by another actor, is not, whatever its schedulerName."""
        return self._bound_by_us.is_ours(pod, self.assignment_keys)

    def is_assumed(self, uid: str) -> bool:
        return uid in self._assumed

    def assumed(self) -> Mapping[str, Placement]:
        return {uid: entry.placement for uid, entry in self._assumed.items()}

    def assumed_placement(self, uid: str) -> Placement | None:
        entry = self._assumed.get(uid)
        return entry.placement if entry is not None else None

    def reservation(self, uid: str) -> Reservation | None:
        """Where the bind of an assumed pod stands (None when it is not assumed)."""
        entry = self._assumed.get(uid)
        return entry.state if entry is not None else None

    def unresolved(self) -> list[Placement]:
        """Reservations whose bind ended without a known outcome: to be re-read."""
        return [
            entry.placement
            for entry in self._assumed.values()
            if entry.state == Reservation.UNKNOWN
        ]

    def pending_pods(self, scheduler_name: str) -> Iterator[PodInfo]:
        """Pods this scheduler must still place: ours, unbound, not being deleted, and
        not already reserved by an assumed plan."""
        for uid, pod in self._pods.items():
            if (
                not pod.node_name
                and pod.scheduler_name == scheduler_name
                and not pod.deleting
                and uid not in self._assumed
            ):
                yield pod

    def pods_on(self, node: str) -> Iterator[PodInfo]:
        """The pods charged to a node: bound there, or planned there (assumed)."""
        for uid in self._on_node.get(node, ()):
            pod = self._pods.get(uid)
            if pod is not None:
                yield pod

    def charged_shares(self, uid: str) -> DeviceShares | None:
        """The GPU shares the cache charges for a pod (None when it takes nothing)."""
        charge = self._charges.get(uid)
        return charge.shares if charge else None

    # --- nodes ------------------------------------------------------------------------
    def apply_node(self, event: EventType | str, obj: Mapping[str, Any]) -> NodeInfo | None:
        """Apply a node watch event; returns the stored record (None once deleted)."""
        name = str(metadata(obj).get("name") or "")
        if not name:
            return None  # nothing can be bound to a node without a name
        old = self._nodes.get(name)
        rv = str(metadata(obj).get("resourceVersion") or "")
        if old is not None and is_older(old.resource_version, rv):
            return old
        if event == EventType.DELETED:
            self._remove_node(name)
            return None
        new = node_from_api(obj, self.share_milli)
        if old is not None and _same_offer(old, new):
            old.resource_version = new.resource_version
            return old
        self._nodes[name] = new
        self._rebuild_node(name)
        return new

    def show_shared_gpus(
        self, name: str, devices: tuple[GpuDevice, ...], free: Sequence[int]
    ) -> None:
        """Show a node's DRA shared GPUs (cache/dra/gpu_shares.py) as its devices, with
        the free milli the DRA cache counts, so that every filter, chooser and score that
        reads a node's GPUs (GpuFit, the packing scores, the whole-node reserve) judges
        them as it judges device-plugin GPUs. Only on a node that advertises no
        `nvidia.com/gpu` or `nvidia.com/vgpu` (its own GPUs stay what it shows); the
        DRA cache stays the only account of what is taken (pods using them carry no
        device shares here). No devices: nothing shown."""
        shown = (devices, tuple(free))
        before = self._shared_gpus.get(name)
        if before == shown or (before is None and not devices):
            return
        if devices:
            self._shared_gpus[name] = shown
        else:
            del self._shared_gpus[name]
        node = self._nodes.get(name)
        if node is None or _advertises_gpus(node):
            return
        if not devices and before is not None and node.devices is before[0]:
            node.devices = ()  # what was shown goes; the node's own record had none
        self._rebuild_node(name)

    def note_claim_gpu(self, uid: str, gpu: GpuRequest) -> None:
        """The GPUs the pod's DRA claim holds (PodInfo.claim_gpu), as its plan had them."""
        pod = self._pods.get(uid)
        if pod is not None and pod.claim_gpu != gpu:
            pod.claim_gpu = gpu
            node = self._nodes.get(pod.node_name) if pod.node_name else None
            if node is not None:
                self._touch(node)  # the snapshot's pods of the node hold the old record

    def _remove_node(self, name: str) -> None:
        if self._nodes.pop(name, None) is None:
            return
        self._not_as_written.pop(name, None)
        self._generation += 1
        self._node_changes.pop(name, None)
        self._node_removals.append((self._generation, name))

    def _touch(self, node: NodeInfo) -> None:
        self._generation += 1
        node.generation = self._generation
        self._node_changes[node.name] = self._generation
        self._node_changes.move_to_end(node.name)

    def _rebuild_node(self, name: str) -> None:
        """Recompute a node's accounting from the pods charged to it: pods with known
        devices first, then inferred ones in (creation, uid) order."""
        node = self._nodes.get(name)
        if node is None:
            return
        node.requested = {}
        node.used_ports = {}
        shown = self._shared_gpus.get(name)
        if shown is not None and not _advertises_gpus(node):
            node.devices = shown[0]
            node.gpu_free = list(shown[1])
        else:
            node.gpu_free = [MILLI_PER_GPU] * len(node.devices)
        inferred = []
        reserved = []
        not_as_written = 0
        for charge in self._on_node.get(name, {}).values():
            if not _as_written(charge, node):
                not_as_written += 1
            if charge.uid in self._assumed:
                # A reservation is not on the node for its kubelet yet (no report can be
                # about it until its bind is seen), and it was planned against the
                # inferred charges: it is charged after them, so that adding it never
                # moves a guess onto the devices it was given.
                reserved.append(charge)
                continue
            seen = _kubelet_shares(charge, node, self._reported_before_reserved.get(charge.uid))
            if seen is not None:
                charge.shares = seen
                node.charge(charge.requests, charge.shares, charge.ports)
            elif _as_written(charge, node):
                charge.shares = charge.written or ()
                node.charge(charge.requests, charge.shares, charge.ports)
            elif charge.unverified:
                charge.shares = _worst_case_shares(charge, node)
                node.charge(charge.requests, charge.shares, charge.ports)
            else:
                inferred.append(charge)
        for charge in sorted(inferred, key=_canonical_order):
            charge.shares = inferred_shares(node, charge.gpu.count, charge.gpu.milli)
            node.charge(charge.requests, charge.shares, charge.ports)
        for charge in reserved:
            charge.shares = charge.written or ()
            node.charge(charge.requests, charge.shares, charge.ports)
        self._not_as_written[name] = not_as_written
        self._touch(node)

    # --- pods -------------------------------------------------------------------------
    def apply_pod(self, event: EventType | str, obj: Mapping[str, Any]) -> PodInfo | None:
        """Apply a pod watch event; returns the stored record (None once deleted)."""
        meta = metadata(obj)
        uid = object_uid(obj)
        old = self._pods.get(uid)
        rv = str(meta.get("resourceVersion") or "")
        if old is not None and is_older(old.resource_version, rv):
            return old
        if event == EventType.DELETED:
            self._pods.pop(uid, None)
            if old is not None:
                self._gangs.remove(old)
            self._assumed.pop(uid, None)
            self._decided.pop(uid, None)
            self._reported_before_reserved.pop(uid, None)
            self._bound_by_us.forget(uid)
            self._set_charge(uid, None)
            return None
        return self._store_pod(uid, old, pod_from_api(obj, self.share_milli, self.gang_keys))

    def add_parsed_pod(self, pod: PodInfo) -> PodInfo:
        """`apply_pod(ADDED, obj)` for a pod already parsed: `pod` must be what
        `pod_from_api(obj, self.share_milli, self.gang_keys)` reads. The simulator
        parses each distinct trace pod once and clones the record per arrival
        (scheduler/sim/openb.py, `PodRecords`); what follows the parse is the same code."""
        old = self._pods.get(pod.uid)
        if old is not None and is_older(old.resource_version, pod.resource_version):
            return old
        return self._store_pod(pod.uid, old, pod)

    def _store_pod(self, uid: str, old: PodInfo | None, pod: PodInfo) -> PodInfo:
        """Store a pod's new record (`old`: its previous one) and charge it."""
        if old is not None and old.claim_gpu.count and old.resource_claims == pod.resource_claims:
            pod.claim_gpu = old.claim_gpu  # what its claim holds, known when it was placed
        self._pods[uid] = pod
        self._gangs.put(pod, old)
        charged = self._charges.get(uid)
        if charged is not None and old is not None and _seen_differently(old, pod):
            # Other pods' affinity and spread read this pod's labels and terms: the
            # node's snapshot copy must be refreshed even if its accounting is not.
            node = self._nodes.get(charged.node)
            if node is not None:
                self._touch(node)
        assumed = self._assumed.get(uid)
        if assumed is not None and pod.node_name:
            # The bind landed: the API's word replaces the reservation.
            del self._assumed[uid]
            if assumed.placement.node == pod.node_name and assumed.state != Reservation.NOMINATED:
                self._bound_by_us.note_bound(uid, pod.node_name)
            if assumed.placement.node == pod.node_name and assumed.placement.shares:
                self._decided[uid] = (pod.node_name, assumed.placement.shares)
            self._set_charge(uid, self._charge_for(pod))
            self._reservation_ended(uid)
        elif assumed is None:
            self._set_charge(uid, self._charge_for(pod))
        return pod

    def _reservation_ended(self, uid: str) -> None:
        """The pod's bind is seen: a report of its node that names it may now be the
        kubelet's word, which no reservation heeds (_rebuild_node). The charge may be
        the very one reserved, so the node is recomputed here."""
        charge = self._charges.get(uid)
        node = self._nodes.get(charge.node) if charge is not None else None
        if node is not None and uid in node.kubelet_devices:
            self._rebuild_node(node.name)

    def _charge_for(self, pod: PodInfo) -> _Charge | None:
        if not pod.consumes_resources:
            return None
        written: DeviceShares | None = ()
        if pod.gpu.count:
            written = self._trusted(pod)
        # Signed, but by no key this process holds: maybe a real bind (module docstring).
        unverified = (
            written is None and bool(pod.assignment) and pod.assignment_signature is not None
        )
        current = self._charges.get(pod.uid)
        if (
            current is not None
            and current.node == pod.node_name
            and current.requests == pod.requests
            and current.written == written
            and current.unverified == unverified
            and current.created == pod.created
            and current.uid == pod.uid
            and current.ports == pod.host_ports
        ):
            return current
        return _Charge(
            node=pod.node_name,
            requests=pod.requests,
            gpu=pod.gpu,
            written=written,
            created=pod.created,
            ports=pod.host_ports,
            uid=pod.uid,
            unverified=unverified,
        )

    def _trusted(self, pod: PodInfo) -> DeviceShares | None:
        """The devices this scheduler decided for a bound pod, None when it did not
        (then they are inferred). Its decision is what it bound while running, else an
        assignment carrying its signature over the pod's uid, node and devices (a bind
        from before a restart). A value a user wrote (at create, by a patch, or copied
        from another pod) has no valid signature and counts for nothing. The devices
        must also be the shape of the pod's request (and, checked against the node,
        exist there)."""
        decided = self._decided.get(pod.uid)
        if decided is not None and decided[0] == pod.node_name:
            shares = decided[1]
        else:
            shares = pod.assignment or ()
            signature = pod.assignment_signature
            if (
                not shares
                or signature is None
                or self.assignment_keys is None
                or not self.assignment_keys.verifies(pod.uid, pod.node_name, shares, signature)
            ):
                return None
            self._decided[pod.uid] = (pod.node_name, shares)
        if len(shares) != pod.gpu.count or any(milli != pod.gpu.milli for _, milli in shares):
            return None
        return shares

    def _set_charge(self, uid: str, charge: _Charge | None) -> None:
        old = self._charges.get(uid)
        if old is charge:
            return
        if old is not None:
            del self._charges[uid]
            self._on_node[old.node].pop(uid, None)
            if not self._on_node[old.node]:
                del self._on_node[old.node]
            self._apply_change(old.node, old, remove=True)
        if charge is not None:
            self._charges[uid] = charge
            self._on_node.setdefault(charge.node, {})[uid] = charge
            self._apply_change(charge.node, charge, remove=False)
        self._charge_quota(uid, charge)

    def _charge_quota(self, uid: str, charge: _Charge | None) -> None:
        """A pod charged to a node (bound or assumed) counts for its namespace's quota."""
        pod = self._pods.get(uid)
        entry = self._assumed.get(uid)
        if charge is None or pod is None or (entry and entry.state == Reservation.RESERVED):
            self.quotas.ledger.discharge(uid)
        else:
            self.quotas.ledger.charge(uid, pod.namespace, usage_of(charge.requests, charge.gpu))

    def _apply_change(self, name: str, charge: _Charge, remove: bool) -> None:
        node = self._nodes.get(name)
        if node is None:
            return
        # Incremental only while every charge on the node is as written; an inferred
        # charge on the node makes the whole node recompute in canonical order, and so
        # does a report of what the kubelet gave (it may name this pod). The others on
        # the node are counted, not re-checked (_not_as_written): when this charge is as
        # written, adding or removing it leaves their count as it was. A charge that
        # takes no GPU is exact whatever else is there: inferred shares read only the
        # devices' free milli (inferred_shares), which it leaves alone, and no kubelet
        # report can give it devices (_kubelet_shares wants as many as it asks for).
        takes_no_gpu = not charge.gpu.count and charge.written == ()
        if not takes_no_gpu and (
            node.kubelet_devices
            or not _as_written(charge, node)
            or self._not_as_written.get(name, 1)
        ):
            self._rebuild_node(name)
            return
        if remove:
            node.discharge(charge.requests, charge.shares, charge.ports)
        else:
            charge.shares = charge.written or ()
            node.charge(charge.requests, charge.shares, charge.ports)
        self._touch(node)

    def drop_pod(self, uid: str) -> None:
        """Forget everything about a pod whose apply failed midway (a bug, isolated by
        the core), and recompute the accounting of every node it was charged to from
        the charges that remain, so that no half-applied charge survives."""
        dropped = self._pods.pop(uid, None)
        if dropped is not None:
            self._gangs.remove(dropped)
        self._assumed.pop(uid, None)
        self._reported_before_reserved.pop(uid, None)
        self._bound_by_us.forget(uid)
        self.quotas.ledger.discharge(uid)
        charge = self._charges.pop(uid, None)
        touched = {charge.node} if charge is not None else set()
        for name, charges in list(self._on_node.items()):
            if charges.pop(uid, None) is not None:
                touched.add(name)
            if not charges:
                del self._on_node[name]
        for name in touched:
            self._rebuild_node(name)

    # --- PodGroups --------------------------------------------------------------------
    def apply_podgroup(self, event: EventType | str, obj: Mapping[str, Any]) -> PodGroupInfo | None:
        group = podgroup_from_api(obj)
        old = self._podgroups.get(group.key)
        if old is not None and is_older(old.resource_version, group.resource_version):
            return old
        if event == EventType.DELETED:
            self._podgroups.pop(group.key, None)
            return None
        self._podgroups[group.key] = group
        return group

    # --- namespaces ---------------------------------------------------------------------
    def apply_namespace(self, event: EventType | str, obj: Mapping[str, Any]) -> None:
        """Apply a namespace watch event: only its labels matter here."""
        meta = metadata(obj)
        name = str(meta.get("name") or "")
        if not name:
            return
        if event == EventType.DELETED:
            self._namespaces.pop(name, None)
        else:
            labels = meta.get("labels") or {}
            self._namespaces[name] = {str(k): str(v) for k, v in labels.items()}

    def namespace_labels(self) -> Mapping[str, Mapping[str, str]]:
        return self._namespaces

    # --- relist -----------------------------------------------------------------------
    def replace_nodes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Reconcile with a fresh list: what the list lacks is gone."""
        seen = set()
        for obj in objs:
            node = self.apply_node(EventType.MODIFIED, obj)
            if node is not None:
                seen.add(node.name)
        for name in [n for n in self._nodes if n not in seen]:
            self._remove_node(name)

    def replace_pods(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Reconcile with a fresh list. Reservations of pods that still exist survive."""
        seen = set()
        for obj in objs:
            pod = self.apply_pod(EventType.MODIFIED, obj)
            if pod is not None:
                seen.add(pod.uid)
        for uid in [u for u in self._pods if u not in seen]:
            self._gangs.remove(self._pods.pop(uid))
            self._assumed.pop(uid, None)
            self._decided.pop(uid, None)
            self._reported_before_reserved.pop(uid, None)
            self._bound_by_us.forget(uid)
            self._set_charge(uid, None)

    def replace_podgroups(self, objs: Iterable[Mapping[str, Any]]) -> None:
        fresh = {g.key: g for g in (podgroup_from_api(obj) for obj in objs)}
        self._podgroups = fresh

    # --- assume / confirm / forget / expire ---------------------------------------------
    def assume(self, placements: Sequence[Placement], now: float) -> None:
        """Reserve a whole plan, or nothing (AssumeError names what is wrong)."""
        for placement in placements:
            pod = self._pods.get(placement.pod_uid)
            if pod is None or pod.node_name or placement.pod_uid in self._assumed:
                raise AssumeError(f"pod {placement.pod_uid} is unknown, bound or assumed")
            if placement.node not in self._nodes:
                raise AssumeError(f"node {placement.node} is unknown")
        for placement in placements:
            pod = self._pods[placement.pod_uid]
            reported = self._nodes[placement.node].kubelet_devices.get(pod.uid)
            if reported:
                self._reported_before_reserved[pod.uid] = (placement.node, reported)
            self._assumed[pod.uid] = _Assumed(placement, now)
            self._set_charge(
                pod.uid,
                _Charge(
                    node=placement.node,
                    requests=pod.requests,
                    gpu=pod.gpu,
                    written=placement.shares,
                    created=pod.created,
                    ports=pod.host_ports,
                    uid=pod.uid,
                ),
            )

    def nominate(self, placements: Sequence[Placement], now: float) -> None:
        """Hold the room of a plan that waits for preempted pods to leave: charged like
        an assumed plan (whole or nothing), but not a bind; `forget` releases it."""
        self.assume(placements, now)
        for placement in placements:
            self._assumed[placement.pod_uid].state = Reservation.NOMINATED

    def reserve(self, placements: Sequence[Placement], now: float) -> None:
        """Hold room for a starving gang (Reservation.RESERVED): charged on the nodes
        like a nomination, whole or nothing, but not to its quota; `forget` releases it."""
        self.assume(placements, now)
        for placement in placements:
            self._assumed[placement.pod_uid].state = Reservation.RESERVED
            self.quotas.ledger.discharge(placement.pod_uid)

    def confirm(self, uid: str, node: str, shares: DeviceShares | None = None) -> None:
        """The bind succeeded: record the pod as bound without waiting for its event
        (the simulator binds this way; the informer's event then changes nothing)."""
        assumed = self._assumed.pop(uid, None)
        pod = self._pods.get(uid)
        if pod is None:
            return
        pod.node_name = node
        if pod.phase == "Pending":
            pod.phase = "Running"
        if shares is None and assumed is not None:
            shares = assumed.placement.shares
        pod.assignment = shares if shares else None
        self._bound_by_us.note_bound(uid, node)
        if shares:
            self._decided[uid] = (node, shares)
        self._set_charge(uid, self._charge_for(pod))
        self._reservation_ended(uid)

    def mark_bound(self, uid: str) -> None:
        """The API accepted the bind: the room stays charged until the event showing the
        pod bound arrives (watch or relist), however late, or the pod is deleted."""
        entry = self._assumed.get(uid)
        if entry is not None:
            entry.state = Reservation.BOUND

    def mark_unknown(self, uid: str) -> None:
        """The binder ended without learning whether the bind landed: the room stays
        charged until the event shows the pod bound, the pod is deleted, or a re-read
        of the pod settles it (`mark_bound` or `forget`)."""
        entry = self._assumed.get(uid)
        if entry is not None and entry.state == Reservation.BINDING:
            entry.state = Reservation.UNKNOWN

    def forget(self, uid: str) -> None:
        """The bind definitely failed: release the reservation; the pod is pending
        again. A bind the API accepted is never forgotten (its pod is bound)."""
        entry = self._assumed.get(uid)
        if entry is None or entry.state == Reservation.BOUND:
            return
        del self._assumed[uid]
        self._set_charge(uid, None)

    # --- snapshots --------------------------------------------------------------------
    def update_snapshot(self, snapshot: Snapshot) -> int:
        """Bring `snapshot` up to date, copying only the nodes changed since its last
        update, in the order they changed; returns how many nodes were copied or
        removed."""
        since = snapshot.generation
        changes: list[tuple[int, str, bool]] = []
        for generation, name in reversed(self._node_removals):
            if generation <= since:
                break
            changes.append((generation, name, False))
        for name, generation in reversed(self._node_changes.items()):
            if generation <= since:
                break
            changes.append((generation, name, True))
        changes.sort()
        for generation, name, present in changes:
            if present:
                snapshot.put(self._nodes[name].clone(), self._pods_on(name))
            else:
                snapshot.remove(name, generation)
        snapshot.generation = self._generation
        if snapshot.pods.namespace_labels != self._namespaces:
            snapshot.pods.namespace_labels = dict(self._namespaces)
        self._readers.add(snapshot)
        self._forget_seen_removals()
        return len(changes)

    def nodes_changed_since(self, generation: int) -> Iterator[str]:
        """The nodes added or changed after `generation` (the latest change first),
        from the change log snapshots are updated from: as many as changed, never a pass
        over every node. Removed nodes are not named (they are gone)."""
        for name, changed in reversed(self._node_changes.items()):
            if changed <= generation:
                return
            yield name

    def _forget_seen_removals(self) -> None:
        """Drop the removals every snapshot has seen: nodes with unique names (an
        autoscaler's) come and go all day, and each would otherwise stay here."""
        if not self._node_removals:
            return  # the common case: nothing to drop, no need to read every reader
        floor = min((s.generation for s in self._readers), default=self._generation)
        seen = 0
        for generation, _ in self._node_removals:
            if generation > floor:
                break
            seen += 1
        if seen:
            del self._node_removals[:seen]

    def _pods_on(self, name: str) -> tuple[PodInfo, ...]:
        """The pods charged to a node (bound, or assumed there), for the snapshot's pod
        index."""
        pods = self._pods
        return tuple(pods[uid] for uid in self._on_node.get(name, {}) if uid in pods)

    def snapshot(self) -> Snapshot:
        fresh = Snapshot()
        self.update_snapshot(fresh)
        return fresh


def _seen_differently(old: PodInfo, new: PodInfo) -> bool:
    """Whether other pods' placement could read the two records differently."""
    return (
        old.labels != new.labels
        or old.pod_affinity != new.pod_affinity
        or old.deleting != new.deleting
        or old.namespace != new.namespace
    )


def _advertises_gpus(node: NodeInfo) -> bool:
    """Whether the node offers GPUs of its own (a device plugin's), which DRA shared
    GPUs are never shown over."""
    return bool(node.allocatable.get(WHOLE_GPU) or node.allocatable.get(SHARED_GPU))


def _same_offer(old: NodeInfo, new: NodeInfo) -> bool:
    """True when a node update changes nothing a placement depends on."""
    return (
        old.labels == new.labels
        and old.taints == new.taints
        and old.unschedulable == new.unschedulable
        and old.allocatable == new.allocatable
        and old.devices == new.devices
        and old.pair_scores == new.pair_scores
        and old.problems == new.problems
        and old.kubelet_devices == new.kubelet_devices
    )
