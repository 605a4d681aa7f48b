"""Valid resource.k8s.io/v1 objects for tests: a device class, a node's slice of GPUs, a
claim for them and its allocation, as a DRA driver and kube-scheduler would write them."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.example.com"
GPU_CLASS = "gpu.example.com"


def device_class_obj(name: str = GPU_CLASS) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def gpu_device(index: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "model": {"string": "H100"},
            f"{DRIVER}/index": {"int": index},
            "driverVersion": {"version": "580.159.4"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def slice_obj(node: str = "n1", gpus: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "nodeName": node,
            "devices": [gpu_device(i) for i in range(gpus)],
        },
    }


def claim_obj(name: str = "train-0", namespace: str = "ml", count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": count}}
                ]
            }
        },
    }


def template_obj(name: str = "one-gpu", namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim_obj()["spec"]},
    }


def allocation(node: str = "n1", devices: tuple[str, ...] = ("gpu-0",)) -> dict[str, Any]:
    return {
        "devices": {
            "results": [
                {"request": "gpu", "driver": DRIVER, "pool": node, "device": d} for d in devices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def pod_reference(name: str = "train-0-worker", uid: str = "pod-uid-0") -> dict[str, Any]:
    return {"resource": "pods", "name": name, "uid": uid}
