"""The resource types the emulator serves, with the per-type rules the API applies.

Each flag mirrors the registry strategy of the real type (cited where it matters):
- pods: `AllowCreateOnUpdate` false, `AllowUnconditionalUpdate` true, status subresource,
  field selectors from `pod.ToSelectableFields` (pkg/registry/core/pod/strategy.go).
- nodes: like pods, field `spec.unschedulable`.
- events (core/v1 and events.k8s.io/v1): create-on-update allowed, unconditional update.
- leases: `AllowCreateOnUpdate` true, `AllowUnconditionalUpdate` FALSE
  (pkg/registry/coordination/lease/strategy.go): a PUT without resourceVersion conflicts.
- podgroups (a CRD): no create-on-update, no unconditional update (EMULATOR GUESS from the
  apiextensions customResourceStrategy), status subresource, no strategic merge patch
  (the API answers 415 for it on custom resources), only metadata.name/namespace fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

CORE = ""
PODGROUP_GROUP = "scheduling.x-k8s.io"
PODGROUP_VERSION = "v1alpha1"


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    node: Any = obj
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _pod_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    pod_ips = _get(obj, "status", "podIPs") or []
    pod_ip = pod_ips[0].get("ip", "") if pod_ips else _text(_get(obj, "status", "podIP"))
    return {
        "spec.nodeName": _text(_get(obj, "spec", "nodeName")),
        "spec.restartPolicy": _text(_get(obj, "spec", "restartPolicy")),
        "spec.schedulerName": _text(_get(obj, "spec", "schedulerName")),
        "spec.serviceAccountName": _text(_get(obj, "spec", "serviceAccountName")),
        "spec.hostNetwork": _text(bool(_get(obj, "spec", "hostNetwork"))),
        "status.phase": _text(_get(obj, "status", "phase")),
        "status.podIP": pod_ip,
        "status.nominatedNodeName": _text(_get(obj, "status", "nominatedNodeName")),
    }


def _node_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    return {"spec.unschedulable": _text(bool(_get(obj, "spec", "unschedulable")))}


def _core_event_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    fields = {
        f"involvedObject.{k}": _text(_get(obj, "involvedObject", k))
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    }
    fields.update(
        {
            "reason": _text(obj.get("reason")),
            "reportingComponent": _text(obj.get("reportingComponent")),
            "source": _text(_get(obj, "source", "component")),
            "type": _text(obj.get("type")),
        }
    )
    return fields


def _events_v1_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    # EMULATOR GUESS: events.k8s.io/v1 shares storage with core events in the real API and
    # converts field labels; here it is a separate store selecting on its own field names.
    fields = {
        f"regarding.{k}": _text(_get(obj, "regarding", k))
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    }
    fields.update(
        {
            "reason": _text(obj.get("reason")),
            "reportingController": _text(obj.get("reportingController")),
            "type": _text(obj.get("type")),
        }
    )
    return fields


def _no_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()
    allow_create_on_update: bool = False
    allow_unconditional_update: bool = True
    strategic_merge: bool = True
    custom: bool = False
    short_names: tuple[str, ...] = ()
    extra_fields: Callable[[Mapping[str, Any]], dict[str, str]] = field(
        default=_no_fields, compare=False
    )

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`pods`, `leases.coordination.k8s.io`: the name used in API error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def selectable_fields(self, obj: Mapping[str, Any]) -> dict[str, str]:
        meta = obj.get("metadata") or {}
        fields = {"metadata.name": _text(meta.get("name"))}
        if self.namespaced:
            fields["metadata.namespace"] = _text(meta.get("namespace"))
        fields.update(self.extra_fields(obj))
        return fields

    def field_names(self) -> frozenset[str]:
        return frozenset(self.selectable_fields({"metadata": {}}))


def _namespaced_crd(
    group: str, version: str, plural: str, kind: str, short_names: tuple[str, ...] = ()
) -> ResourceType:
    """A namespaced custom resource with a status subresource: no strategic merge patch
    (the API server refuses it for custom resources) and no unconditional update."""
    return ResourceType(
        group,
        version,
        plural,
        kind,
        namespaced=True,
        subresources=frozenset({"status"}),
        allow_unconditional_update=False,
        strategic_merge=False,
        custom=True,
        short_names=short_names,
    )


PODS = ResourceType(
    CORE,
    "v1",
    "pods",
    "Pod",
    namespaced=True,
    subresources=frozenset({"status", "binding", "eviction"}),
    short_names=("po",),
    extra_fields=_pod_fields,
)
NODES = ResourceType(
    CORE,
    "v1",
    "nodes",
    "Node",
    namespaced=False,
    subresources=frozenset({"status"}),
    short_names=("no",),
    extra_fields=_node_fields,
)
EVENTS = ResourceType(
    CORE,
    "v1",
    "events",
    "Event",
    namespaced=True,
    allow_create_on_update=True,
    short_names=("ev",),
    extra_fields=_core_event_fields,
)
EVENTS_V1 = ResourceType(
    "events.k8s.io",
    "v1",
    "events",
    "Event",
    namespaced=True,
    allow_create_on_update=True,
    short_names=("ev",),
    extra_fields=_events_v1_fields,
)
LEASES = ResourceType(
    "coordination.k8s.io",
    "v1",
    "leases",
    "Lease",
    namespaced=True,
    allow_create_on_update=True,
    allow_unconditional_update=False,
)
PODGROUPS = _namespaced_crd(
    PODGROUP_GROUP, PODGROUP_VERSION, "podgroups", "PodGroup", short_names=("pg",)
)
# ElasticQuota (scheduler-plugins' CapacityScheduling CRD): served like PodGroups, with
# the same CRD switch (deploy/ installs both).
ELASTIC_QUOTAS = _namespaced_crd(
    PODGROUP_GROUP, PODGROUP_VERSION, "elasticquotas", "ElasticQuota", short_names=("eq",)
)
# Served only while the emulator's CRDs are installed (Emulator.crd_present).
CRD_TYPES = (PODGROUPS, ELASTIC_QUOTAS)
# Volcano's PodGroup CRD (scheduling.volcano.sh/v1beta1), as the one above: a custom
# resource with a status subresource (its CRD manifest declares `subresources.status`).
VOLCANO_PODGROUPS = _namespaced_crd(
    "scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", short_names=("podgroup-v1beta1",)
)
# KAI-Scheduler's PodGroup CRD (scheduling.run.ai/v2alpha2), a custom resource with a
# status subresource, as Volcano's.
KAI_PODGROUPS = _namespaced_crd(
    "scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", short_names=("pg-kai",)
)
# Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2, 1.36, GenericWorkload gate):
# a built-in type, so strategic merge patch works (its status conditions merge by
# type); status subresource (+k8s:supportsSubresource="/status" in types.go).
NATIVE_PODGROUPS = ResourceType(
    "scheduling.k8s.io",
    "v1alpha2",
    "podgroups",
    "PodGroup",
    namespaced=True,
    subresources=frozenset({"status"}),
)

NAMESPACES = ResourceType(
    CORE,
    "v1",
    "namespaces",
    "Namespace",
    namespaced=False,
    subresources=frozenset({"status"}),
    short_names=("ns",),
)
# Storage (pkg/registry/core/persistentvolume{,claim}, pkg/registry/storage/*): core/v1
# claims (namespaced) and volumes (cluster-scoped), both with a status subresource, both
# updatable without a resourceVersion and not created on update; storage.k8s.io/v1
# StorageClasses and CSINodes, cluster-scoped, no status. EMULATOR GUESS: only the
# metadata field selectors (the real claims and volumes also accept a legacy `name`).
PERSISTENT_VOLUME_CLAIMS = ResourceType(
    CORE,
    "v1",
    "persistentvolumeclaims",
    "PersistentVolumeClaim",
    namespaced=True,
    subresources=frozenset({"status"}),
    short_names=("pvc",),
)
PERSISTENT_VOLUMES = ResourceType(
    CORE,
    "v1",
    "persistentvolumes",
    "PersistentVolume",
    namespaced=False,
    subresources=frozenset({"status"}),
    short_names=("pv",),
)
STORAGE_CLASSES = ResourceType(
    "storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False, short_names=("sc",)
)
CSI_NODES = ResourceType("storage.k8s.io", "v1", "csinodes", "CSINode", namespaced=False)
VOLUME_TYPES = (PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, STORAGE_CLASSES, CSI_NODES)

# policy/v1 PodDisruptionBudgets, read by pods/eviction (tests/kubeapi/eviction.py).
POD_DISRUPTION_BUDGETS = ResourceType(
    "policy",
    "v1",
    "poddisruptionbudgets",
    "PodDisruptionBudget",
    namespaced=True,
    subresources=frozenset({"status"}),
    short_names=("pdb",),
)

# core/v1 Secrets (pkg/registry/core/secret): no create-on-update, unconditional update
# allowed; `data` values are base64 in JSON and checked at every write (validation.py).
SECRETS = ResourceType(CORE, "v1", "secrets", "Secret", namespaced=True)

# Dynamic Resource Allocation, resource.k8s.io/v1 (GA in 1.34): the registry strategies
# in pkg/registry/resource/* allow unconditional updates and no create-on-update; only
# claims have a status subresource. Slices select on spec.nodeName and spec.driver
# (resourceslice.toSelectableFields; a slice without a node selects as "").
DRA_GROUP = "resource.k8s.io"


def _slice_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    return {
        "spec.nodeName": _text(_get(obj, "spec", "nodeName")),
        "spec.driver": _text(_get(obj, "spec", "driver")),
    }


RESOURCE_SLICES = ResourceType(
    DRA_GROUP, "v1", "resourceslices", "ResourceSlice", namespaced=False, extra_fields=_slice_fields
)
DEVICE_CLASSES = ResourceType(DRA_GROUP, "v1", "deviceclasses", "DeviceClass", namespaced=False)
RESOURCE_CLAIMS = ResourceType(
    DRA_GROUP,
    "v1",
    "resourceclaims",
    "ResourceClaim",
    namespaced=True,
    subresources=frozenset({"status"}),
)
RESOURCE_CLAIM_TEMPLATES = ResourceType(
    DRA_GROUP, "v1", "resourceclaimtemplates", "ResourceClaimTemplate", namespaced=True
)
DRA_TYPES = (RESOURCE_SLICES, DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES)

# What a Helm release of the chart holds (tests/deploy/test_helm_install.py), stored as
# they are: EMULATOR GUESS, no schema validation past metadata (the real server checks
# each field), no controllers (a Deployment gets no ReplicaSet, a CRD serves no new API).
# Registry strategies (pkg/registry/{core,apps,rbac,admissionregistration}/*,
# apiextensions-apiserver): no create-on-update; unconditional update allowed except
# for CRDs (customResourceDefinitionStrategy.AllowUnconditionalUpdate is false).
SERVICE_ACCOUNTS = ResourceType(
    CORE, "v1", "serviceaccounts", "ServiceAccount", namespaced=True, short_names=("sa",)
)
CONFIG_MAPS = ResourceType(
    CORE, "v1", "configmaps", "ConfigMap", namespaced=True, short_names=("cm",)
)
SERVICES = ResourceType(
    CORE,
    "v1",
    "services",
    "Service",
    namespaced=True,
    subresources=frozenset({"status"}),
    short_names=("svc",),
)
RBAC_GROUP = "rbac.authorization.k8s.io"
ROLES = ResourceType(RBAC_GROUP, "v1", "roles", "Role", namespaced=True)
ROLE_BINDINGS = ResourceType(RBAC_GROUP, "v1", "rolebindings", "RoleBinding", namespaced=True)
CLUSTER_ROLES = ResourceType(RBAC_GROUP, "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = ResourceType(
    RBAC_GROUP, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
DEPLOYMENTS = ResourceType(
    "apps",
    "v1",
    "deployments",
    "Deployment",
    namespaced=True,
    subresources=frozenset({"status"}),
    short_names=("deploy",),
)
DAEMON_SETS = ResourceType(
    "apps",
    "v1",
    "daemonsets",
    "DaemonSet",
    namespaced=True,
    subresources=frozenset({"status"}),
    short_names=("ds",),
)
ADMISSION_GROUP = "admissionregistration.k8s.io"
ADMISSION_POLICIES = ResourceType(
    ADMISSION_GROUP,
    "v1",
    "validatingadmissionpolicies",
    "ValidatingAdmissionPolicy",
    namespaced=False,
    subresources=frozenset({"status"}),
)
ADMISSION_POLICY_BINDINGS = ResourceType(
    ADMISSION_GROUP,
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)
CUSTOM_RESOURCE_DEFINITIONS = ResourceType(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
    subresources=frozenset({"status"}),
    allow_unconditional_update=False,
    short_names=("crd", "crds"),
)
RELEASE_TYPES = (
    SERVICE_ACCOUNTS,
    CONFIG_MAPS,
    SERVICES,
    ROLES,
    ROLE_BINDINGS,
    CLUSTER_ROLES,
    CLUSTER_ROLE_BINDINGS,
    DEPLOYMENTS,
    DAEMON_SETS,
    ADMISSION_POLICIES,
    ADMISSION_POLICY_BINDINGS,
    CUSTOM_RESOURCE_DEFINITIONS,
)

# The workloads whose gangs the scheduler infers (cache/workloads.py): batch/v1 Jobs (a
# built-in type with a status subresource) and the controllers' CRDs, each with a status
# subresource as their CRD manifests declare. EMULATOR GUESS: objects are put directly
# by tests (as the controllers would have created them); no schema is enforced.
JOBS = ResourceType(
    "batch", "v1", "jobs", "Job", namespaced=True, subresources=frozenset({"status"})
)


JOBSETS = _namespaced_crd("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
PYTORCHJOBS = _namespaced_crd("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
MPIJOBS = _namespaced_crd("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
RAYCLUSTERS = _namespaced_crd("ray.io", "v1", "rayclusters", "RayCluster")
WORKLOAD_TYPES = (JOBS, JOBSETS, PYTORCHJOBS, MPIJOBS, RAYCLUSTERS)

ALL_TYPES: tuple[ResourceType, ...] = (
    PODS,
    NODES,
    EVENTS,
    EVENTS_V1,
    LEASES,
    PODGROUPS,
    NAMESPACES,
    *VOLUME_TYPES,
    ELASTIC_QUOTAS,
    VOLCANO_PODGROUPS,
    NATIVE_PODGROUPS,
    KAI_PODGROUPS,
    POD_DISRUPTION_BUDGETS,
    SECRETS,
    *DRA_TYPES,
    *RELEASE_TYPES,
    *WORKLOAD_TYPES,
)


def find_type(group: str, version: str, plural: str) -> ResourceType | None:
    for rtype in ALL_TYPES:
        if (rtype.group, rtype.version, rtype.plural) == (group, version, plural):
            return rtype
    return None
