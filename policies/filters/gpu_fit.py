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


class GpuFit:
    name: str = "gpu-fit"

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        count = pod.gpu.count
        if not count:
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
