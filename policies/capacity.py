"""How many copies of a pod a node could still take, counting only resources.

Used to size topology domains before a gang is placed in one, and to say how many
members of a gang are placeable. Selectors, taints and types are the filters' job.
"""

from __future__ import annotations

from cache import resources as res
from cache.node import NodeInfo
from cache.pod import PodInfo

UNBOUNDED = 1 << 30


def copies_that_fit(pod: PodInfo, node: NodeInfo) -> int:
    copies = (
        node.free(res.PODS)
        if res.PODS in node.allocatable
        else 110 - node.requested.get(res.PODS, 0)
    )
    for name, amount in pod.requests.items():
        if amount <= 0 or name in res.GPU_RESOURCES:
            continue
        copies = min(copies, node.free(name) // amount)
        if copies <= 0:
            return 0
    gpu = pod.gpu
    if gpu.count:
        free = node.usable_free()
        if gpu.milli >= res.MILLI_PER_GPU:
            copies = min(copies, sum(1 for f in free if f >= res.MILLI_PER_GPU) // gpu.count)
        else:
            copies = min(copies, sum(max(0, f) // gpu.milli for f in free))
    return max(0, copies)
