"""How full a node would be after placing a pod: the common ground of bin-packing and spread.

kube-scheduler's MostAllocated and LeastAllocated (noderesources/most_allocated.go,
least_allocated.go) rate a node by each resource's utilisation after placing the pod,
averaged with weights. Here the same idea covers GPUs too, counted in milli over the
node's devices, so one formula serves both scores: MostAllocated is
`100 x utilisation` and LeastAllocated is `100 x (1 - utilisation)`.

    utilisation = sum_r w_r x u_r / sum_r w_r

over the resources r named in the weights whose capacity on the node is positive:

- a node resource r ("cpu" in milli, "memory" in bytes, any other allocatable name):
  u_r = (requested_r + pod's request_r) / allocatable_r, clipped to 0..1 (pods placed by
  others can over-commit a node, as kube-scheduler also clips);
- "gpu": capacity = 1000 x the node's healthy devices (a broken GPU is neither room nor
  load), used = capacity - their free milli (negative free clipped to 0);
  u_node = (used + the milli of `shares`) / capacity. For a fractional pod the chosen
  device's own utilisation after placing, u_device = 1 - (free - milli) / 1000, is
  folded in: u_gpu = (u_node + u_device) / 2, so that between two nodes equally full the
  one whose device is left with the smaller hole wins (a tight fit leaves whole GPUs
  whole). Whole-GPU pods always fill their devices, so for them u_gpu = u_node.

A node that has none of the weighted resources gets utilisation None (both scores then
give 0, as kube-scheduler does when no weight applies).
"""

from __future__ import annotations

from collections.abc import Mapping

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import MILLI_PER_GPU

GPU = "gpu"
DEFAULT_WEIGHTS: Mapping[str, float] = {"cpu": 1.0, "memory": 1.0, GPU: 2.0}


def checked_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """The weights as a plain dict; ValueError for a negative or non-finite weight or
    when no weight is positive (the score would then say nothing)."""
    result = {str(name): float(weight) for name, weight in weights.items()}
    for name, weight in result.items():
        if not 0.0 <= weight < float("inf"):
            raise ValueError(f"weight of {name!r} must be a finite number >= 0, not {weight}")
    if not any(result.values()):
        raise ValueError("at least one resource weight must be positive")
    return result


def _clip(value: float) -> float:
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value


def gpu_utilisation_after(pod: PodInfo, node: NodeInfo, shares: DeviceShares) -> float | None:
    """u_gpu of the module docstring, or None when the node has no healthy GPU."""
    capacity = 0
    free_total = 0
    for device, free in zip(node.devices, node.gpu_free, strict=True):
        if device.healthy:
            capacity += MILLI_PER_GPU
            free_total += free if free > 0 else 0
    if not capacity:
        return None
    placed = sum(milli for _, milli in shares) if shares else pod.gpu.total_milli
    node_part = _clip((capacity - free_total + placed) / capacity)
    if not pod.gpu.fractional or len(shares) != 1:
        return node_part
    index, milli = shares[0]
    if not 0 <= index < len(node.gpu_free):
        return node_part
    device_part = _clip(1.0 - (node.gpu_free[index] - milli) / MILLI_PER_GPU)
    return (node_part + device_part) / 2.0


def utilisation_after(
    pod: PodInfo, node: NodeInfo, shares: DeviceShares, weights: Mapping[str, float]
) -> float | None:
    """Weighted utilisation (0..1) of the node after placing `pod` taking `shares`; None
    when no weighted resource exists on the node."""
    total = 0.0
    weight_sum = 0.0
    for name, weight in weights.items():
        if not weight:
            continue
        if name == GPU:
            used = gpu_utilisation_after(pod, node, shares)
            if used is None:
                continue
        else:
            capacity = node.allocatable.get(name, 0)
            if capacity <= 0:
                continue
            requested = node.requested.get(name, 0) + pod.requests.get(name, 0)
            used = _clip(requested / capacity)
        total += weight * used
        weight_sum += weight
    if not weight_sum:
        return None
    return total / weight_sum
