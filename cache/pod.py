"""Slim pod records built from the API's JSON, with requests summed as kube-scheduler does."""

from __future__ import annotations

import re
import sys
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cache import resources as res
from cache import unsupported
from cache.extended_requests import ContainerExtended, container_extended, is_dra_extended_name
from cache.gpu import (
    ASSIGNMENT_ANNOTATION,
    NO_GPU,
    SIGNATURE_ANNOTATION,
    DeviceShares,
    GpuRequest,
    gpu_request,
    parse_assignment,
)
from cache.jsonobj import MALFORMED, mapping, metadata, object_uid, text_field
from cache.kueue_topology import kueue_topology
from cache.limits import MAX_INT32, MIN_INT32, shown
from cache.pod_claims import PodResourceClaim, claim_statuses, pod_resource_claims
from cache.ports import HostPort, parse_host_ports
from cache.preferences import PreferredTerm, parse_preferred_affinity
from cache.shared_values import shared_mapping, shared_tuple
from cache.terms import (
    PodAffinity,
    SelectorTerm,
    SpreadConstraint,
    Toleration,
    parse_pod_affinity,
    parse_required_affinity,
    parse_spread_constraints,
    parse_tolerations,
)
from cache.topology_requirement import TopologyRequirement
from cache.volcano_tiers import DEFAULT_VOLCANO_TIERS, VolcanoTiers
from cache.volumes import PodClaim, VolumeNeed, pod_claims
from cache.workload_labels import infer_gang

GANG_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GANG_ANNOTATION = "scheduling.k8s.io/group-name"
# KAI-Scheduler's pod-grouper names the pod's PodGroup (scheduling.run.ai) here.
KAI_GANG_ANNOTATION = "pod-group-name"
MIN_MEMBER_ANNOTATION = "gang-scheduler.io/min-member"
# A member's role (parameter server, worker, launcher): the Kubeflow training operator's
# replica-type label by default; the least members per role come from this annotation.
ROLE_LABEL = "training.kubeflow.org/replica-type"
MIN_ROLE_MEMBERS_ANNOTATION = "gang-scheduler.io/min-role-members"
# Kueue's plain-pod groups: the group's name (label) and its size (annotation), written
# alike on every member; read where our own keys are absent (docs/integrations.md).
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
DEFAULT_SCHEDULER = "default-scheduler"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_GROUP_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# An object name (DNS subdomain): what a PodGroup of scheduling.k8s.io may be called.
_OBJECT_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


# The hash of NodeScores: the sum of its entries' hashes, modulo 2^64, so that a caller
# keeping scores across calls (scheduler/planner/dra_reach.py) adds and removes entries
# instead of hashing thousands of them again.
SCORES_HASH_MODULUS = 1 << 64


def score_hash(node: str, score: float) -> int:
    """One entry's part of the NodeScores hash."""
    return hash((node, score))


class NodeScores:
    """node name -> a score, hashable by value (a pod's shape includes it) with the
    hash computed once: members of one template share equal ones. `digest`: the hash
    when the caller kept it (the sum of `score_hash` over the entries, modulo
    SCORES_HASH_MODULUS)."""

    __slots__ = ("_hash", "by_node")

    def __init__(self, by_node: Mapping[str, float], digest: int | None = None) -> None:
        self.by_node: Mapping[str, float] = dict(by_node)
        if digest is None:
            digest = sum(score_hash(n, s) for n, s in self.by_node.items())
        self._hash = digest % SCORES_HASH_MODULUS

    def get(self, node: str, default: float) -> float:
        return self.by_node.get(node, default)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeScores) and (
            self is other or (self._hash == other._hash and self.by_node == other.by_node)
        )

    def __repr__(self) -> str:
        return f"NodeScores({len(self.by_node)} nodes)"


@dataclass(frozen=True)
class GangKeys:
    """Where a pod names its gang and the gang's size (the scheduler's `gang.*` options:
    a cluster still on scheduler-plugins' older `pod-group.scheduling.sigs.k8s.io`
    label, say)."""

    label: str = GANG_LABEL
    group_annotation: str = VOLCANO_GANG_ANNOTATION
    min_member_annotation: str = MIN_MEMBER_ANNOTATION
    role_label: str = ROLE_LABEL
    min_role_members_annotation: str = MIN_ROLE_MEMBERS_ANNOTATION
    kueue_label: str = KUEUE_GROUP_LABEL
    kueue_count_annotation: str = KUEUE_TOTAL_COUNT_ANNOTATION
    # Namespaces whose pods get a gang from their controller's labels when they name
    # none ("*": all; cache/workload_labels.py). Empty: no inference (the default).
    infer_namespaces: frozenset[str] = frozenset()
    # Volcano's networkTopology tiers as node label keys (the scheduler's
    # topology.volcanoTiers), read with Volcano's PodGroups (cache/volcano.py).
    volcano_tiers: VolcanoTiers = DEFAULT_VOLCANO_TIERS

    def infers(self, namespace: str) -> bool:
        return bool(self.infer_namespaces) and (
            namespace in self.infer_namespaces or "*" in self.infer_namespaces
        )


DEFAULT_GANG_KEYS = GangKeys()


@dataclass(slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    resource_version: str = ""
    scheduler_name: str = DEFAULT_SCHEDULER
    node_name: str = ""
    phase: str = "Pending"
    priority: int = 0
    created: float = 0.0
    deleting: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)
    gpu: GpuRequest = NO_GPU
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_affinity: tuple[SelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    gang_name: str | None = None
    # Host ports of the regular containers (cache.ports; hostNetwork implies them).
    host_ports: tuple[HostPort, ...] = ()
    # preferredDuringSchedulingIgnoredDuringExecution node affinity, weight above 0.
    preferred_affinity: tuple[PreferredTerm, ...] = ()
    min_member_text: str | None = None
    assignment: DeviceShares | None = None
    # Why this pod cannot be scheduled as written (malformed request, refused GPU
    # shape, ...). A pending pod with problems is refused with these messages.
    problems: tuple[str, ...] = ()
    # Inter-pod affinity and anti-affinity terms (None: none) and topology spread
    # constraints, resolved against this pod's namespace and labels (cache.terms).
    pod_affinity: PodAffinity | None = None
    spread: tuple[SpreadConstraint, ...] = ()
    # The PersistentVolumeClaims the pod mounts, in its namespace (cache.volumes.
    # pod_claims): named ones and those of its generic ephemeral volumes.
    claims: tuple[PodClaim, ...] = ()
    # What the pod's claims allow, resolved against the cluster's volumes just before
    # the pod is planned (policies.filters.volume_binding); () for a pod without claims.
    volume_needs: tuple[VolumeNeed, ...] = ()
    # Nodes where this pod's CSI volumes would exceed the driver's attach limit
    # (policies.filters.node_volume_limits), resolved with its claims.
    volume_limited: frozenset[str] = frozenset()
    # spec.schedulingGates by name: while any is left the pod is not ready to be
    # scheduled, and the API server refuses its binding.
    scheduling_gates: tuple[str, ...] = ()
    # The scheduler's signature on `assignment` (cache.gpu.sign_assignment), as written
    # on the pod; the cache verifies it before it charges the assignment as written.
    assignment_signature: str | None = None
    # The per-role minimums annotation as written ("ps=1,worker=4"; scheduler/gangs/roles.py).
    min_role_members_text: str | None = None
    # The annotation `min_member_text` was read from, when not the configured one
    # (Kueue's total count), so that messages name the key the user wrote.
    min_member_key: str | None = None
    # spec.preemptionPolicy (the API server copies it from the PriorityClass):
    # "Never" means this pod's gang never evicts others (scheduler/sharing/preemption.py).
    preemption_policy: str = "PreemptLowerPriority"
    # spec.resourceClaims (DRA) and status.resourceClaimStatuses: pod claim name -> the
    # ResourceClaim the controller made from its template ("" when none was needed).
    resource_claims: tuple[PodResourceClaim, ...] = ()
    claim_statuses: Mapping[str, str] = field(default_factory=dict)
    # Per container, its requests of resources a DeviceClass may stand for
    # (cache/extended_requests.py); () for a pod that asks for none.
    extended_containers: tuple[ContainerExtended, ...] = ()
    # The resources the pod asks for that a DeviceClass provides through DRA
    # (spec.extendedResourceName, or the implicit deviceclass.resource.kubernetes.io/
    # name), resolved just before the pod is planned: on a node that does not advertise
    # such a resource as allocatable, DRA serves it (scheduler/planner/dra_claims.py)
    # and the resource filters leave it alone.
    dra_extended: frozenset[str] = frozenset()
    # Where the pod's DRA claims can be allocated (each alone, against the devices
    # others hold) and the filter's words for the other nodes, resolved just before the
    # pod is planned (scheduler/planner/dra_claims.py); None for a pod without claims.
    dra_reach: tuple[frozenset[str], str] | None = None
    # How tight a device set each of those nodes gives the pod's claims, 0..100
    # (policies/dra/topology.py), for the gpu-topology score; resolved with
    # `dra_reach`. None (or a node it does not name): neutral.
    dra_topology: NodeScores | None = None
    # Where the pod's gang may run, as the pod's own annotations state it (Kueue's TAS
    # annotations, cache/kueue_topology.py); None: they state nothing, or what they
    # state cannot be followed (then `problems` says why). The gang's requirement
    # merges its members' with its PodGroup's (cache/gang_topology.py).
    topology: TopologyRequirement | None = None
    # The GPUs this pod's one DRA claim holds when that claim is a GPU demand
    # (cache/dra/gpu_shares.py), set by the core when it places the pod and kept
    # across updates of the pod while its claims stay the same. Never charged to a
    # node here (the DRA cache holds those devices): read where what pods hold is
    # counted by model (policies/model_reserve.py).
    claim_gpu: GpuRequest = NO_GPU

    @property
    def held_gpu(self) -> GpuRequest:
        """The GPUs the pod holds on its node: its own request, else its claim's."""
        return self.gpu if self.gpu.count else self.claim_gpu

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gang_key(self) -> str:
        """The learning task this pod belongs to; a pod with no gang is a gang of one."""
        if self.gang_name:
            return f"{self.namespace}/{self.gang_name}"
        return f"{self.namespace}/pod:{self.name}"

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

    @property
    def consumes_resources(self) -> bool:
        return bool(self.node_name) and self.phase not in TERMINAL_PHASES

    def placement_signature(self) -> Hashable:
        """Equal for pods that any placement treats alike (members of one template)."""
        return (
            self.node_signature(),
            # Terms of their own make pods different shapes; spread counts pods of the
            # pod's namespace, so the namespace matters then too.
            self.pod_affinity,
            self.spread,
            self.namespace if self.spread else "",
        )

    def node_signature(self) -> Hashable:
        """Equal for pods that every node filter and node score treats alike: what
        answers kept per node (filter memo, rankings) may be shared by. Inter-pod
        terms are judged apart, on top of those answers, so they are left out."""
        return (*self.choice_signature(), self.dra_reach)

    def filter_signature(self) -> tuple[Hashable, ...]:
        """`choice_signature` without the devices' topology scores, which no filter
        reads: what the filter memo (policies/diagnosis.FilterMemo) keeps answers by.
        The DRA reach, which changes with every gang that takes devices, is judged on
        top of the kept answers (DynamicResources.kept_by_signature), so that DRA
        gangs of one shape share them."""
        return (*self._filtered_fields(), self.dra_extended)

    def choice_signature(self) -> tuple[Hashable, ...]:
        """`node_signature` without the DRA reach, which only the DynamicResources
        filter reads: equal for pods whose device choice and node scores on a node are
        alike (scheduler/planner/node_choice.KeptChoices keeps choices by it, so that
        DRA gangs of one shape share them although each sees the reach of its time, as
        long as the devices' topology scores, `dra_topology`, are alike)."""
        return (
            *self._filtered_fields(),
            # The gpu-topology score reads it (one score per node the pod's devices
            # fit): choices scored with other scores are other choices.
            self.dra_topology,
            self.dra_extended,
        )

    def _filtered_fields(self) -> tuple[Hashable, ...]:
        return (
            tuple(sorted(self.requests.items())),
            self.host_ports,
            self.preferred_affinity,
            self.gpu,
            tuple(sorted(self.node_selector.items())),
            self.required_affinity,
            self.tolerations,
            self.volume_needs,
            self.volume_limited,
        )

    @property
    def has_pod_constraints(self) -> bool:
        """Whether the pod carries inter-pod affinity terms or spread constraints."""
        return self.pod_affinity is not None or bool(self.spread)


def parse_time(text: object) -> float:
    """RFC 3339 timestamp to epoch seconds; 0.0 when absent or malformed."""
    if not isinstance(text, str) or not text:
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _container_requests(container: Mapping[str, Any]) -> res.Resources:
    spec = container.get("resources") or {}
    # The API server defaults a missing request to its limit; do the same so that
    # objects built by hand (tests, simulator) behave as stored ones do.
    merged = dict(spec.get("limits") or {})
    merged.update(spec.get("requests") or {})
    return res.parse_resource_list(merged)


def pod_requests(spec: Mapping[str, Any]) -> res.Resources:
    """Effective requests as kube-scheduler computes them (resourcehelper.PodRequests).

    Regular containers are summed; restartable init containers (sidecars) run beside
    them and add to the sum; each ordinary init container runs alone with the sidecars
    started before it, so the pod needs the larger of the two phases; overhead adds on.
    """
    running = res.total_of(_container_requests(c) for c in spec.get("containers") or ())
    sidecars: res.Resources = {}
    init_peak: res.Resources = {}
    for container in spec.get("initContainers") or ():
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            res.add(sidecars, requests)
            init_peak = res.maximum(init_peak, sidecars)
        else:
            phase = dict(requests)
            res.add(phase, sidecars)
            init_peak = res.maximum(init_peak, phase)
    res.add(running, sidecars)
    total = res.maximum(running, init_peak)
    total.update(_pod_level_requests(spec))
    res.add(total, res.parse_resource_list(spec.get("overhead")))
    return {name: amount for name, amount in total.items() if amount}


def _is_pod_level_resource(name: str) -> bool:
    return name in (res.CPU, res.MEMORY) or name.startswith("hugepages-")


def _pod_level_requests(spec: Mapping[str, Any]) -> res.Resources:
    """Pod-level `spec.resources` (PodLevelResources): for cpu, memory and hugepages
    the pod's own request replaces its containers' sum, as kube-scheduler computes it
    (component-helpers resource.PodRequests). A limit with no request is the request,
    as the API server defaults it."""
    level = spec.get("resources")
    if not level:
        return {}  # most pods: no pod-level resources (parsed on every pod event)
    limits, requests = _object_field(level, "limits"), _object_field(level, "requests")
    merged = dict(limits)
    merged.update(requests)
    wanted = {name: value for name, value in merged.items() if _is_pod_level_resource(name)}
    return res.parse_resource_list(wanted)


def _object_field(level: object, name: str) -> Mapping[str, Any]:
    """`spec.resources.<name>` of a pod, refused by name when it is not an object."""
    if not isinstance(level, Mapping):
        raise ValueError("spec.resources must be an object with requests and limits")
    value = level.get(name) or {}
    if not isinstance(value, Mapping):
        raise ValueError(f"spec.resources.{name} must be an object of quantities")
    return value


def _may_ask_extended(requests: Mapping[str, int]) -> bool:
    """Whether the pod asks for a resource a DeviceClass may stand for (only then are
    its containers read again, per container)."""
    return any(amount > 0 and is_dra_extended_name(name) for name, amount in requests.items())


def pod_from_api(
    obj: Mapping[str, Any], share_milli: int = 1, keys: GangKeys = DEFAULT_GANG_KEYS
) -> PodInfo:
    """Build a PodInfo from a pod's JSON, `nvidia.com/vgpu` counted in milli of a GPU
    (`share_milli` milli a unit; resources.shares_in_milli). Never raises on a user's
    values: what cannot be read becomes a problem message on the record (a pod whose
    very structure is broken keeps only its identity, and is refused with the reason).
    `keys` say where the gang and its size are read from."""
    try:
        return _parse_pod(obj, share_milli, keys)
    except MALFORMED as error:
        meta = metadata(obj)
        spec = mapping(mapping(obj).get("spec"))
        return PodInfo(
            uid=object_uid(obj),
            namespace=text_field(meta, "namespace", 253, "default"),
            name=text_field(meta, "name", 253),
            resource_version=text_field(meta, "resourceVersion", 128),
            scheduler_name=text_field(spec, "schedulerName", 253, DEFAULT_SCHEDULER),
            problems=(f"the pod object is malformed ({type(error).__name__}: {error})",),
        )


def _priority(value: object, problems: list[str]) -> int:
    """spec.priority, an int32 the API server sets from the PriorityClass; anything else
    is refused (a priority of 10^5000 would also sort before every other gang)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_INT32 <= value <= MAX_INT32:
        problems.append(f"spec.priority {shown(value)} is not a 32-bit integer")
        return 0
    return value


def _parse_pod(obj: Mapping[str, Any], share_milli: int, keys: GangKeys) -> PodInfo:
    meta = metadata(obj)
    spec = mapping(obj.get("spec"))
    status = mapping(obj.get("status"))
    # Label keys and values are strings in the API; read them as such whatever came.
    # Pods of one workload hold one label dict, and all pods one string per key
    # (cache/shared_values.py: memory at 150,000 pods).
    labels = shared_mapping(
        {sys.intern(str(k)): str(v) for k, v in (meta.get("labels") or {}).items()}
    )
    annotations = meta.get("annotations") or {}
    node_name = sys.intern(str(spec.get("nodeName") or ""))
    problems: list[str] = []
    if not meta.get("name"):
        problems.append("the pod has no metadata.name; it cannot be bound")

    requests: res.Resources = {}
    gpu = NO_GPU
    try:
        requests = shared_mapping(res.shares_in_milli(pod_requests(spec), share_milli))
        gpu = gpu_request(requests, share_milli)
    except ValueError as error:
        problems.append(str(error))

    preferred: tuple[PreferredTerm, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    # Apart: a bound pod's host ports are charged on its node even when its
    # preferences cannot be read.
    # Optional fields are read only when present: every parser treats a missing or
    # empty value as "none", and skipping the call saves ~10% of a pod event's cost
    # (docs/benchmarks.md, "Cycle cost: nodes x gang size").
    raw_affinity = spec.get("affinity")
    if raw_affinity:
        try:
            preferred = parse_preferred_affinity(raw_affinity)
        except ValueError as error:
            problems.append(str(error))
    try:
        host_ports = parse_host_ports(spec)
    except ValueError as error:
        problems.append(str(error))

    affinity = None
    tolerations: tuple[Toleration, ...] = ()
    raw_tolerations = spec.get("tolerations")
    if raw_affinity or raw_tolerations:
        try:
            affinity = parse_required_affinity(raw_affinity)
            tolerations = shared_tuple(parse_tolerations(raw_tolerations))
        except ValueError as error:
            problems.append(str(error))
    namespace = sys.intern(str(meta.get("namespace") or "default"))
    pod_affinity = None
    spread: tuple[SpreadConstraint, ...] = ()
    raw_spread = spec.get("topologySpreadConstraints")
    if raw_affinity or raw_spread:
        try:
            pod_affinity = parse_pod_affinity(raw_affinity, namespace, labels)
            spread = parse_spread_constraints(raw_spread, labels)
        except ValueError as error:
            problems.append(str(error))

    assignment = None
    # A value written before the pod was bound came from a user, not from a
    # scheduler's bind: it is never trusted. One on a bound pod counts only with the
    # scheduler's signature (ClusterCache verifies it; docs/security.md).
    signature = annotations.get(SIGNATURE_ANNOTATION)
    if node_name and ASSIGNMENT_ANNOTATION in annotations:
        try:
            assignment = parse_assignment(str(annotations[ASSIGNMENT_ANNOTATION]))
        except ValueError as error:
            problems.append(str(error))

    priority = _priority(spec.get("priority"), problems)
    gang_name = labels.get(keys.label) or annotations.get(keys.group_annotation) or None
    if gang_name is not None and not _GROUP_NAME.match(str(gang_name)):
        # Label values are validated by the API server; an annotation is not, and a
        # name with "/" or ":" could collide with another gang's key.
        problems.append(
            f"annotation {keys.group_annotation}: {gang_name!r} is not a valid group name "
            "(up to 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric)"
        )
        gang_name = None
    if gang_name is None:
        # Label values are validated by the API server, so no check as above.
        gang_name = labels.get(keys.kueue_label) or None
    if gang_name is None:
        gang_name = _scheduling_group(spec, problems)
    if gang_name is None and annotations.get(KAI_GANG_ANNOTATION) is not None:
        gang_name = _kai_group(annotations[KAI_GANG_ANNOTATION], problems)
    inferred = None
    if gang_name is None and keys.infers(namespace):
        inferred = infer_gang(labels, mapping(annotations), meta.get("ownerReferences"))
        gang_name = inferred.name if inferred is not None else None
    problems.extend(unsupported.unsupported_fields(spec, in_gang=gang_name is not None))
    topology = None
    if annotations:
        problems.extend(unsupported.unsupported_annotations(mapping(annotations)))
        topology, refused = kueue_topology(mapping(annotations))
        problems.extend(refused)
    min_member = annotations.get(keys.min_member_annotation)
    min_member_key = None
    if min_member is None and inferred is not None and inferred.size_text is not None:
        # The size the controller wrote on the pod (LeaderWorkerSet's group size).
        min_member, min_member_key = inferred.size_text, inferred.size_key
    if min_member is None and annotations.get(keys.kueue_count_annotation) is not None:
        min_member = annotations[keys.kueue_count_annotation]
        min_member_key = keys.kueue_count_annotation
    claims: tuple[PodClaim, ...] = ()
    volumes = spec.get("volumes")
    if volumes:
        try:
            claims = pod_claims(str(meta.get("name") or ""), volumes)
        except ValueError as error:
            problems.append(str(error))
    resource_claims: tuple[PodResourceClaim, ...] = ()
    statuses: Mapping[str, str] = {}
    raw_claims = spec.get("resourceClaims")
    if raw_claims:
        try:
            resource_claims = pod_resource_claims(raw_claims)
        except MALFORMED as error:
            problems.append(str(error))
        statuses = claim_statuses(status.get("resourceClaimStatuses"))
    gates = spec.get("schedulingGates")
    return PodInfo(
        uid=object_uid(obj),
        namespace=namespace,
        name=str(meta.get("name") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        scheduler_name=sys.intern(str(spec.get("schedulerName") or DEFAULT_SCHEDULER)),
        node_name=node_name,
        phase=sys.intern(str(status.get("phase") or "Pending")),
        priority=priority,
        created=parse_time(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        labels=labels,
        requests=requests,
        gpu=gpu,
        node_selector=shared_mapping(
            {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
        ),
        required_affinity=affinity,
        tolerations=tolerations,
        host_ports=host_ports,
        preferred_affinity=preferred,
        gang_name=str(gang_name) if gang_name else None,
        min_member_text=str(min_member) if min_member is not None else None,
        assignment=assignment,
        problems=tuple(problems),
        pod_affinity=pod_affinity,
        spread=spread,
        claims=claims,
        scheduling_gates=_gate_names(gates) if gates else (),
        assignment_signature=signature if isinstance(signature, str) else None,
        min_member_key=min_member_key,
        min_role_members_text=(
            str(annotations[keys.min_role_members_annotation])
            if annotations.get(keys.min_role_members_annotation) is not None
            else None
        ),
        preemption_policy=sys.intern(str(spec.get("preemptionPolicy") or "PreemptLowerPriority")),
        resource_claims=resource_claims,
        claim_statuses=shared_mapping(statuses),
        topology=topology,
        extended_containers=container_extended(spec) if _may_ask_extended(requests) else (),
    )


def _kai_group(name: object, problems: list[str]) -> str | None:
    """The KAI PodGroup the pod names (an object name: no "/" or ":" that could collide
    with another gang's key)."""
    if isinstance(name, str) and _OBJECT_NAME.match(name):
        return name
    problems.append(
        f"annotation {KAI_GANG_ANNOTATION}: {shown(name)} is not a valid PodGroup name "
        "(a DNS subdomain: lower-case letters, digits, '-' and '.')"
    )
    return None


def _scheduling_group(spec: Mapping[str, Any], problems: list[str]) -> str | None:
    """The gang named by Kubernetes' own field `spec.schedulingGroup.podGroupName`
    (1.36, cache/native_gang.py), read where no label or annotation names one. The API
    server validates it as an object name (a DNS subdomain); anything else is refused,
    as a name with "/" or ":" could collide with another gang's key."""
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, Mapping) else None
    if name is None:
        return None
    if not isinstance(name, str) or not _OBJECT_NAME.match(name):
        problems.append(
            f"spec.schedulingGroup.podGroupName: {shown(name)} is not a valid object name"
        )
        return None
    return name


def _gate_names(gates: object) -> tuple[str, ...]:
    """Names of spec.schedulingGates; a gate we cannot read still gates the pod (the
    API server would refuse its binding all the same)."""
    if not isinstance(gates, list | tuple):
        return ("(unreadable)",) if gates else ()
    return tuple(str(mapping(gate).get("name") or "(unnamed)") for gate in gates)
