"""GpuFit: the node has the GPU devices the pod asks for, device by device.

Whole GPUs (1000 milli each) need `count` healthy devices that are entirely free. A
fractional share must fit on ONE healthy device: a node whose devices have 400 free
each cannot take a 500 pod even though 800 are free in total. That case gets its own
reason ("no single GPU with 500/1000 free"), because it is fragmentation, not a lack
of capacity, and operators need to tell the two apart. Unhealthy devices take no new
work; over-committed devices (negative free) count as full.

Pods with `problems` (a GPU request that cannot be honoured) are refused by the planner
before any filter runs; this filter reads only the parsed request.
"""

from __future__ import annotations

from functools import lru_cache

from cache import resources as res
from cache.node import NodeInfo
from cache.pod import PodInfo

MILLI = res.MILLI_PER_GPU
INSUFFICIENT_WHOLE = f"Insufficient {res.WHOLE_GPU}"
INSUFFICIENT_SHARED = f"Insufficient {res.SHARED_GPU}"


@lru_cache(maxsize=MILLI)
def fragmented_reason(milli: int) -> str:
    """Built once per share size: every node failing this way gives the same text."""
    return f"node(s) had no single GPU with {milli}/{MILLI} free"


def gpu_resource(pod: PodInfo) -> str:
    """The GPU resource the pod's GPU request was read from."""
    return res.WHOLE_GPU if res.WHOLE_GPU in pod.requests else res.SHARED_GPU


def dra_serves_gpu(pod: PodInfo, node: NodeInfo) -> bool:
    """The pod's GPUs come from DRA on this node, not from its device plugin: a
    DeviceClass provides the GPU resource (PodInfo.dra_extended) and the node does not
    advertise it (kube-scheduler 1.36: allocatable 0)."""
    if not pod.dra_extended or not pod.gpu.count:
        return False
    resource = gpu_resource(pod)
    return resource in pod.dra_extended and node.allocatable.get(resource, 0) <= 0


def gpu_index_request(pod: PodInfo) -> tuple[int, int]:
    """(count, milli) by which candidate nodes are looked up in the free-GPU index:
    none when DRA may serve the pod's GPUs (a node without GPUs of its own may do)."""
    if pod.dra_extended and gpu_resource(pod) in pod.dra_extended:
        return 0, 0
    return pod.gpu.count, pod.gpu.milli


class GpuFit:
    name: str = "gpu-fit"

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        count = pod.gpu.count
        if not count or dra_serves_gpu(pod, node):
            return None
        milli = pod.gpu.milli
        devices = node.devices
        gpu_free = node.gpu_free
        if milli >= MILLI:
            if len(devices) >= count:
                found = 0
                for index, free in enumerate(gpu_free):
                    if free >= MILLI and devices[index].healthy:
                        found += 1
                        if found == count:
                            return None
            return INSUFFICIENT_WHOLE
        total = 0
        for index, free in enumerate(gpu_free):
            if free > 0 and devices[index].healthy:
                if free >= milli:
                    return None
                total += free
        return INSUFFICIENT_SHARED if total < milli else fragmented_reason(milli)
