"""Bin-packing: prefer the node (and, for a GPU share, the device) left fullest.

Score = 100 x utilisation after placing the pod, the weighted mean of cpu, memory and
GPU utilisation defined in policies.scores.utilisation (kube-scheduler's MostAllocated,
with GPUs counted in milli over devices and a fractional pod's device tightness folded
into the GPU term). Packing keeps whole nodes and whole GPUs free for large pods.
"""

from __future__ import annotations

from collections.abc import Mapping

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.interface import MAX_SCORE, CandidateOrder, GangContext
from policies.scores.utilisation import DEFAULT_WEIGHTS, checked_weights, utilisation_after


class MostAllocated:
    name: str = "most-allocated"
    candidate_order: CandidateOrder | None = "tight"

    def __init__(self, weights: Mapping[str, float] = DEFAULT_WEIGHTS) -> None:
        self.weights = checked_weights(weights)

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        used = utilisation_after(pod, node, shares, self.weights)
        return 0.0 if used is None else MAX_SCORE * used
