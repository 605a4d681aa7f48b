"""How many copies of a pod a node could still take, counting resources and host ports.

Used to size topology domains before a gang is placed in one, and to say how many
members of a gang are placeable. Selectors, taints and types are the filters' job.
Copies of a pod ask for the same host ports, so a pod with any takes one copy at most
(none where a port is taken): a gang that needs one node per member is sized so.
"""

from __future__ import annotations

from cache import resources as res
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.ports import conflicts

UNBOUNDED = 1 << 30


def copies_that_fit(pod: PodInfo, node: NodeInfo) -> int:
    if pod.host_ports and any(conflicts(node.used_ports, port) for port in pod.host_ports):
        return 0
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
    if pod.host_ports:
        copies = min(copies, 1)
    return max(0, copies)
