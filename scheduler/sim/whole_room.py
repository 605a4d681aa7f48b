"""Whole-node pods failed while room for them lay scattered: issue 14's whole-node
criterion as a figure of one replay.

A pod asking the most whole GPUs of the trace (8 on the openb traces) fails either for
lack of capacity or because the capacity it needs is spread over several nodes. The
second kind is what a policy keeping nodes whole could have avoided: at the moment it
failed, the nodes able to hold it when empty (enough devices of a model it allows,
enough allocatable CPU and memory) had *together* at least the fully free devices, the
free CPU and the free memory it asks. Counted before 100% arrived load, where the
cluster could still have held every arrived GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import CPU, MEMORY, MILLI_PER_GPU
from policies.gpu_models import allowed_models


def room_scattered(pod: PodInfo, nodes: Iterable[NodeInfo]) -> bool:
    """Whether the nodes that could hold `pod` when empty together have the fully free
    devices (of a model it allows), CPU and memory it asks."""
    models = allowed_models(pod)
    cpu, memory = pod.requests.get(CPU, 0), pod.requests.get(MEMORY, 0)
    devices_free = cpu_free = memory_free = 0
    for node in nodes:
        if node.unschedulable:
            continue
        if node.allocatable.get(CPU, 0) < cpu or node.allocatable.get(MEMORY, 0) < memory:
            continue
        usable = [
            free
            for device, free in zip(node.devices, node.gpu_free, strict=True)
            if device.healthy and (models is None or device.model in models)
        ]
        if len(usable) < pod.gpu.count:
            continue
        devices_free += sum(1 for free in usable if free >= MILLI_PER_GPU)
        cpu_free += max(0, node.free(CPU))
        memory_free += max(0, node.free(MEMORY))
    return devices_free >= pod.gpu.count and cpu_free >= cpu and memory_free >= memory


@dataclass
class WholeNodeFailures:
    """The trace's largest whole-GPU pods ("N GPU") failed before 100% arrived load, and
    how many of them failed with room scattered (room_scattered)."""

    size: str
    failed_before: int = 0
    with_room_before: int = 0

    def record(self, pod: PodInfo, nodes: Iterable[NodeInfo]) -> None:
        self.failed_before += 1
        self.with_room_before += room_scattered(pod, nodes)
