"""ResourceFit: the node has room for the pod's requests and for one more pod.

Every requested resource except the GPU ones (accounted per device by GpuFit) must fit
in the node's free amount (allocatable minus what its pods request). Reasons use
kube-scheduler's words: "Too many pods", "Insufficient cpu", "Insufficient <name>"; an
extended resource the node lacks altogether is simply insufficient. The first failing
resource is reported, in a stable order (pods, cpu, memory, then the others by name),
so that nodes short of the same things aggregate under one reason. A resource a
DeviceClass provides (PodInfo.dra_extended) on a node that does not advertise it is
left to DRA, as kube-scheduler 1.36's Fit leaves it (shouldDelegateResourceToDRA).
"""

from __future__ import annotations

from cache import resources as res
from cache.node import NodeInfo
from cache.pod import PodInfo

# kube-apiserver's default for a node that does not report `pods` allocatable.
DEFAULT_MAX_PODS = 110
TOO_MANY_PODS = "Too many pods"
INSUFFICIENT_CPU = "Insufficient cpu"
INSUFFICIENT_MEMORY = "Insufficient memory"

# Checked apart (pods) or elsewhere (GPUs), never in the loop over other resources.
_NOT_SCALAR = res.GPU_RESOURCES | {res.PODS, res.CPU, res.MEMORY}


class ResourceFit:
    name: str = "resource-fit"

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        allocatable = node.allocatable
        requested = node.requested
        if allocatable.get(res.PODS, DEFAULT_MAX_PODS) - requested.get(res.PODS, 0) < 1:
            return TOO_MANY_PODS
        requests = pod.requests
        cpu = requests.get(res.CPU, 0)
        if cpu > 0 and cpu > allocatable.get(res.CPU, 0) - requested.get(res.CPU, 0):
            return INSUFFICIENT_CPU
        memory = requests.get(res.MEMORY, 0)
        if memory > 0 and memory > allocatable.get(res.MEMORY, 0) - requested.get(res.MEMORY, 0):
            return INSUFFICIENT_MEMORY
        short: str | None = None
        for name, amount in requests.items():
            if name in _NOT_SCALAR or amount <= 0:
                continue
            if name in pod.dra_extended and allocatable.get(name, 0) <= 0:
                continue  # DRA serves it on this node (the dynamic-resources filter)
            if amount > allocatable.get(name, 0) - requested.get(name, 0) and (
                short is None or name < short
            ):
                short = name
        return None if short is None else f"Insufficient {short}"
