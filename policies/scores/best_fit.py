"""BestFit, as the FGD paper's simulator defines it: prefer the node left with the least
free CPU and GPU, each measured against the largest node of the cluster.

    score = int(100 x (1 - [0.5 x (free CPU - requested CPU) / max_cpu_milli
                            + 0.5 x (free GPU milli - requested GPU milli) / max_gpu_milli]))

clamped to 0..100. Free CPU is the node's allocatable minus requested CPU (milli); free
GPU milli is the sum over healthy devices of their free milli (a negative free, from pods
placed by others over-committing a device, counts as 0); requested GPU milli is the pod's
GPU count x milli per GPU. The defaults 128,000 and 8,000 are the largest openb node.

The score rates the node only, whatever `shares` it is handed: which device a share goes
to is the chooser's decision (the simulator takes the fitting device with the least free
milli, lowest index on ties, as TopologyChooser's default "best-fit" order does on nodes
without link information). Integer, as the simulator reads it, so ties are many and
their order is the planner's.

The float operations follow the simulator's order (each term divided, then weighted,
then summed; one minus the sum, times 100) so that truncation agrees to the last digit.
"""

from __future__ import annotations

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import CPU
from policies.interface import MAX_SCORE, CandidateOrder, GangContext

# The largest node of the openb trace: 128 cores, 8 GPUs.
DEFAULT_MAX_CPU_MILLI = 128_000
DEFAULT_MAX_GPU_MILLI = 8_000
CPU_WEIGHT = 0.5
GPU_WEIGHT = 0.5


def checked_maxima(max_cpu_milli: int, max_gpu_milli: int) -> tuple[int, int]:
    """The normalising maxima, refused unless both are positive."""
    if max_cpu_milli <= 0 or max_gpu_milli <= 0:
        raise ValueError(
            f"max_cpu_milli and max_gpu_milli must be positive, got {max_cpu_milli} "
            f"and {max_gpu_milli}"
        )
    return max_cpu_milli, max_gpu_milli


def clamp_score(value: int) -> float:
    """An integer score held to 0..100, as a float (the Score protocol's type)."""
    return float(min(int(MAX_SCORE), max(0, value)))


class BestFit:
    name = "best-fit"
    candidate_order: CandidateOrder | None = "tight"

    def __init__(
        self,
        max_cpu_milli: int = DEFAULT_MAX_CPU_MILLI,
        max_gpu_milli: int = DEFAULT_MAX_GPU_MILLI,
    ) -> None:
        self.max_cpu_milli, self.max_gpu_milli = checked_maxima(max_cpu_milli, max_gpu_milli)

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        cpu_left = node.free(CPU) - pod.requests.get(CPU, 0)
        gpu_left = node.free_gpu_milli - pod.gpu.total_milli
        waste = 0.0
        waste += cpu_left / self.max_cpu_milli * CPU_WEIGHT
        waste += gpu_left / self.max_gpu_milli * GPU_WEIGHT
        return clamp_score(int((1.0 - waste) * MAX_SCORE))
