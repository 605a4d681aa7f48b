"""The openb trace through DRA devices (`gang-scheduler simulate --dra`): the same
nodes and pods as the annotation model (openb.py), with each node's GPUs published as
DRA devices and each pod's GPUs asked through a ResourceClaim, allocated by the core's
DRA path (docs/simulator.md, "Through DRA devices").

- Nodes: a Node object with the node's CPU, memory and pods, and the GPU feature
  discovery labels (`nvidia.com/gpu.product`, `nvidia.com/gpu.count`), but no
  `nvidia.com/gpu` or `nvidia.com/vgpu`: its GPUs are a ResourceSlice of driver
  `gpu.gang-scheduler.io`, one pool per node (named after it), device `gpu-<i>` per
  GPU with `allowMultipleAllocations: true`, the capacity `gpu.gang-scheduler.io/milli`
  1000 (this project's milli-GPU, cache/dra/gpu_shares.py) and the attribute
  `productName` (the model).
- One DeviceClass, `gpu.gang-scheduler.io`, selecting the driver's devices.
- Pods: a GPU pod has one ResourceClaim `<pod>-gpu` of one request `gpu` of that
  class: a share of one GPU asks `capacity.requests` of its `gpu_milli`; N whole GPUs
  ask count N with the whole capacity (1000) each. The model constraint (`gpu_spec`)
  stays the node affinity on the product label, as in the annotation model (GPU feature
  discovery labels nodes whatever hands their GPUs out). CPU-only pods have no claim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cache.dra.gpu_shares import PRODUCT_ATTRIBUTE, SHARE_CAPACITY, SHARE_DRIVER
from cache.gpu import COUNT_LABEL, PRODUCT_LABEL
from cache.resources import MILLI_PER_GPU
from scheduler.planner.result import Plan
from scheduler.sim.openb import NAMESPACE, OpenbPod, per_gpu_milli, pod_object

API_VERSION = "resource.k8s.io/v1"
DEVICE_CLASS = SHARE_DRIVER
CLAIM_REQUEST = "gpu"


def device_class() -> dict[str, Any]:
    """The DeviceClass every GPU claim of the replay names."""
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS, "resourceVersion": "1"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{SHARE_DRIVER}"'}}]},
    }


def dra_node(node: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An openb Node object (openb.node_object) as a DRA node: the Node without its
    device-plugin GPUs, and its ResourceSlice (None for a node without GPUs)."""
    meta = node["metadata"]
    name = meta["name"]
    allocatable = dict(node["status"]["allocatable"])
    gpus = int(allocatable.pop("nvidia.com/gpu", "0"))
    allocatable.pop("nvidia.com/vgpu", None)
    labels = dict(meta.get("labels") or {})
    obj = {
        **node,
        "metadata": {**meta, "labels": labels},
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }
    if not gpus:
        return obj, None
    model = labels.get(PRODUCT_LABEL, "")
    labels[COUNT_LABEL] = str(gpus)
    devices = [
        {
            "name": f"gpu-{index}",
            "attributes": {PRODUCT_ATTRIBUTE: {"string": model}},
            "capacity": {SHARE_CAPACITY: {"value": str(MILLI_PER_GPU)}},
            "allowMultipleAllocations": True,
        }
        for index in range(gpus)
    ]
    resource_slice = {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-gpus", "resourceVersion": "1"},
        "spec": {
            "driver": SHARE_DRIVER,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": name,
            "devices": devices,
        },
    }
    return obj, resource_slice


def claim_name(pod: OpenbPod) -> str:
    return f"{pod.name}-gpu"


def claim_object(pod: OpenbPod, uid: int) -> dict[str, Any] | None:
    """The pod's ResourceClaim (None for a CPU-only pod)."""
    if not pod.num_gpu:
        return None
    milli = per_gpu_milli(pod)
    exactly = {
        "deviceClassName": DEVICE_CLASS,
        "count": pod.num_gpu if milli >= MILLI_PER_GPU else 1,
        "capacity": {"requests": {SHARE_CAPACITY: str(milli)}},
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "name": claim_name(pod),
            "namespace": NAMESPACE,
            "uid": f"openb-claim-{uid}",
            "resourceVersion": "1",
        },
        "spec": {"devices": {"requests": [{"name": CLAIM_REQUEST, "exactly": exactly}]}},
    }


def dra_pod_object(pod: OpenbPod, uid: int, scheduler_name: str) -> dict[str, Any]:
    """openb.pod_object without the GPU requests, with the pod's claim instead."""
    obj = pod_object(pod, uid, scheduler_name)
    spec = obj["spec"]
    for container in spec["containers"]:
        requests = container["resources"]["requests"]
        requests.pop("nvidia.com/gpu", None)
        requests.pop("nvidia.com/vgpu", None)
    if pod.num_gpu:
        spec["resourceClaims"] = [{"name": CLAIM_REQUEST, "resourceClaimName": claim_name(pod)}]
    return obj


def allocated_milli(plan: Plan) -> int:
    """The milli-GPU the plan's claim allocations consume of shared GPUs."""
    total = 0
    for claim in plan.claims:
        if claim.allocation is None:
            continue
        for result in claim.allocation.results:
            for name, amount in result.consumed:
                if name == SHARE_CAPACITY:
                    total += int(amount)
    return total


def claim_keys(plan: Plan) -> Sequence[str]:
    return [f"{c.namespace}/{c.name}" for c in plan.claims if c.allocation is not None]
