"""Builders of storage objects (PVC, PV, StorageClass, CSINode) as the API serves them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def pvc_obj(
    name: str,
    *,
    namespace: str = "default",
    storage_class: str | None = "local",
    size: str = "10Gi",
    modes: Sequence[str] = ("ReadWriteOnce",),
    volume_name: str = "",
    annotations: Mapping[str, str] | None = None,
    owner_uid: str = "",
    deleting: bool = False,
    resource_version: str = "1",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": list(modes),
        "resources": {"requests": {"storage": size}},
        "volumeMode": "Filesystem",
    }
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if volume_name:
        spec["volumeName"] = volume_name
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-pvc-{namespace}-{name}",
        "resourceVersion": resource_version,
        "annotations": dict(annotations or {}),
    }
    if owner_uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "owner",
                "uid": owner_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["finalizers"] = ["kubernetes.io/pvc-protection"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Bound" if volume_name else "Pending"},
    }


def node_terms(key: str, *values: str) -> dict[str, Any]:
    """A NodeSelector: `key` In `values`."""
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
        ]
    }


def pv_obj(
    name: str,
    *,
    storage_class: str = "local",
    size: str = "10Gi",
    modes: Sequence[str] = ("ReadWriteOnce",),
    node: str = "",
    zone: str = "",
    claim: tuple[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    phase: str = "Available",
    resource_version: str = "1",
) -> dict[str, Any]:
    """A PV; `node` pins it to one host (a local volume), `zone` to a zone."""
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": list(modes),
        "storageClassName": storage_class,
        "volumeMode": "Filesystem",
        "persistentVolumeReclaimPolicy": "Delete",
    }
    if node:
        spec["local"] = {"path": f"/mnt/disks/{name}"}
        spec["nodeAffinity"] = {"required": node_terms(HOSTNAME, node)}
    elif zone:
        spec["csi"] = {"driver": "pd.csi.storage.gke.io", "volumeHandle": name}
        spec["nodeAffinity"] = {"required": node_terms(ZONE, zone)}
    if claim is not None:
        spec["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "namespace": claim[0],
            "name": claim[1],
        }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": name,
            "labels": dict(labels or {}),
            "resourceVersion": resource_version,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def storage_class_obj(
    name: str,
    *,
    provisioner: str = "kubernetes.io/no-provisioner",
    mode: str = "WaitForFirstConsumer",
    zones: Sequence[str] = (),
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
        "reclaimPolicy": "Delete",
    }
    if zones:
        obj["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": ZONE, "values": list(zones)}]}
        ]
    return obj


def csinode_obj(name: str, limits: Mapping[str, int]) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {
            "drivers": [
                {"name": driver, "nodeID": name, "allocatable": {"count": count}}
                for driver, count in limits.items()
            ]
        },
    }


def with_claims(pod: dict[str, Any], *claims: str, ephemeral: Sequence[str] = ()) -> dict[str, Any]:
    """The pod mounting the named claims (and generic ephemeral volumes)."""
    volumes: list[dict[str, Any]] = [
        {"name": f"vol-{claim}", "persistentVolumeClaim": {"claimName": claim}} for claim in claims
    ]
    for volume in ephemeral:
        volumes.append(
            {
                "name": volume,
                "ephemeral": {
                    "volumeClaimTemplate": {
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "local",
                            "resources": {"requests": {"storage": "1Gi"}},
                        }
                    }
                },
            }
        )
    pod["spec"]["volumes"] = volumes
    return pod
