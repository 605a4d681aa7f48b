"""Slim records of the storage objects a placement depends on, and their store.

PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes, read from the
API's JSON as kube-scheduler's VolumeBinding plugin reads them (field names follow
core/v1 and storage.k8s.io/v1). `VolumeCache` holds them, fed by watch events like the
ClusterCache (an event older than what is stored, by decimal resourceVersion, is
dropped), and counts a generation so that a reader can tell when anything changed.

Pure: no I/O, no clock. Nothing here raises on a user's object, whatever its types: what
cannot be read is kept as a problem on the record (a claim whose request is not a
quantity, a class whose allowedTopologies is not a list of terms), and a pod using it
waits with that reason. Numbers are bounded where they are read (an attach count is an
int32 of at least 0, as the API server validates it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from cache.jsonobj import MALFORMED, mapping, metadata
from cache.limits import shown
from cache.quantity import QuantityError, parse_quantity
from cache.terms import Requirement, SelectorTerm, parse_required_affinity

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
                    f"volume {shown(volume.get('name'))}: "
                    "persistentVolumeClaim.claimName is required"
                )
            found.setdefault(name, PodClaim(name))
        elif volume.get("ephemeral") is not None:
            # ephemeral.GenericEphemeralVolume: the claim is named <pod>-<volume>.
            name = f"{pod_name}-{volume.get('name') or ''}"
            found.setdefault(name, PodClaim(name, ephemeral=True))
    return tuple(found.values())


def _list(value: object, what: str) -> list[Any]:
    """A JSON list field: [] when absent; anything else that is not a list is refused
    (iterating a string or a number would read it as something it is not)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list, not {type(value).__name__}")
    return value


# --- label selectors (a claim's spec.selector over PV labels) ---------------------------
# A claim's selector is matched against every PV each time its pod is planned: beyond
# this many requirements the claim is refused rather than letting one tenant's object
# cost seconds per cycle. No real claim comes near it (the API server sets no limit).
MAX_SELECTOR_REQUIREMENTS = 100


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
    labels = mapping(raw.get("matchLabels"))
    expressions = _list(raw.get("matchExpressions"), "matchExpressions")
    if len(labels) + len(expressions) > MAX_SELECTOR_REQUIREMENTS:
        raise ValueError(
            f"more than {MAX_SELECTOR_REQUIREMENTS} requirements; this scheduler refuses it "
            "(each would be matched against every PersistentVolume)"
        )
    reqs = [LabelRequirement(str(k), "In", frozenset({str(v)})) for k, v in labels.items()]
    for expr in expressions:
        if not isinstance(expr, Mapping):
            raise ValueError(f"matchExpressions: {shown(expr)} is not a requirement")
        operator = str(expr.get("operator") or "")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"label selector operator {shown(operator)} is not supported")
        values = frozenset(str(v) for v in _list(expr.get("values"), "values"))
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
    # The uid of the ownerReference with `controller: true` ("" when none): a generic
    # ephemeral volume's claim is the pod's only when the pod controls it
    # (kube-scheduler's ephemeral.VolumeIsForPod uses metav1.IsControlledBy).
    controller_uid: str = ""

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
    # What cannot be read (a claim of this class waits with it).
    problems: tuple[str, ...] = ()

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
    """A storage quantity in bytes; raises ValueError (QuantityError) when it is not a
    quantity of at least 0."""
    if value is None:
        return 0
    amount = parse_quantity(value)
    if amount < 0:
        raise QuantityError(f"quantity {shown(value)} is negative")
    return int(amount)


# core/v1 PersistentVolumeAccessMode values (ValidatePersistentVolumeClaimSpec and the
# PV's validation refuse any other).
ACCESS_MODES = frozenset({"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", READ_WRITE_ONCE_POD})


def _modes(raw: object) -> frozenset[str]:
    return frozenset(str(mode) for mode in raw) if isinstance(raw, list) else frozenset()


def _owner_refs(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    refs = meta.get("ownerReferences")
    return [mapping(ref) for ref in refs] if isinstance(refs, list) else []


def claim_from_api(obj: Mapping[str, Any]) -> ClaimInfo:
    """Never raises: a claim whose structure cannot be read keeps its identity and the
    reason as a problem."""
    try:
        return _claim_from_api(obj)
    except MALFORMED as error:
        meta = metadata(obj)
        name = str(meta.get("name") or "")
        return ClaimInfo(
            namespace=str(meta.get("namespace") or "default"),
            name=name,
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            problems=(f"persistentvolumeclaim {name!r} is malformed: {error}",),
        )


def _claim_from_api(obj: Mapping[str, Any]) -> ClaimInfo:
    meta = metadata(obj)
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    spec = mapping(mapping(obj).get("spec"))
    problems: list[str] = []
    request = 0
    selector = None
    try:
        request = _bytes(mapping(mapping(spec.get("resources")).get("requests")).get("storage"))
    except MALFORMED as error:
        problems.append(f"persistentvolumeclaim {name!r}: storage request: {error}")
    try:
        selector = parse_label_selector(spec.get("selector"))
    except MALFORMED as error:
        problems.append(f"persistentvolumeclaim {name!r}: selector: {error}")
    modes = _modes(spec.get("accessModes"))
    if modes - ACCESS_MODES:
        problems.append(
            f"persistentvolumeclaim {name!r}: access modes {shown(sorted(modes - ACCESS_MODES))} "
            f"are not among {sorted(ACCESS_MODES)}"
        )
    owners = _owner_refs(meta)
    klass = spec.get("storageClassName")
    annotations = mapping(meta.get("annotations"))
    return ClaimInfo(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        storage_class=None if klass is None else str(klass),
        volume_name=str(spec.get("volumeName") or ""),
        access_modes=modes,
        request_bytes=request,
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        selector=selector,
        selected_node=str(annotations.get(SELECTED_NODE_ANNOTATION) or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        owner_uids=tuple(str(ref.get("uid") or "") for ref in owners),
        problems=tuple(problems),
        controller_uid=next(
            (str(ref.get("uid") or "") for ref in owners if ref.get("controller") is True), ""
        ),
    )


def volume_from_api(obj: Mapping[str, Any]) -> VolumeInfo:
    """Never raises: a PV whose structure cannot be read keeps its name and a problem
    (no claim is given a PV with problems)."""
    try:
        return _volume_from_api(obj)
    except MALFORMED as error:
        meta = metadata(obj)
        name = str(meta.get("name") or "")
        return VolumeInfo(
            name=name,
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            problems=(f"persistentvolume {name!r} is malformed: {error}",),
        )


def _volume_from_api(obj: Mapping[str, Any]) -> VolumeInfo:
    meta = metadata(obj)
    name = str(meta.get("name") or "")
    spec = mapping(mapping(obj).get("spec"))
    problems: list[str] = []
    capacity = 0
    affinity = None
    try:
        capacity = _bytes(mapping(spec.get("capacity")).get("storage"))
    except MALFORMED as error:
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
    """Never raises: allowedTopologies that cannot be read are a problem of the class
    (its unbound claims wait with it rather than being provisioned anywhere)."""
    meta = metadata(obj)
    body = mapping(obj)
    name = str(meta.get("name") or "")
    terms: tuple[SelectorTerm, ...] | None = None
    problems: tuple[str, ...] = ()
    try:
        terms = _allowed_topologies(body.get("allowedTopologies"))
    except MALFORMED as error:
        problems = (f'storageclass "{name}": allowedTopologies: {error}',)
        terms = ()
    return ClassInfo(
        name=name,
        resource_version=str(meta.get("resourceVersion") or ""),
        provisioner=str(body.get("provisioner") or ""),
        binding_mode=str(body.get("volumeBindingMode") or IMMEDIATE),
        allowed_topologies=terms,
        problems=problems,
    )


def _allowed_topologies(raw: object) -> tuple[SelectorTerm, ...] | None:
    """TopologySelectorTerms (ORed; each term's matchLabelExpressions ANDed, each
    "label In values") as node selector terms; None when absent or empty. Raises
    ValueError on what StorageClass validation refuses (ValidateTopologySelectorTerm:
    a key and at least one value per expression)."""
    if not raw:
        return None
    terms: list[SelectorTerm] = []
    for term in _list(raw, "allowedTopologies"):
        if not isinstance(term, Mapping):
            raise ValueError(f"{shown(term)} is not a topology selector term")
        requirements = []
        for expr in _list(term.get("matchLabelExpressions"), "matchLabelExpressions"):
            if not isinstance(expr, Mapping):
                raise ValueError(f"{shown(expr)} is not a label expression")
            key = expr.get("key")
            values = _list(expr.get("values"), "values")
            if not isinstance(key, str) or not key or not values:
                raise ValueError(f"{shown(dict(expr))} needs a key and at least one value")
            requirements.append(Requirement(key, "In", tuple(str(v) for v in values)))
        terms.append(tuple(requirements))
    return tuple(terms)


# allocatable.count is an int32 that validation keeps at 0 or more (ValidateCSINode).
_MAX_ATTACH_COUNT = 2**31 - 1


def csinode_from_api(obj: Mapping[str, Any]) -> CSINodeInfo:
    meta = metadata(obj)
    limits: dict[str, int] = {}
    drivers = mapping(mapping(obj).get("spec")).get("drivers")
    for driver in drivers if isinstance(drivers, list) else ():
        driver = mapping(driver)
        count = mapping(driver.get("allocatable")).get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            # Clamped, not refused: the kubelet writes CSINodes, and a node with a
            # nonsensical count is safest read as attaching nothing (< 0) or no limit
            # that matters (huge).
            limits[str(driver.get("name") or "")] = min(max(count, 0), _MAX_ATTACH_COUNT)
    return CSINodeInfo(
        name=str(meta.get("name") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        limits=limits,
    )


_R = TypeVar("_R", ClaimInfo, VolumeInfo, ClassInfo, CSINodeInfo)


# --- the store --------------------------------------------------------------------------
def _older(stored: str, incoming: str) -> bool:
    """Whether `incoming` is a smaller decimal than `stored`, compared as text (by
    length, then digits) so that no length of version makes int() refuse it."""
    if not (stored.isascii() and stored.isdigit() and incoming.isascii() and incoming.isdigit()):
        return False
    old, new = stored.lstrip("0"), incoming.lstrip("0")
    return (len(new), new) < (len(old), old)


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
