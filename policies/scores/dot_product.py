"""DotProduct (Tetris's packing heuristic), as the FGD paper's simulator runs it: prefer
the node whose free resources are least aligned with the pod's request.

    free    = [free CPU milli / max_cpu_milli, free GPU milli / max_gpu_milli]
    request = [pod CPU milli  / max_cpu_milli, pod GPU milli  / max_gpu_milli]
    score   = int(100 x (1 - dot(free, request) / 2))

clamped to 0..100, with free CPU, free GPU milli (healthy devices, negatives as 0) and the
pod's GPU milli (count x milli per GPU) read as in BestFit.

Normalisation, checked against the simulator's code: the paper's runs configure the
DotProduct plugin with dimension method "merge" (one GPU dimension: the node's total free
milli, the pod's total request) and norm method "max", which divides BOTH vectors by the
largest node's capacity [128000, 8000] (not by this node's own capacity, nor by the pod's
request); the dot product is then divided by the vector length, 2, to land in 0..1. The
free vector is the node before the pod is placed. Each product is formed as
(free / max) x (request / max) and summed CPU first, as the simulator does, so the
truncation agrees with it. The device a share goes to is the chooser's (the simulator
uses best fit there too); the score does not read `shares`.
"""

from __future__ import annotations

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import CPU
from policies.interface import MAX_SCORE, CandidateOrder, GangContext
from policies.scores.best_fit import (
    DEFAULT_MAX_CPU_MILLI,
    DEFAULT_MAX_GPU_MILLI,
    checked_maxima,
    clamp_score,
)

DIMENSIONS = 2


class DotProduct:
    name = "dot-product"
    candidate_order: CandidateOrder | None = "tight"

    def __init__(
        self,
        max_cpu_milli: int = DEFAULT_MAX_CPU_MILLI,
        max_gpu_milli: int = DEFAULT_MAX_GPU_MILLI,
    ) -> None:
        self.max_cpu_milli, self.max_gpu_milli = checked_maxima(max_cpu_milli, max_gpu_milli)

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        cpu, gpu = self.max_cpu_milli, self.max_gpu_milli
        dot = 0.0
        dot += (node.free(CPU) / cpu) * (pod.requests.get(CPU, 0) / cpu)
        dot += (node.free_gpu_milli / gpu) * (pod.gpu.total_milli / gpu)
        return clamp_score(int(MAX_SCORE * (1.0 - dot / DIMENSIONS)))
