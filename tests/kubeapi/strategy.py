"""What the API server does to an object between the request body and storage.

Mirrors the registry strategies (rest.BeforeCreate / BeforeUpdate and the per-type
PrepareForCreate / PrepareForUpdate) for the parts a scheduler can observe:
- create: validation.py's checks (names, labels, a pod's nodeName with gates) and
  spec_validation.py's (ports, weights, volumes, storage objects), the
  TaintNodesByCondition admission of a new Node (node_lifecycle.py); the server sets
  uid and creationTimestamp, refuses a body that carries a
  resourceVersion (storage.ErrResourceVersionSetOnCreate, a 500), resets a pod's status
  to Pending (podStrategy.PrepareForCreate) and drops a custom resource's status when it
  has a status subresource;
- update: system metadata (uid, creationTimestamp, deletionTimestamp) cannot change;
  the main resource cannot change status and the status subresource cannot change spec
  (podStatusStrategy keeps labels/annotations writable; custom resources' status
  strategy keeps only `status`); a PodGroup's written status keeps only the fields its
  schema declares (pruning.py); a pod update may only change the few mutable spec
  fields (ValidatePodUpdate), else 422;
- binding: BindingREST.setPodHostAndAnnotations (pkg/registry/core/pod/storage).

Every function returns a new dict and leaves its inputs untouched: stored objects are
shared by every reader.
"""

from __future__ import annotations

import copy
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.kubeapi import (
    crd_schema,
    errors,
    native_podgroup,
    node_lifecycle,
    spec_validation,
    validation,
)
from tests.kubeapi.dra import strategy as dra
from tests.kubeapi.pod_status import check_extended_claim_status
from tests.kubeapi.pruning import prune_status
from tests.kubeapi.resources import (
    DRA_TYPES,
    NAMESPACES,
    NATIVE_PODGROUPS,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PODGROUPS,
    PODS,
    ResourceType,
)

# EMULATOR GUESS (partial defaulting): only the pod defaults a scheduler reads.
POD_SPEC_DEFAULTS: dict[str, Any] = {
    "schedulerName": "default-scheduler",
    "restartPolicy": "Always",
    "terminationGracePeriodSeconds": 30,
    "dnsPolicy": "ClusterFirst",
}

# ValidatePodUpdate: "pod updates may not change fields other than ..." these.
_POD_MUTABLE_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")
_POD_IMMUTABLE_MESSAGE = (
    "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)


def timestamp(moment: datetime | None = None) -> str:
    """RFC 3339 at second precision, as metav1.Time serializes."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_uid() -> str:
    return str(uuid.uuid4())


def _qos_class(spec: dict[str, Any]) -> str:
    """Pod QoS from cpu/memory requests and limits.

    EMULATOR GUESS (simplified): quantities compared as strings, no limit-to-request
    defaulting."""
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        for name in ("cpu", "memory"):
            if name in requests or name in limits:
                any_set = True
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def check_type(rtype: ResourceType, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body of the request is not a {rtype.kind} object")
    kind = body.get("kind")
    if kind not in (None, "", rtype.kind):
        raise errors.bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({rtype.kind})"
        )
    version = body.get("apiVersion")
    if version not in (None, "", rtype.api_version):
        raise errors.bad_request(
            f"the API version in the data ({version}) does not match the expected API version "
            f"({rtype.api_version})"
        )
    meta = body.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    return body


def _default_host_network_ports(spec: dict[str, Any]) -> None:
    """core/v1 SetDefaults_PodSpec: on the host network, a port without a hostPort (or
    with 0) gets its containerPort, in containers and init containers alike."""
    if spec.get("hostNetwork") is not True:
        return
    for kind in ("containers", "initContainers"):
        for container in spec.get(kind) or []:
            for port in container.get("ports") or []:
                if not port.get("hostPort"):
                    port["hostPort"] = port.get("containerPort")


def prepare_create(rtype: ResourceType, body: Any, namespace: str | None) -> dict[str, Any]:
    obj = copy.deepcopy(check_type(rtype, body))
    if rtype in DRA_TYPES:
        obj = dra.decode(rtype, obj)
    meta = obj.setdefault("metadata", {})
    if rtype.namespaced:
        body_ns = meta.get("namespace")
        if body_ns and body_ns != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    if not meta.get("name"):
        generate = meta.get("generateName")
        if not generate:
            raise errors.invalid(
                rtype, "", "metadata.name: Required value: name or generateName is required"
            )
        meta["name"] = generate + uuid.uuid4().hex[:5]
    if meta.get("resourceVersion"):
        # storage.ErrResourceVersionSetOnCreate is a plain error; EMULATOR GUESS that it
        # reaches the client as a 500 (apiserver's ErrorToAPIStatus default).
        raise errors.internal("resourceVersion should not be set on objects to be created")
    meta["uid"] = new_uid()
    meta["creationTimestamp"] = timestamp()
    for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        meta.pop(field, None)
    obj["kind"] = rtype.kind
    obj["apiVersion"] = rtype.api_version
    validation.check_create(rtype, obj)
    if rtype is NODES:
        node_lifecycle.admit_new_node(obj)
    if rtype is PODS:
        spec = obj.setdefault("spec", {})
        for key, value in POD_SPEC_DEFAULTS.items():
            spec.setdefault(key, value)
        if "priorityClassName" not in spec:
            spec.setdefault("priority", 0)
        _default_host_network_ports(spec)
        obj["status"] = {"phase": "Pending", "qosClass": _qos_class(spec)}
    elif rtype is NAMESPACES:
        _label_namespace(obj)
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif rtype.custom and rtype.has_status:
        obj.pop("status", None)
    elif rtype in DRA_TYPES:
        dra.prepare_create(rtype, obj, timestamp())
    elif rtype is NATIVE_PODGROUPS:
        native_podgroup.prepare_create(obj)
    spec_validation.validate(rtype, obj)
    if rtype is NATIVE_PODGROUPS:
        native_podgroup.validate(obj)
    if rtype is PODGROUPS:
        crd_schema.validate_podgroup(obj)
    return obj


# The label every Namespace carries, set by the API server on create and on update
# (pkg/registry/core/namespace/strategy.go), so that a namespaceSelector can pick a
# namespace by name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _label_namespace(obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    labels[NAMESPACE_NAME_LABEL] = meta["name"]
    meta["labels"] = labels


def prepare_update(
    rtype: ResourceType, old: dict[str, Any], body: Any, subresource: str
) -> dict[str, Any]:
    """The object to store for a PUT (or a patched body) of `old`."""
    new = copy.deepcopy(check_type(rtype, body))
    if rtype in DRA_TYPES:
        new = dra.decode(rtype, new)
    new["kind"] = rtype.kind
    new["apiVersion"] = rtype.api_version
    old_meta = old["metadata"]
    meta = new.setdefault("metadata", {})
    name = old_meta["name"]
    if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
        raise errors.invalid(
            rtype, name, f'metadata.uid: Invalid value: "{meta["uid"]}": field is immutable'
        )
    for field in ("name", "namespace", "uid", "creationTimestamp"):
        if field in old_meta:
            meta[field] = old_meta[field]
    for field in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        if field in old_meta:
            meta[field] = old_meta[field]
        else:
            meta.pop(field, None)
    validation.check_update(rtype, old, new)
    if rtype in DRA_TYPES:
        return dra.prepare_update(rtype, old, new, subresource, timestamp())
    if subresource == "status":
        updated = _status_update(rtype, old, new)
        prune_status(rtype, updated)
        if rtype is PODS:
            check_extended_claim_status(name, updated)
        if rtype is NATIVE_PODGROUPS:
            native_podgroup.validate_status(updated)
        return updated
    if rtype.has_status:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    if rtype is PODS:
        _check_pod_spec_update(name, old.get("spec") or {}, new.get("spec") or {})
    if rtype is NAMESPACES:
        _label_namespace(new)
    if rtype is PERSISTENT_VOLUME_CLAIMS:
        _check_claim_spec_update(name, old.get("spec") or {}, new.get("spec") or {})
    if rtype is NATIVE_PODGROUPS:
        native_podgroup.check_update(old, new)
    if rtype is not PODS:  # a pod's validated fields cannot change after create
        spec_validation.validate(rtype, new)
    if rtype is PODGROUPS:
        crd_schema.validate_podgroup(new)
    return new


def _status_update(rtype: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    if rtype.custom:
        # customResource statusStrategy: everything but status comes from the old object.
        result = copy.deepcopy(old)
        result["metadata"]["resourceVersion"] = new["metadata"].get("resourceVersion", "")
        if "status" in new:
            result["status"] = new["status"]
        else:
            result.pop("status", None)
        return result
    # podStatusStrategy / nodeStatusStrategy: spec and ownerReferences stay as they were.
    if "spec" in old:
        new["spec"] = copy.deepcopy(old["spec"])
    else:
        new.pop("spec", None)
    owners = old["metadata"].get("ownerReferences")
    if owners is None:
        new["metadata"].pop("ownerReferences", None)
    else:
        new["metadata"]["ownerReferences"] = copy.deepcopy(owners)
    return new


def _comparable_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    view = {k: v for k, v in spec.items() if k not in _POD_MUTABLE_SPEC}
    for key in ("containers", "initContainers"):
        if key in view:
            view[key] = [{k: v for k, v in c.items() if k != "image"} for c in view[key]]
    return view


def _check_pod_spec_update(name: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    old_view, new_view = _comparable_pod_spec(old), _comparable_pod_spec(new)
    # schedulingGates may only be removed.
    old_gates = old_view.pop("schedulingGates", None) or []
    new_gates = new_view.pop("schedulingGates", None) or []
    if old_view != new_view or any(g not in old_gates for g in new_gates):
        raise errors.invalid(PODS, name, _POD_IMMUTABLE_MESSAGE)


def _check_claim_spec_update(name: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """ValidatePersistentVolumeClaimUpdate: the spec is immutable but for the storage
    request (expansion), and volumeName may be set once (the PV controller binds)."""

    def comparable(spec: dict[str, Any]) -> dict[str, Any]:
        view = {k: v for k, v in spec.items() if k not in ("resources", "volumeName")}
        limits = (spec.get("resources") or {}).get("limits")
        view["resources.limits"] = limits
        return view

    renamed = old.get("volumeName") and new.get("volumeName") != old.get("volumeName")
    if comparable(old) != comparable(new) or renamed:
        raise errors.invalid(
            PERSISTENT_VOLUME_CLAIMS,
            name,
            "spec: Forbidden: spec is immutable after creation except resources.requests and "
            "volumeAttributesClassName for bound claims",
        )


def same_content(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when an update would not change the object (the API then skips the write)."""

    def strip(obj: dict[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
        return {**obj, "metadata": meta}

    return strip(a) == strip(b)


def set_pod_condition(status: dict[str, Any], condition: dict[str, Any]) -> None:
    """podutil.UpdatePodCondition: replace the condition of that type, keeping its
    lastTransitionTime when the status did not change."""
    conditions = list(status.get("conditions") or [])
    entry = {"type": condition["type"], "status": condition["status"], "lastProbeTime": None}
    entry["lastTransitionTime"] = timestamp()
    for i, existing in enumerate(conditions):
        if existing.get("type") == condition["type"]:
            if existing.get("status") == condition["status"]:
                entry["lastTransitionTime"] = existing.get("lastTransitionTime")
            conditions[i] = entry
            break
    else:
        conditions.append(entry)
    status["conditions"] = conditions


def bind_pod(pod: dict[str, Any], node: str, annotations: dict[str, str]) -> dict[str, Any]:
    """The bound pod: nodeName, the Binding's annotations merged in, PodScheduled=True."""
    new = dict(pod)
    meta = dict(pod["metadata"])
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    new["metadata"] = meta
    new["spec"] = {**(pod.get("spec") or {}), "nodeName": node}
    status = dict(pod.get("status") or {})
    set_pod_condition(status, {"type": "PodScheduled", "status": "True"})
    new["status"] = status
    return new


def mark_deleting(obj: dict[str, Any], grace_seconds: int) -> dict[str, Any]:
    new = dict(obj)
    meta = dict(obj["metadata"])
    meta["deletionTimestamp"] = timestamp(datetime.now(UTC) + timedelta(seconds=grace_seconds))
    meta["deletionGracePeriodSeconds"] = grace_seconds
    new["metadata"] = meta
    return new
