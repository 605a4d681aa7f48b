"""Slim records of the storage objects a placement depends on, and their store.

PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes, read from the
API's JSON as kube-scheduler's VolumeBinding plugin reads them (field names follow
core/v1 and storage.k8s.io/v1). `VolumeCache` holds them, fed by watch events like the
ClusterCache (an event older than what is stored, by decimal resourceVersion, is
dropped), and counts a generation so that a reader can tell when anything changed.

Pure: no I/O, no clock. Nothing here raises on a user's object: what cannot be read is
kept as a problem on the record (a claim whose request is not a quantity, say), and a
pod using it waits with that reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from cache.jsonobj import MALFORMED, mapping, metadata
from cache.quantity import QuantityError, parse_quantity
from cache.terms import SelectorTerm, parse_required_affinity

SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
# The PV controller's annotation on a PV it bound (or that a scheduler pre-bound).
BOUND_BY_CONTROLLER_ANNOTATION = "pv.kubernetes.io/bound-by-controller"
# A StorageClass with this provisioner has no dynamic provisioning: static PVs only.
NO_PROVISIONER = "kubernetes.io/no-provisioner"
IMMEDIATE = "Immediate"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
FILESYSTEM = "Filesystem"


class Event(StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


# --- what a pod mounts ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PodClaim:
    """A claim a pod mounts. `ephemeral`: the claim of a generic ephemeral volume, named
    `<pod>-<volume>` and created (owned by the pod) by the ephemeral volume controller."""

    name: str
    ephemeral: bool = False


def pod_claims(pod_name: str, volumes: object) -> tuple[PodClaim, ...]:
    """The claims of `spec.volumes`, in order, each once. Raises ValueError on a
    volume that names no claim (the API server refuses such pods; a hand-made one is
    refused here the same way)."""
    found: dict[str, PodClaim] = {}
    for volume in volumes if isinstance(volumes, list) else ():
        volume = mapping(volume)
        claim = volume.get("persistentVolumeClaim")
        if claim is not None:
            name = str(mapping(claim).get("claimName") or "")
            if not name:
                raise ValueError(
                    f"volume {volume.get('name')!r}: persistentVolumeClaim.claimName is required"
                )
            found.setdefault(name, PodClaim(name))
        elif volume.get("ephemeral") is not None:
            # ephemeral.GenericEphemeralVolume: the claim is named <pod>-<volume>.
            name = f"{pod_name}-{volume.get('name') or ''}"
            found.setdefault(name, PodClaim(name, ephemeral=True))
    return tuple(found.values())


# --- label selectors (a claim's spec.selector over PV labels) ---------------------------
@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None  # DoesNotExist


def parse_label_selector(raw: object) -> tuple[LabelRequirement, ...] | None:
    """metav1.LabelSelector as requirements (ANDed); None when absent (every PV)."""
    if raw is None:
        return None
    raw = mapping(raw)
    reqs = [
        LabelRequirement(str(k), "In", frozenset({str(v)}))
        for k, v in mapping(raw.get("matchLabels")).items()
    ]
    for expr in raw.get("matchExpressions") or ():
        expr = mapping(expr)
        operator = str(expr.get("operator") or "")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"label selector operator {operator!r} is not supported")
        values = frozenset(str(v) for v in expr.get("values") or ())
        reqs.append(LabelRequirement(str(expr.get("key") or ""), operator, values))
    return tuple(reqs)


# --- records ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """A PersistentVolumeClaim as placement reads it."""

    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    # spec.storageClassName: None when unset (no default class was assigned), "" when
    # explicitly no class.
    storage_class: str | None = None
    volume_name: str = ""  # spec.volumeName: bound (or pre-bound) to this PV
    access_modes: frozenset[str] = frozenset()
    request_bytes: int = 0
    volume_mode: str = FILESYSTEM
    selector: tuple[LabelRequirement, ...] | None = None
    selected_node: str = ""
    deleting: bool = False
    owner_uids: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class VolumeInfo:
    """A PersistentVolume as placement reads it."""

    name: str
    uid: str = ""
    resource_version: str = ""
    storage_class: str = ""
    capacity_bytes: int = 0
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = FILESYSTEM
    # spec.nodeAffinity.required terms (ORed); None when the PV is usable from any node.
    node_affinity: tuple[SelectorTerm, ...] | None = None
    claim_ref: ClaimRef | None = None
    phase: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    deleting: bool = False
    csi_driver: str = ""
    csi_handle: str = ""
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClassInfo:
    """A StorageClass as placement reads it."""

    name: str
    resource_version: str = ""
    provisioner: str = ""
    binding_mode: str = IMMEDIATE
    # allowedTopologies as node selector terms (ORed); None when provisioning is not
    # restricted to a topology.
    allowed_topologies: tuple[SelectorTerm, ...] | None = None

    @property
    def delays_binding(self) -> bool:
        return self.binding_mode == WAIT_FOR_FIRST_CONSUMER

    @property
    def provisions(self) -> bool:
        return bool(self.provisioner) and self.provisioner != NO_PROVISIONER


@dataclass(frozen=True, slots=True)
class CSINodeInfo:
    """A CSINode: per CSI driver, how many of its volumes the node can attach
    (`spec.drivers[].allocatable.count`; a driver that reports none has no limit)."""

    name: str
    resource_version: str = ""
    limits: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VolumeNeed:
    """What one claim of a pod asks of a node, resolved against the cluster's volumes.

    `bound`: the claim's PV exists; `terms` are its node affinity. Otherwise the claim
    waits for its first consumer and `terms` are the union of where a matching
    available PV can be used and where its class may provision one. `terms` None: any
    node; (): none."""

    claim: str  # "ns/name"
    bound: bool
    terms: tuple[SelectorTerm, ...] | None


# --- parsing ----------------------------------------------------------------------------
def _bytes(value: object) -> int:
    if value is None:
        return 0
    return int(parse_quantity(value))


def _modes(raw: object) -> frozenset[str]:
    return frozenset(str(mode) for mode in raw) if isinstance(raw, list) else frozenset()


def claim_from_api(obj: Mapping[str, Any]) -> ClaimInfo:
    meta = metadata(obj)
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    spec = mapping(mapping(obj).get("spec"))
    problems: list[str] = []
    request = 0
    selector = None
    try:
        request = _bytes(mapping(mapping(spec.get("resources")).get("requests")).get("storage"))
    except QuantityError as error:
        problems.append(f"persistentvolumeclaim {name!r}: storage request: {error}")
    try:
        selector = parse_label_selector(spec.get("selector"))
    except ValueError as error:
        problems.append(f"persistentvolumeclaim {name!r}: selector: {error}")
    klass = spec.get("storageClassName")
    annotations = mapping(meta.get("annotations"))
    return ClaimInfo(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        storage_class=None if klass is None else str(klass),
        volume_name=str(spec.get("volumeName") or ""),
        access_modes=_modes(spec.get("accessModes")),
        request_bytes=request,
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        selector=selector,
        selected_node=str(annotations.get(SELECTED_NODE_ANNOTATION) or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        owner_uids=tuple(
            str(mapping(ref).get("uid") or "") for ref in meta.get("ownerReferences") or ()
        ),
        problems=tuple(problems),
    )


def volume_from_api(obj: Mapping[str, Any]) -> VolumeInfo:
    meta = metadata(obj)
    name = str(meta.get("name") or "")
    spec = mapping(mapping(obj).get("spec"))
    problems: list[str] = []
    capacity = 0
    affinity = None
    try:
        capacity = _bytes(mapping(spec.get("capacity")).get("storage"))
    except QuantityError as error:
        problems.append(f"persistentvolume {name!r}: capacity: {error}")
    try:
        # spec.nodeAffinity.required is a NodeSelector, the same shape as a pod's.
        required = mapping(spec.get("nodeAffinity")).get("required")
        if required is not None:
            affinity = parse_required_affinity(
                {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
            )
    except MALFORMED as error:
        problems.append(f"persistentvolume {name!r}: nodeAffinity: {error}")
    ref = spec.get("claimRef")
    claim_ref = None
    if isinstance(ref, Mapping) and ref.get("name"):
        claim_ref = ClaimRef(
            str(ref.get("namespace") or ""), str(ref.get("name")), str(ref.get("uid") or "")
        )
    return VolumeInfo(
        name=name,
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        storage_class=str(spec.get("storageClassName") or ""),
        capacity_bytes=capacity,
        access_modes=_modes(spec.get("accessModes")),
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        node_affinity=affinity,
        claim_ref=claim_ref,
        phase=str(mapping(mapping(obj).get("status")).get("phase") or ""),
        labels={str(k): str(v) for k, v in mapping(meta.get("labels")).items()},
        deleting=bool(meta.get("deletionTimestamp")),
        csi_driver=str(mapping(spec.get("csi")).get("driver") or ""),
        csi_handle=str(mapping(spec.get("csi")).get("volumeHandle") or ""),
        problems=tuple(problems),
    )


def class_from_api(obj: Mapping[str, Any]) -> ClassInfo:
    meta = metadata(obj)
    body = mapping(obj)
    topologies = body.get("allowedTopologies")
    terms: tuple[SelectorTerm, ...] | None = None
    if topologies:
        # TopologySelectorTerm: matchLabelExpressions ANDed, each "label In values".
        terms = parse_required_affinity(
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": mapping(expr).get("key"),
                                        "operator": "In",
                                        "values": mapping(expr).get("values") or [],
                                    }
                                    for expr in mapping(term).get("matchLabelExpressions") or ()
                                ]
                            }
                            for term in topologies
                        ]
                    }
                }
            }
        )
    return ClassInfo(
        name=str(meta.get("name") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        provisioner=str(body.get("provisioner") or ""),
        binding_mode=str(body.get("volumeBindingMode") or IMMEDIATE),
        allowed_topologies=terms,
    )


def csinode_from_api(obj: Mapping[str, Any]) -> CSINodeInfo:
    meta = metadata(obj)
    limits: dict[str, int] = {}
    for driver in mapping(mapping(obj).get("spec")).get("drivers") or ():
        driver = mapping(driver)
        count = mapping(driver.get("allocatable")).get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            limits[str(driver.get("name") or "")] = count
    return CSINodeInfo(
        name=str(meta.get("name") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        limits=limits,
    )


_R = TypeVar("_R", ClaimInfo, VolumeInfo, ClassInfo, CSINodeInfo)


# --- the store --------------------------------------------------------------------------
def _older(stored: str, incoming: str) -> bool:
    return stored.isdigit() and incoming.isdigit() and int(incoming) < int(stored)


class VolumeCache:
    """Claims (by "ns/name"), volumes, classes and CSINodes (by name)."""

    def __init__(self) -> None:
        self.claims: dict[str, ClaimInfo] = {}
        self.volumes: dict[str, VolumeInfo] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.csinodes: dict[str, CSINodeInfo] = {}
        self.generation = 0
        # PV -> claim key: static PVs a plan chose whose bind is in flight, so that no
        # other claim is given them before the PV's own event shows its claimRef.
        self._held: dict[str, str] = {}

    def claim(self, namespace: str, name: str) -> ClaimInfo | None:
        return self.claims.get(f"{namespace}/{name}")

    # --- events -----------------------------------------------------------------------
    def apply_claim(self, event: str, obj: Mapping[str, Any]) -> ClaimInfo | None:
        claim = claim_from_api(obj)
        return self._apply(self.claims, claim.key, claim, event)

    def apply_volume(self, event: str, obj: Mapping[str, Any]) -> VolumeInfo | None:
        volume = volume_from_api(obj)
        if volume.claim_ref is not None or event == Event.DELETED:
            self._held.pop(volume.name, None)  # the API's word replaces the hold
        return self._apply(self.volumes, volume.name, volume, event)

    # --- holds ------------------------------------------------------------------------
    def held_for(self, volume: str) -> str | None:
        """The claim a plan in flight chose this PV for, if any."""
        return self._held.get(volume)

    def hold(self, volume: str, claim_key: str) -> None:
        self._held[volume] = claim_key
        self.generation += 1

    def release(self, volume: str, claim_key: str) -> None:
        """Drop a hold (its gang broke before the PV was bound)."""
        if self._held.get(volume) == claim_key:
            del self._held[volume]
            self.generation += 1

    def apply_class(self, event: str, obj: Mapping[str, Any]) -> ClassInfo | None:
        klass = class_from_api(obj)
        return self._apply(self.classes, klass.name, klass, event)

    def apply_csinode(self, event: str, obj: Mapping[str, Any]) -> CSINodeInfo | None:
        csinode = csinode_from_api(obj)
        return self._apply(self.csinodes, csinode.name, csinode, event)

    def _apply(self, store: dict[str, _R], key: str, record: _R, event: str) -> _R | None:
        old = store.get(key)
        if old is not None and _older(old.resource_version, record.resource_version):
            return old
        if event == Event.DELETED:
            if store.pop(key, None) is not None:
                self.generation += 1
            return None
        if old != record:
            store[key] = record
            self.generation += 1
        return record

    def forget(self, kind: str, keys: Iterable[str]) -> None:
        """Drop records a relist no longer has (kind: claims, volumes, classes,
        csinodes)."""
        store: dict[str, Any] = getattr(self, kind)
        for key in list(keys):
            if store.pop(key, None) is not None:
                self.generation += 1
