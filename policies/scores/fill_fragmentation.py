"""Fill fragmentation: the GPU room a node would still waste after being filled with
each expected pod shape, as far as its devices and its CPU allow.

FGD (policies/scores/fragmentation.py) counts a device's free milli as usable by a
shape as soon as one copy of the shape fits. That misses two losses an operator sees
on a full cluster: what is left on a device after as many copies as fit (an 810-milli
share on an empty GPU leaves 190 that almost nothing can use), and copies the GPUs
could take but the node's free CPU cannot. For a node with usable free milli f_i per
device, idle = sum of f_i, free CPU c and GPU model M, and a shape s (share w_s, CPU
c_s, per-GPU milli m_s, count k_s, allowed models):

    copies_s = 0                                 if k_s = 0, M not allowed or c_s > c
             = min(gpu_copies_s, c // c_s)       otherwise (no CPU cap when c_s = 0)
    gpu_copies_s = sum_i (f_i // m_s) // k_s     for shares (m_s < 1000)
                 = #{i : f_i >= 1000} // k_s      for whole GPUs
    waste_s = idle - copies_s x m_s x k_s
    fill fragmentation = sum_s w_s x waste_s

The score is 100 x sigmoid((before - after) / 1000), as FGD's, before and after the
pod takes its CPU and `shares`.

Measured on the openb traces (docs/benchmarks.md): as the tie-break of FGD's integer
score (policy `fgd-fill` of the simulator) it raises GPU allocation at 130% load on
every trace; on its own it does not beat FGD.
"""

from __future__ import annotations

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import MILLI_PER_GPU
from policies.interface import CandidateOrder, GangContext
from policies.scores.fragmentation import (
    TargetWorkload,
    WorkloadProvider,
    state_change,
    waste_change_score,
)

# (per-GPU milli, GPU count, ((cpu milli, share), ...)) for the shapes that may fit a model.
_Group = tuple[int, int, tuple[tuple[int, float], ...]]


def _groups_for(workload: TargetWorkload, model: str) -> tuple[float, tuple[_Group, ...]]:
    """The shapes of `workload` that can run on `model`, grouped by GPU need, and the
    total share (every shape counts all idle milli as waste before its copies)."""
    grouped: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for shape, share in workload.shares.items():
        if not shape.gpu_count or (shape.models is not None and model not in shape.models):
            continue
        grouped.setdefault((shape.gpu_milli, shape.gpu_count), []).append((shape.cpu_milli, share))
    groups = tuple((milli, count, tuple(entries)) for (milli, count), entries in grouped.items())
    return sum(workload.shares.values()), groups


def group_copies(free: tuple[int, ...], groups: tuple[_Group, ...]) -> list[int]:
    """Per group, the copies the node's free GPU milli takes (gpu_copies_s of the
    module docstring, before any CPU cap); `free` already clipped at 0. A function of
    the free milli alone, so FillFragmentation keeps it across free CPU amounts."""
    rooms = [milli for milli in free if milli]
    whole = sum([1 for milli in rooms if milli >= MILLI_PER_GPU])
    # Plain list comprehensions: this runs ~10^4 times per trace replay.
    return [
        whole // count
        if milli >= MILLI_PER_GPU
        else sum([room // milli for room in rooms]) // count
        for milli, count, _ in groups
    ]


def fill_fragmentation(
    free: tuple[int, ...],
    free_cpu: int,
    total_share: float,
    groups: tuple[_Group, ...],
    copies: list[int] | None = None,
) -> float:
    """Expected wasted milli of a node (module docstring); `free` already clipped at 0.
    `copies`: group_copies(free, groups) when the caller has it."""
    idle = sum(free)
    if not idle:
        return 0.0
    if copies is None:
        copies = group_copies(free, groups)
    used = 0.0
    # No min(): this runs once per new (node state, pod) pair of a replay, ~10^5 times.
    # The sum keeps its order (the same float result as the formula term by term).
    for (milli, count, entries), gpu_copies in zip(groups, copies, strict=True):
        if not gpu_copies:
            continue
        per_copy = milli * count
        for cpu, share in entries:
            if cpu > free_cpu:
                continue
            copies_here = gpu_copies
            if cpu and free_cpu // cpu < copies_here:
                copies_here = free_cpu // cpu
            used += share * copies_here * per_copy
    return total_share * idle - used


class FillFragmentation:
    """Score: 100 x sigmoid((fill fragmentation before - after) / 1000), a float."""

    name = "fill-fragmentation"
    candidate_order: CandidateOrder | None = None

    def __init__(self, workload: WorkloadProvider, memo_size: int = 1 << 16) -> None:
        self.workload = workload
        self.memo_size = memo_size
        self._memo: dict[tuple[tuple[int, ...], int, str], float] = {}
        self._groups: dict[str, tuple[float, tuple[_Group, ...]]] = {}
        self._copies: dict[tuple[tuple[int, ...], str], list[int]] = {}
        self._memo_of: TargetWorkload | None = None

    # As FGD's: within a learning step of its workload, a function of (pod, node state).
    memoizable = True

    def learning_step(self) -> int:
        return self.workload.learning_step()

    def _value(self, free: tuple[int, ...], cpu: int, model: str) -> float:
        key = (free, cpu, model)
        value = self._memo.get(key)
        if value is None:
            groups = self._groups.get(model)
            if groups is None:
                groups = self._groups[model] = _groups_for(self.workload.current(), model)
            # The GPU side of the value depends on the free milli only, which recur far
            # more than (free milli, free CPU) pairs (a quarter as many distinct in a
            # default-trace replay).
            copies_key = (free, model)
            copies = self._copies.get(copies_key)
            if copies is None:
                copies = group_copies(free, groups[1])
                if len(self._copies) >= self.memo_size:
                    del self._copies[next(iter(self._copies))]
                self._copies[copies_key] = copies
            value = fill_fragmentation(free, cpu, *groups, copies)
            if len(self._memo) >= self.memo_size:
                del self._memo[next(iter(self._memo))]
            self._memo[key] = value
        return value

    def change(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares) -> float:
        """Fill fragmentation before minus after placing the pod (positive: less waste)."""
        workload = self.workload.current()
        if workload is not self._memo_of:
            self._memo.clear()
            self._groups.clear()
            self._copies.clear()
            self._memo_of = workload
        return state_change(pod, node, shares, self._value)

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        return waste_change_score(self.change(pod, node, shares))


ShapeGroup = _Group
"""(per-GPU milli, GPU count, ((cpu milli, share), ...)): shapes grouped by GPU need."""


def shape_groups(workload: TargetWorkload, model: str) -> tuple[ShapeGroup, ...]:
    """The shapes of `workload` that can run on `model`, grouped by GPU need as the
    score groups them (for other judges of what can still fill a node)."""
    return _groups_for(workload, model)[1]
