"""VolumeBinding and VolumeRestrictions: what a pod's PersistentVolumeClaims allow.

Semantics are kube-scheduler's (framework/plugins/volumebinding, volumerestrictions),
in two steps, both pure:

1. `resolve_pod` (PreFilter), once per member per cycle, against the VolumeCache:
   a claim that does not exist or is being deleted, a bound claim whose PV does not
   exist, an unbound claim of an Immediate class (or of no class), a class that does
   not exist, a ReadWriteOncePod claim another pod uses: the pod waits with
   kube-scheduler's words. Otherwise each claim becomes a `VolumeNeed`: a bound claim,
   its PV's node affinity; an unbound WaitForFirstConsumer claim, the union of where a
   matching available PV can be used and where its class may provision one (its
   allowedTopologies; a class without a provisioner only binds static PVs), or the node
   named by its `volume.kubernetes.io/selected-node` annotation when one was chosen.
2. `VolumeBinding.filter` (Filter), per node, from the needs alone, so that answers
   memoize per pod shape like every other filter.

Gang-awareness, which no per-pod scheduler needs: a static PV is taken by one claim,
so `VolumeAssignment` (one per planning attempt) gives each member's unbound claims a
PV or provisioning on the node the planner proposes, never the same PV to two members;
a member whose claims cannot be served there is placed elsewhere. A ReadWriteOncePod
claim mounted by two pending members of one gang can serve only one: the others wait.
PVs chosen by a plan whose bind is still in flight are held in `VolumeCache` until the
PV's own event shows the claim, so the next gang cannot take them.

Not enforced (docs/kubernetes.md): CSI attach limits (NodeVolumeLimits), inline-volume
disk conflicts (GCE PD, EBS, RBD, iSCSI in `spec.volumes`), and free space of local
storage capacity tracking (CSIStorageCapacity).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.terms import Requirement, SelectorTerm
from cache.volumes import (
    READ_WRITE_ONCE_POD,
    ClaimInfo,
    ClassInfo,
    VolumeCache,
    VolumeInfo,
    VolumeNeed,
)
from policies.filters.node_affinity import terms_match
from policies.filters.node_volume_limits import NodeVolumeUse, overflowing_nodes, pod_csi_volumes

NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
IMMEDIATE_UNBOUND = "pod has unbound immediate PersistentVolumeClaims"
RWOP_CONFLICT = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)
PV_MISSING = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


def _on_node(name: str) -> tuple[SelectorTerm, ...]:
    return ((Requirement("metadata.name", "In", (name,), field=True),),)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A static PV that could bind an unbound claim."""

    name: str
    terms: tuple[SelectorTerm, ...] | None
    prebound: bool  # its claimRef already names the claim
    capacity: int


@dataclass(frozen=True, slots=True)
class ClaimOptions:
    """Where an unbound WaitForFirstConsumer claim can be served, best first."""

    claim: ClaimInfo
    candidates: tuple[Candidate, ...]
    # Where its class may provision a volume: None anywhere, () nowhere.
    provision: tuple[SelectorTerm, ...] | None


@dataclass(frozen=True, slots=True)
class Resolution:
    """One pod's claims resolved: a reason to wait, or its needs."""

    wait: str | None = None
    needs: tuple[VolumeNeed, ...] = ()
    unbound: tuple[ClaimOptions, ...] = ()


def _union(
    parts: Iterable[tuple[SelectorTerm, ...] | None],
) -> tuple[SelectorTerm, ...] | None:
    terms: list[SelectorTerm] = []
    for part in parts:
        if part is None:
            return None
        terms.extend(part)
    return tuple(terms)


def volume_fits_claim(volume: VolumeInfo, claim: ClaimInfo, klass: str) -> bool:
    """FindMatchingVolume's checks, node aside: an available PV of the claim's class,
    big enough, with the claim's access modes, volume mode and selector."""
    ref = volume.claim_ref
    if ref is not None and (
        ref.namespace != claim.namespace
        or ref.name != claim.name
        or (ref.uid and claim.uid and ref.uid != claim.uid)
    ):
        return False
    if volume.deleting or volume.problems or volume.storage_class != klass:
        return False
    if volume.phase in ("Released", "Failed"):
        return False
    if volume.capacity_bytes < claim.request_bytes:
        return False
    if not claim.access_modes <= volume.access_modes:
        return False
    if volume.volume_mode != claim.volume_mode:
        return False
    selector = claim.selector
    return selector is None or all(req.matches(volume.labels) for req in selector)


def claim_options(claim: ClaimInfo, klass: ClassInfo, volumes: VolumeCache) -> ClaimOptions:
    if claim.selected_node:
        # kube-scheduler: a claim whose node was selected is provisioned there or not
        # at all (a provisioner may already be working on it), and only if its class
        # may provision there (checkVolumeProvisions): a node a tenant wrote on its own
        # claim steers nothing its class forbids.
        here = _on_node(claim.selected_node)
        if not klass.provisions:
            return ClaimOptions(claim, (), ())
        allowed = klass.allowed_topologies
        if allowed is None:
            return ClaimOptions(claim, (), here)
        return ClaimOptions(claim, (), tuple(term + here[0] for term in allowed))
    found = [
        Candidate(
            volume.name,
            volume.node_affinity,
            volume.claim_ref is not None,
            volume.capacity_bytes,
        )
        for volume in volumes.volumes.values()
        if volume_fits_claim(volume, claim, klass.name)
        and volumes.held_for(volume.name) in (None, claim.key)
    ]
    # A PV pre-bound to the claim first, then the smallest that fits (as the PV
    # controller's matching does), then by name for a stable order.
    found.sort(key=lambda c: (not c.prebound, c.capacity, c.name))
    provision = klass.allowed_topologies if klass.provisions else ()
    if any(c.prebound for c in found):
        # A PV that names the claim is the claim's: nothing else will do.
        found = [c for c in found if c.prebound]
        provision = ()
    return ClaimOptions(claim, tuple(found), provision)


def resolve_pod(
    pod: PodInfo,
    volumes: VolumeCache,
    claim_users: Mapping[str, Sequence[str]] | None = None,
) -> Resolution:
    """The pod's claims against the cluster's volumes. `claim_users`: for claims with
    ReadWriteOncePod, the uids of the pods (bound or planned) using them."""
    needs: list[VolumeNeed] = []
    unbound: list[ClaimOptions] = []
    for ref in pod.claims:
        claim = volumes.claim(pod.namespace, ref.name)
        if claim is None:
            if ref.ephemeral:
                return Resolution(
                    wait="waiting for ephemeral volume controller to create the "
                    f'persistentvolumeclaim "{ref.name}"'
                )
            return Resolution(wait=f'persistentvolumeclaim "{ref.name}" not found')
        if claim.deleting:
            return Resolution(wait=f'persistentvolumeclaim "{ref.name}" is being deleted')
        if ref.ephemeral and claim.controller_uid != pod.uid:
            return Resolution(
                wait=f"PVC {claim.key} was not created for pod {pod.key} (pod is not owner)"
            )
        if claim.problems:
            return Resolution(wait="; ".join(claim.problems))
        users = claim_users.get(claim.key, ()) if claim_users is not None else ()
        if READ_WRITE_ONCE_POD in claim.access_modes and any(u != pod.uid for u in users):
            return Resolution(wait=RWOP_CONFLICT)
        if claim.volume_name:
            volume = volumes.volumes.get(claim.volume_name)
            if volume is None:
                return Resolution(wait=PV_MISSING)
            if volume.problems:
                # Its node affinity may be what could not be read: placing the pod
                # anywhere could put it where the volume cannot be reached.
                return Resolution(wait="; ".join(volume.problems))
            needs.append(VolumeNeed(claim.key, True, volume.node_affinity))
            continue
        class_name = claim.storage_class or ""
        klass = volumes.classes.get(class_name) if class_name else None
        if class_name and klass is None:
            return Resolution(wait=f'storageclass.storage.k8s.io "{class_name}" not found')
        if klass is not None and klass.problems:
            return Resolution(wait="; ".join(klass.problems))
        if klass is None or not klass.delays_binding:
            return Resolution(wait=IMMEDIATE_UNBOUND)
        options = claim_options(claim, klass, volumes)
        unbound.append(options)
        usable = _union([*(c.terms for c in options.candidates), options.provision])
        needs.append(VolumeNeed(claim.key, False, usable))
    return Resolution(needs=tuple(needs), unbound=tuple(unbound))


class VolumeBinding:
    """Every claim of the pod can be used on the node (its resolved `volume_needs`)."""

    name: str = "volume-binding"

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        for need in pod.volume_needs:
            terms = need.terms
            if terms is not None and not terms_match(terms, node):
                return NODE_CONFLICT if need.bound else BIND_CONFLICT
        return None


# --- a gang's claims --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClaimChoice:
    """What PreBind writes for one unbound claim: bind it to `volume` (a static PV), or
    let its provisioner create one for `node` (`volume` "")."""

    claim: ClaimInfo
    node: str
    volume: str = ""


@dataclass(frozen=True)
class GangVolumes:
    """What a gang's members need of volumes beyond one node's filters, for the
    planner: their unbound claims, and their CSI volumes where attach limits apply."""

    # pod uid -> its unbound WaitForFirstConsumer claims
    options: Mapping[str, tuple[ClaimOptions, ...]] = field(default_factory=dict)
    # pod uid -> its CSI volumes (key -> driver) where some node limits the driver
    attachments: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # node -> its attach limits and the volumes attached there
    limits: Mapping[str, NodeVolumeUse] = field(default_factory=dict)

    def concerns(self, uid: str) -> bool:
        """Whether the member's node must be admitted by a VolumeAssignment."""
        return uid in self.options or (bool(self.limits) and uid in self.attachments)

    def __bool__(self) -> bool:
        return bool(self.options) or bool(self.limits and self.attachments)


@dataclass(frozen=True)
class VolumeOffer:
    """What `VolumeAssignment.offer` would give one member on one node."""

    pod_uid: str
    node: str
    claims: tuple[ClaimOptions, ...]  # the member's unbound claims
    new: tuple[ClaimChoice, ...]  # the choices it adds (claims no member got before)
    attaching: Mapping[str, str]  # CSI volume key -> driver, where the node has limits


@dataclass
class VolumeAssignment:
    """The volumes of one planning attempt: `admit` gives a member's unbound claims a
    PV or provisioning on the proposed node, and checks the node's attach limits with
    the volumes the gang's members placed there already; or says no. A PV goes to one
    claim, and a claim several members mount is served once."""

    gang: GangVolumes
    taken: dict[str, str] = field(default_factory=dict)  # PV -> claim key
    chosen: dict[str, ClaimChoice] = field(default_factory=dict)  # claim key -> choice
    by_pod: dict[str, tuple[ClaimChoice, ...]] = field(default_factory=dict)
    # node -> driver -> CSI volume keys the gang's members attach there
    attached: dict[str, dict[str, set[str]]] = field(default_factory=dict)

    def admit(self, pod: PodInfo, node: NodeInfo) -> bool:
        """Give the member its volumes on `node` and record them, or say no."""
        offer = self.offer(pod, node)
        if offer is None:
            return False
        self.take(offer)
        return True

    def offer(self, pod: PodInfo, node: NodeInfo) -> VolumeOffer | None:
        """The member's volumes on `node`, given what the members before it took, not
        yet recorded (`take` records them): the planner asks every kind of choice a
        member needs before it records any. None when `node` cannot serve them."""
        new_volumes = self.gang.attachments.get(pod.uid, {})
        use = self.gang.limits.get(node.name)
        added = self.attached.get(node.name)
        if use is not None and new_volumes and use.overflows(new_volumes, added):
            return None
        claims = self.gang.options.get(pod.uid, ())
        new = self._new_choices(claims, node) if claims else ()
        if new is None:
            return None
        attaching = new_volumes if use is not None else {}
        return VolumeOffer(pod.uid, node.name, claims, new, attaching)

    def take(self, offer: VolumeOffer) -> None:
        """Record what `offer` gives its member."""
        for choice in offer.new:
            self.chosen[choice.claim.key] = choice
            if choice.volume:
                self.taken[choice.volume] = choice.claim.key
        if offer.claims:
            self.by_pod[offer.pod_uid] = tuple(self.chosen[o.claim.key] for o in offer.claims)
        if offer.attaching:
            here = self.attached.setdefault(offer.node, {})
            for key, driver in offer.attaching.items():
                here.setdefault(driver, set()).add(key)

    def _new_choices(
        self, claims: tuple[ClaimOptions, ...], node: NodeInfo
    ) -> tuple[ClaimChoice, ...] | None:
        """The choices the member's claims add on `node` (claims another member got
        already must be usable there), or None when one cannot be served."""
        new: list[ClaimChoice] = []
        for options in claims:
            choice = self.chosen.get(options.claim.key) or next(
                (c for c in new if c.claim.key == options.claim.key), None
            )
            if choice is not None:
                if not self._usable(options, choice, node):
                    return None
                continue
            choice = self._choose(options, node, {c.volume for c in new if c.volume})
            if choice is None:
                return None
            new.append(choice)
        return tuple(new)

    def _choose(
        self, options: ClaimOptions, node: NodeInfo, pending: set[str]
    ) -> ClaimChoice | None:
        for candidate in options.candidates:
            if candidate.name in self.taken or candidate.name in pending:
                continue
            if candidate.terms is None or terms_match(candidate.terms, node):
                return ClaimChoice(options.claim, node.name, candidate.name)
        provision = options.provision
        if provision is None or (provision and terms_match(provision, node)):
            return ClaimChoice(options.claim, node.name)
        return None

    @staticmethod
    def _usable(options: ClaimOptions, choice: ClaimChoice, node: NodeInfo) -> bool:
        """A claim another member already got: this member must reach the same volume."""
        if choice.volume:
            terms = next((c.terms for c in options.candidates if c.name == choice.volume), None)
            return terms is None or terms_match(terms, node)
        provision = options.provision
        return provision is None or (bool(provision) and terms_match(provision, node))


def claims_with_single_user(pods: Iterable[PodInfo], volumes: VolumeCache) -> set[str]:
    """Keys of the ReadWriteOncePod claims the pods mount (those worth indexing)."""
    keys: set[str] = set()
    for pod in pods:
        for ref in pod.claims:
            claim = volumes.claim(pod.namespace, ref.name)
            if claim is not None and READ_WRITE_ONCE_POD in claim.access_modes:
                keys.add(claim.key)
    return keys


def claim_users(pods: Iterable[PodInfo], keys: set[str]) -> dict[str, list[str]]:
    """For each claim key of `keys`, the uids of the pods among `pods` mounting it."""
    users: dict[str, list[str]] = {}
    if not keys:
        return users
    for pod in pods:
        for ref in pod.claims:
            key = f"{pod.namespace}/{ref.name}"
            if key in keys:
                users.setdefault(key, []).append(pod.uid)
    return users


def resolve_members(
    pending: Sequence[PodInfo],
    volumes: VolumeCache,
    users: Mapping[str, Sequence[str]],
    limits: Mapping[str, NodeVolumeUse] | None = None,
) -> tuple[list[PodInfo], GangVolumes]:
    """A gang's pending members with their claims resolved: each member carries its
    `volume_needs` and `volume_limited`, or a problem (the reason it waits) and is set
    aside by the planner; plus what the planner must assign across members. `users`:
    pods outside the gang (bound or planned) using ReadWriteOncePod claims; `limits`:
    the attach limits and attached volumes of nodes (node_volume_limits). Among the
    members, the first (in the given order) to mount a ReadWriteOncePod claim keeps it;
    the others wait."""
    members: list[PodInfo] = []
    options: dict[str, tuple[ClaimOptions, ...]] = {}
    attachments: dict[str, dict[str, str]] = {}
    taken: dict[str, list[str]] = {key: list(uids) for key, uids in users.items()}
    for pod in pending:
        if not pod.claims or pod.problems:
            members.append(pod)
            continue
        resolution = resolve_pod(pod, volumes, taken)
        if resolution.wait is not None:
            members.append(replace(pod, problems=(resolution.wait,)))
            continue
        for ref in pod.claims:
            key = f"{pod.namespace}/{ref.name}"
            claim = volumes.claims.get(key)
            if claim is not None and READ_WRITE_ONCE_POD in claim.access_modes:
                taken.setdefault(key, []).append(pod.uid)
        limited: frozenset[str] = frozenset()
        if limits:
            csi = pod_csi_volumes(pod, volumes)
            if csi:
                attachments[pod.uid] = csi
                limited = overflowing_nodes(csi, limits)
        members.append(replace(pod, volume_needs=resolution.needs, volume_limited=limited))
        if resolution.unbound:
            options[pod.uid] = resolution.unbound
    return members, GangVolumes(options, attachments, limits or {})
