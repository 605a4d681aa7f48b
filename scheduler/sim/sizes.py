"""Failed pods by size: which pod sizes a policy drops, before and after the arrived
load reaches the cluster's GPUs (100%).

A failed-pod count alone hides a policy's trade: dropping one 8-GPU pod and keeping
eight 1-GPU pods reads as fewer failures. Splitting the count by size, and by whether
the cluster could still have held every arrived GPU (before 100%) or was over-asked
(after), shows what each policy gives up.
"""

from __future__ import annotations

from dataclasses import dataclass

from cache.resources import MILLI_PER_GPU
from scheduler.sim.openb import OpenbPod

CPU_ONLY = "cpu-only"
SHARE = "<1 GPU"


def size_class(pod: OpenbPod) -> str:
    """ "cpu-only", "<1 GPU" (a share of one device), or "N GPU" (N whole devices)."""
    if pod.num_gpu == 0:
        return CPU_ONLY
    if pod.num_gpu == 1 and pod.gpu_milli < MILLI_PER_GPU:
        return SHARE
    return f"{pod.num_gpu} GPU"


def size_order(name: str) -> tuple[int, int]:
    """CPU-only first, then shares, then whole GPUs by count."""
    if name == CPU_ONLY:
        return (0, 0)
    if name == SHARE:
        return (1, 0)
    count = name.split(" ", 1)[0]
    return (2, int(count)) if count.isdigit() else (3, 0)


@dataclass
class SizeFailures:
    """Pods of one size class: how many arrived and failed while the arrived GPU load
    was at most the cluster's GPUs ("before" 100%), and after."""

    arrived_before: int = 0
    failed_before: int = 0
    arrived_after: int = 0
    failed_after: int = 0

    def record(self, before: bool, failed: bool) -> None:
        if before:
            self.arrived_before += 1
            self.failed_before += failed
        else:
            self.arrived_after += 1
            self.failed_after += failed


class FailuresBySize:
    """Collects SizeFailures per size class during a replay."""

    def __init__(self, total_gpu_milli: int) -> None:
        self.total_gpu_milli = total_gpu_milli
        self.classes: dict[str, SizeFailures] = {}

    def record(self, pod: OpenbPod, arrived_milli: int, failed: bool) -> None:
        """`arrived_milli`: the arrived GPU milli counting this pod."""
        name = size_class(pod)
        entry = self.classes.get(name)
        if entry is None:
            entry = self.classes[name] = SizeFailures()
        entry.record(arrived_milli <= self.total_gpu_milli, failed)

    def ordered(self) -> dict[str, SizeFailures]:
        return {name: self.classes[name] for name in sorted(self.classes, key=size_order)}
