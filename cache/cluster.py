"""ClusterCache: the scheduler's model of the cluster, fed by watch events.

Rules it keeps (docs/architecture.md explains them):
- Every object carries its `metadata.resourceVersion`. Order normally comes from the
  stream; where two versions are both decimal integers (as every API server backed by
  etcd writes them) an event older than what is stored is dropped, so a relist racing
  a watch, or a late event after `assume`, never rolls state back.
- Every pod bound to a node and not terminal takes resources there, whoever scheduled
  it. GPU devices are charged from the pod's `gang-scheduler.io/gpu-devices` annotation
  when it matches the pod's request; otherwise they are inferred (cache.node.
  inferred_shares). Inferred charges are recomputed for the whole node in a canonical
  order whenever its pods change, so the accounting depends only on which pods are
  there, never on the order events arrived in.
- `assume` reserves a plan before its binds; the bound pod's event confirms it;
  `forget` undoes it; `expire` drops reservations whose bind was never seen.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cache.gpu import DeviceShares, GpuRequest
from cache.jsonobj import metadata, object_uid
from cache.node import NodeInfo, inferred_shares, node_from_api
from cache.pod import DEFAULT_GANG_KEYS, GangKeys, PodInfo, pod_from_api
from cache.podgroup import PodGroupInfo, podgroup_from_api
from cache.ports import HostPort
from cache.resources import MILLI_PER_GPU
from cache.snapshot import Snapshot

DEFAULT_ASSUME_TTL = 30.0


class EventType(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


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
    order: tuple[float, str]  # canonical order among inferred charges: (created, uid)
    shares: DeviceShares = ()  # what is charged on the node now
    ports: tuple[HostPort, ...] = ()  # host ports the pod holds on the node


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
    deadline: float


def is_older(stored: str, incoming: str) -> bool:
    """True when `incoming` is known to be older than `stored` (both decimal integers);
    otherwise resourceVersions are opaque and the stream's order is trusted."""
    return stored.isdigit() and incoming.isdigit() and int(incoming) < int(stored)


class ClusterCache:
    def __init__(
        self,
        assume_ttl: float = DEFAULT_ASSUME_TTL,
        share_milli: int = 1,
        gang_keys: GangKeys = DEFAULT_GANG_KEYS,
    ) -> None:
        self.assume_ttl = assume_ttl
        # Milli of a GPU one unit of nvidia.com/vgpu is worth (resources.shares_in_milli).
        self.share_milli = share_milli
        self.gang_keys = gang_keys
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}
        self._podgroups: dict[str, PodGroupInfo] = {}
        # Namespace name -> its labels (pod affinity's namespaceSelector reads them).
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self._charges: dict[str, _Charge] = {}
        self._on_node: dict[str, dict[str, _Charge]] = {}
        self._assumed: dict[str, _Assumed] = {}
        self._generation = 0
        # node name -> generation of its last change, least recently changed first, so
        # that a snapshot update walks only the nodes changed since it last looked.
        self._node_changes: OrderedDict[str, int] = OrderedDict()
        self._node_removals: list[tuple[int, str]] = []

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

    def is_assumed(self, uid: str) -> bool:
        return uid in self._assumed

    def assumed(self) -> Mapping[str, Placement]:
        return {uid: entry.placement for uid, entry in self._assumed.items()}

    def assumed_placement(self, uid: str) -> Placement | None:
        entry = self._assumed.get(uid)
        return entry.placement if entry is not None else None

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

    def _remove_node(self, name: str) -> None:
        if self._nodes.pop(name, None) is None:
            return
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
        node.gpu_free = [MILLI_PER_GPU] * len(node.devices)
        inferred = []
        for charge in self._on_node.get(name, {}).values():
            if _as_written(charge, node):
                charge.shares = charge.written or ()
                node.charge(charge.requests, charge.shares, charge.ports)
            else:
                inferred.append(charge)
        for charge in sorted(inferred, key=lambda c: c.order):
            charge.shares = inferred_shares(node, charge.gpu.count, charge.gpu.milli)
            node.charge(charge.requests, charge.shares, charge.ports)
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
            self._assumed.pop(uid, None)
            self._set_charge(uid, None)
            return None
        pod = pod_from_api(obj, self.share_milli, self.gang_keys)
        self._pods[uid] = pod
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
            assumed = None
        if assumed is None:
            self._set_charge(uid, self._charge_for(pod))
        return pod

    def _charge_for(self, pod: PodInfo) -> _Charge | None:
        if not pod.consumes_resources:
            return None
        written: DeviceShares | None = ()
        if pod.gpu.count:
            written = pod.assignment if self._trusted(pod) else None
        current = self._charges.get(pod.uid)
        if (
            current is not None
            and current.node == pod.node_name
            and current.requests == pod.requests
            and current.written == written
            and current.order == (pod.created, pod.uid)
            and current.ports == pod.host_ports
        ):
            return current
        return _Charge(
            node=pod.node_name,
            requests=pod.requests,
            gpu=pod.gpu,
            written=written,
            order=(pod.created, pod.uid),
            ports=pod.host_ports,
        )

    @staticmethod
    def _trusted(pod: PodInfo) -> bool:
        """An assignment is charged as written only when it is the shape of the pod's
        request (and, checked against the node, names devices the node has)."""
        shares = pod.assignment
        if not shares or len(shares) != pod.gpu.count:
            return False
        return all(milli == pod.gpu.milli for _, milli in shares)

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

    def _apply_change(self, name: str, charge: _Charge, remove: bool) -> None:
        node = self._nodes.get(name)
        if node is None:
            return
        # Incremental only while every charge on the node is as written; an inferred
        # charge on the node makes the whole node recompute in canonical order.
        if not _as_written(charge, node) or not all(
            _as_written(other, node) for other in self._on_node.get(name, {}).values()
        ):
            self._rebuild_node(name)
            return
        if remove:
            node.discharge(charge.requests, charge.shares, charge.ports)
        else:
            charge.shares = charge.written or ()
            node.charge(charge.requests, charge.shares, charge.ports)
        self._touch(node)

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

    def replace_namespaces(self, objs: Iterable[Mapping[str, Any]]) -> None:
        self._namespaces = {}
        for obj in objs:
            self.apply_namespace(EventType.ADDED, obj)

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
            self._pods.pop(uid)
            self._assumed.pop(uid, None)
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
            self._assumed[pod.uid] = _Assumed(placement, now + self.assume_ttl)
            self._set_charge(
                pod.uid,
                _Charge(
                    node=placement.node,
                    requests=pod.requests,
                    gpu=pod.gpu,
                    written=placement.shares,
                    order=(pod.created, pod.uid),
                    ports=pod.host_ports,
                ),
            )

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
        self._set_charge(uid, self._charge_for(pod))

    def forget(self, uid: str) -> None:
        """The bind failed: release the reservation; the pod is pending again."""
        if self._assumed.pop(uid, None) is not None:
            self._set_charge(uid, None)

    def expire(self, now: float) -> list[str]:
        """Drop reservations whose bound pod was not seen by their deadline."""
        expired = [uid for uid, entry in self._assumed.items() if entry.deadline <= now]
        for uid in expired:
            self.forget(uid)
        return expired

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
        return len(changes)

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
    )
