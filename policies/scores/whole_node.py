"""Whole nodes kept whole: prefer not to be the first pod on an idle GPU node, and when
one must be started, start the smallest, so that pods asking for a whole large node
find one.

FGD weighs a shape by how many pods have it, and pods that want every GPU of a node are
rare by count (under 1% of the openb default trace) though they carry a large share of
the GPU demand; the largest of them also need most of the CPU of the largest nodes
(120 of 128 cores on the openb trace). FGD's integer score rarely minds which idle node
a small pod starts, and a tie-break that packs shares tightly (fill fragmentation) may
start the big nodes first, until none is left for a whole-node pod well before the
cluster is full. This score, used as a tie-break, says:
- 1 when the node already runs something on a GPU, or has no GPU, or is idle but has
  fewer devices than `protect_from_devices` (the largest whole-GPU request expected:
  such a node could not hold that pod anyway): nothing worth keeping is broken;
- below 1/2 when the pod would be the first on an idle GPU node (every healthy device
  fully free) of at least `protect_from_devices` devices, the lower the larger the
  node: 1 / (2 + devices + CPU cores / 100), so an idle node of more devices or more
  CPU is started later (100 cores weigh about one device: the CPU of a GPU node is in
  the order of 10 cores per device).
CPU-only pods count too: the CPU they take on an idle node is CPU a whole-node pod may
lack.

`protect_from_cpu_milli` narrows the protection to idle nodes with at least that much
CPU: the nodes the most CPU-hungry whole-node request can use at all (on the openb
traces, 8-GPU pods of 120 cores fit only the 128-core 8-GPU nodes, 39 of 1,213). The
other idle nodes are then left to FGD and its other tie-breaks, which on a CPU-heavy
trace start them earlier to good effect (docs/benchmarks.md, "The openb replay").
"""

from __future__ import annotations

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import CPU, MILLI_PER_GPU
from policies.interface import CandidateOrder, GangContext

# Node CPU (milli) that weighs as much as one device in an idle node's size.
_CPU_SCALE_MILLI = 100_000


def idle_gpu_devices(node: NodeInfo) -> int:
    """The node's healthy device count when every one of them is fully free, else 0."""
    healthy = 0
    for device, free in zip(node.devices, node.gpu_free, strict=True):
        if device.healthy:
            if free < MILLI_PER_GPU:
                return 0
            healthy += 1
    return healthy


class KeepWholeNodes:
    """1 on a node already in use (or without GPU, or idle with fewer devices than
    `protect_from_devices`); 1 / (2 + devices + cores / 100) on an idle GPU node."""

    name = "keep-whole-nodes"
    candidate_order: CandidateOrder | None = None
    memoizable = True

    def __init__(self, protect_from_devices: int = 1, protect_from_cpu_milli: int = 0) -> None:
        if protect_from_devices < 1:
            raise ValueError(f"protect_from_devices must be at least 1, not {protect_from_devices}")
        if protect_from_cpu_milli < 0:
            raise ValueError(f"protect_from_cpu_milli must be >= 0, not {protect_from_cpu_milli}")
        self.protect_from_devices = protect_from_devices
        self.protect_from_cpu_milli = protect_from_cpu_milli

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        devices = idle_gpu_devices(node)
        if devices < self.protect_from_devices:
            return 1.0
        cpu = max(0, node.allocatable.get(CPU, 0))
        if cpu < self.protect_from_cpu_milli:
            return 1.0
        return 1.0 / (2 + devices + cpu / _CPU_SCALE_MILLI)
