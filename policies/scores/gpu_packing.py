"""GpuPacking, as the FGD paper's simulator defines it: put GPU pods where GPUs are
already in use, so that idle GPUs and idle nodes stay whole. Integer tiers, best first:

1. The pod takes only partly used devices (a share on a device already shared):
   `100 - sum(free_i x 100 // 1000) // 10` over the devices taken (free milli before the
   pod), at least 50. A single share thus scores 100 - free // 100: 91..100, the fuller
   device the better.
2. The pod takes k fully free devices on a node where some device is in use:
   `50 - k`, at least 33.
3. Every device of the node is fully free (an idle node of n devices): `33 - n`, at
   least 0. Smaller idle nodes first.

A pod without GPU scores 0 on every node (the simulator gives every node its minimum,
so node order alone decides).

Which devices are taken comes from `shares` (the chooser's proposal). The simulator
scores a node by its own best-fit pick (least free first, lowest index on ties); the
planner maximises over the chooser's candidates, and tier 1 rises as the device's free
milli falls, so with the default "best-fit" chooser the device picked is the same.
Called with no shares for a GPU pod, the score makes that best-fit pick itself.

Departures from the simulator, none of which touches the openb trace: devices marked
unhealthy are left out (neither free nor in use; a node is idle when every healthy device
is fully free, n counts healthy devices), a negative free milli counts as 0, and the floor
of tier 3 is 0 where the simulator's is n (max(33 - n, n), which differs only for nodes
of more than 16 GPUs and there would rank an idle 20-GPU node above a used one).
"""

from __future__ import annotations

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import MILLI_PER_GPU
from policies.interface import MAX_SCORE, CandidateOrder, GangContext

TOP = int(MAX_SCORE)
SHARED_FLOOR = TOP // 2  # 50: tier 1 never falls below it
USED_NODE_CEILING = TOP // 2  # 50: tier 2 is 50 - k
USED_NODE_FLOOR = TOP // 3  # 33: tier 2 never falls below it
IDLE_NODE_CEILING = TOP // 3  # 33: tier 3 is 33 - n


def _healthy_free(node: NodeInfo) -> dict[int, int]:
    """Free milli of each healthy device, negatives as 0."""
    return {
        i: max(0, free)
        for i, (device, free) in enumerate(zip(node.devices, node.gpu_free, strict=True))
        if device.healthy
    }


def _best_fit_devices(free: dict[int, int], count: int, milli: int) -> list[int]:
    """The simulator's own pick: the first `count` devices with room, least free first,
    lowest index on ties."""
    fitting = sorted((room, i) for i, room in free.items() if room >= milli)
    return [i for _, i in fitting[:count]]


def packing_tier_score(pod: PodInfo, node: NodeInfo, shares: DeviceShares) -> int:
    """The integer score of the module docstring."""
    if pod.gpu.count == 0:
        return 0
    free = _healthy_free(node)
    if free and all(room >= MILLI_PER_GPU for room in free.values()):
        return max(IDLE_NODE_CEILING - len(free), 0)
    taken = (
        [index for index, _ in shares]
        if shares
        else _best_fit_devices(free, pod.gpu.count, pod.gpu.milli)
    )
    if len(taken) < pod.gpu.count:
        return 0  # the pod does not fit here (the simulator's minimum too)
    rooms = [free.get(index, 0) for index in taken]
    whole = sum(1 for room in rooms if room >= MILLI_PER_GPU)
    if whole:
        return max(USED_NODE_CEILING - whole, USED_NODE_FLOOR)
    free_percent = sum(room * 100 // MILLI_PER_GPU for room in rooms)
    return max(TOP - free_percent // 10, SHARED_FLOOR)


class GpuPacking:
    name = "gpu-packing"
    candidate_order: CandidateOrder | None = "tight"

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        return float(packing_tier_score(pod, node, shares))
