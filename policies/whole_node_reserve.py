"""A reserve of whole nodes for the largest request, sized by its expected share of the
demand still to come: a cluster-level rule the planner applies when it picks a node.

A per-node score cannot protect whole nodes in proportion to need, since it does not
see how many are left: either it protects every node able to hold the largest request
(which on a CPU-heavy trace keeps nodes idle that the small pods should have used), or
only some (which lets the small pods break the others until the whole-node pods find
none). The reserve counts instead:
- the *whole-node requests* are the history's pods asking the most whole GPUs (8 on the
  openb traces), one class per distinct (GPUs, CPU, memory, GPU models) request;
- a node *holds* a class when it could take such a pod now: enough fully free healthy
  devices on a node of an allowed model, and the CPU and memory free;
- the *reserve* of a class is the number of pods of that class, or of any class that
  needs at least as much (whose nodes are among its nodes), the history's shape
  distribution says will still arrive while the free GPU capacity lasts: the free GPU
  milli over the history's mean GPU milli per pod, times the classes' share of the
  history's pods, times a margin, rounded up (the margin: arrivals go on past the
  free capacity, and a count of expected pods is only a mean; its value is measured:
  MEASURED_MARGIN below);
- a class is *short* when no more nodes hold it than its reserve.

The rule (`ReserveGuard.breaks`): a pod must not leave a node unable to hold a short
class, unless the pod is itself of that class or of one needing more (it is what the
reserve is for); when every feasible node would break one, the reserve's last resort
decides (`ReserveGuard.may_break`). While
more nodes hold a class than its reserve, nothing changes: the placement is the
profile's own.

What it reads: the shape distribution (history) and the cluster's current state, never
arrival order. Pure: the ledger is caught up from the snapshot's change log by its
caller and keeps only per-node figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import CPU, MEMORY, MILLI_PER_GPU
from policies.gpu_models import allowed_models
from policies.node_builds import LargestNodes
from policies.scores.fragmentation import (
    REBUILD_GROWTH,
    OnlineWorkload,
    Relearnt,
    WorkloadShape,
    node_model,
)

# Classes past this many are merged away (the least frequent dropped): a bitmask per
# node stays small, and the guard's loop short.
MAX_CLASSES = 16

LastResort = Literal["any", "none", "no-stranding"]
# What a pod may break when every feasible node would break a short class: any of
# them, none (it waits), or those where it takes no larger share of the node's free
# CPU and memory than of its free GPU milli (it does not strand GPUs the largest
# request could have used: a CPU-only pod always would).
LAST_RESORTS: tuple[LastResort, ...] = ("any", "none", "no-stranding")

# A reserve keeps this many times the whole nodes its largest requests are expected to
# need: measured against 0.5, 1, 3 and 4 on the openb traces in issue 14's fourth pass
# (git history of docs/benchmarks.md): 3 and up keep too many on the multi-GPU traces,
# where other multi-GPU pods then fail before 100%.
MEASURED_MARGIN = 2.0

# A node as a caller's plan changed it: (name, the classes it holds, its free GPU milli).
PlannedNode = tuple[str, int, int]

# A pod's request as the reserve counts it: (whole GPUs, 0 unless it asks whole ones;
# CPU milli; memory; the GPU models it allows, None: any).
_RequestKey = tuple[int, int, int, frozenset[str] | None]


@dataclass(frozen=True, slots=True)
class WholeNodeRequest:
    """One class of whole-node request and its share of the history's pods."""

    gpus: int
    cpu_milli: int
    memory: int
    models: frozenset[str] | None  # None: any model
    share: float

    def needs_at_least(self, other: WholeNodeRequest) -> bool:
        """Whether every node holding this request holds `other` too: this one asks at
        least as much of everything, on no more models."""
        if self.gpus < other.gpus or self.cpu_milli < other.cpu_milli:
            return False
        if self.memory < other.memory:
            return False
        if other.models is None:
            return True
        return self.models is not None and self.models <= other.models

    def held(self, node: NodeInfo, cpu_free: int, memory_free: int, taken: frozenset[int]) -> bool:
        """Whether `node`, with that CPU and memory free and the devices in `taken` no
        longer whole, could take a pod of this class."""
        if cpu_free < self.cpu_milli or memory_free < self.memory:
            return False
        # The model as pods constrain it (the product label their node affinity
        # matches), not the name the node agent reads from the driver, which differs.
        if self.models is not None and node_model(node) not in self.models:
            return False
        whole = 0
        for device, free in zip(node.devices, node.gpu_free, strict=True):
            if device.healthy and free >= MILLI_PER_GPU and device.index not in taken:
                whole += 1
                if whole >= self.gpus:
                    return True
        return False


class WholeNodeReserve:
    """The classes of whole-node request and how to size their reserve (module doc)."""

    def __init__(
        self,
        requests: Sequence[WholeNodeRequest],
        mean_gpu_milli: float,
        last_resort: LastResort = "any",
        margin: float = 1.0,
    ) -> None:
        if margin <= 0:
            raise ValueError(f"margin must be > 0, not {margin}")
        if mean_gpu_milli < 0:
            raise ValueError(f"mean_gpu_milli must be >= 0, not {mean_gpu_milli}")
        if last_resort not in LAST_RESORTS:
            raise ValueError(f"last_resort must be one of {LAST_RESORTS}, not {last_resort!r}")
        self.requests = tuple(requests)
        self.last_resort = last_resort
        self.mean_gpu_milli = mean_gpu_milli
        self.margin = margin
        # Per class k: the bitmask of classes whose pods count in k's reserve (k itself
        # and those needing at least as much), and their summed share.
        self.counted: tuple[int, ...] = tuple(
            sum(1 << j for j, other in enumerate(self.requests) if other.needs_at_least(request))
            for request in self.requests
        )
        self.shares: tuple[float, ...] = tuple(
            sum(other.share for j, other in enumerate(self.requests) if mask >> j & 1)
            for mask in self.counted
        )

    @classmethod
    def from_pods(
        cls, history: Sequence[PodInfo], last_resort: LastResort = "any", margin: float = 1.0
    ) -> WholeNodeReserve:
        """Classes from the pods asking the most whole GPUs of `history` (none when no
        pod asks a whole GPU)."""
        counts: dict[_RequestKey, float] = {}
        for pod in history:
            key = (
                pod.gpu.count if pod.gpu.milli >= MILLI_PER_GPU else 0,
                pod.requests.get(CPU, 0),
                pod.requests.get(MEMORY, 0),
                allowed_models(pod),
            )
            counts[key] = counts.get(key, 0) + 1
        total_milli = sum(pod.gpu.total_milli for pod in history)
        return cls._from_counts(counts, total_milli, last_resort, margin)

    @classmethod
    def from_shape_counts(
        cls,
        counts: Mapping[WorkloadShape, float],
        last_resort: LastResort = "any",
        margin: float = 1.0,
        cluster: LargestNodes | None = None,
        whole_gpu_requests: Mapping[tuple[WorkloadShape, int], float] | None = None,
    ) -> WholeNodeReserve:
        """Classes from pods counted per workload shape (an OnlineWorkload's counts, or
        a TargetWorkload's shares: only proportions matter), as `from_pods` makes them.
        A shape does not record memory: with `whole_gpu_requests` (an OnlineWorkload's,
        the pods asking whole GPUs counted per shape and memory request), those pods
        are counted from there and a class asks the memory its pods ask; without it, a
        class asks no memory of the nodes that hold it. With `cluster`, the requests no
        node could run are left out (policies/node_builds.py): neither a class nor
        expected demand."""
        requests = [
            (shape, 0, count)
            for shape, count in counts.items()
            if whole_gpu_requests is None or shape.gpu_milli < MILLI_PER_GPU
        ]
        if whole_gpu_requests is not None:
            requests += [(shape, memory, n) for (shape, memory), n in whole_gpu_requests.items()]
        keyed: dict[_RequestKey, float] = {}
        total_milli = 0.0
        for shape, memory, count in requests:
            if cluster is not None and not cluster.could_run(shape, memory):
                continue
            whole = shape.gpu_count if shape.gpu_milli >= MILLI_PER_GPU else 0
            key = (whole, shape.cpu_milli, memory, shape.models)
            keyed[key] = keyed.get(key, 0) + count
            total_milli += count * shape.gpu_count * shape.gpu_milli
        return cls._from_counts(keyed, total_milli, last_resort, margin)

    @classmethod
    def _from_counts(
        cls,
        counts: Mapping[_RequestKey, float],
        total_milli: float,
        last_resort: LastResort,
        margin: float,
    ) -> WholeNodeReserve:
        """Classes from pods counted per (whole GPUs, CPU, memory, models) request
        (whole GPUs 0 for a fractional or CPU-only pod), and the GPU milli they ask in
        all."""
        largest = max((key[0] for key in counts), default=0)
        total = sum(counts.values())
        if not total or largest < 1:
            return cls((), 0.0, last_resort, margin)
        kept = sorted(
            ((key, count) for key, count in counts.items() if key[0] == largest),
            key=lambda item: (-item[1], item[0][1], item[0][2]),
        )
        requests = [
            WholeNodeRequest(largest, cpu, memory, models, count / total)
            for (_, cpu, memory, models), count in kept[:MAX_CLASSES]
        ]
        return cls(requests, total_milli / total, last_resort, margin)

    def current(self, cluster: Callable[[], LargestNodes] | None = None) -> WholeNodeReserve:
        """A fixed reserve is its own current one (ReserveSource): its classes were
        chosen by whoever gave the history or shares, and the cluster is not read."""
        return self

    def held(self, node: NodeInfo, among: int = -1) -> int:
        """The bitmask of classes `node` could take a pod of now (of those in `among`;
        -1: every class)."""
        if node.unschedulable or not self.requests:
            return 0
        cpu, memory = node.free(CPU), node.free(MEMORY)
        mask = 0
        for k, request in enumerate(self.requests):
            if among >> k & 1 and request.held(node, cpu, memory, frozenset()):
                mask |= 1 << k
        return mask

    def held_after(self, node: NodeInfo, pod: PodInfo, shares: DeviceShares, among: int) -> int:
        """Of the classes in `among`, those `node` could still take with `pod` placed
        on it on `shares`."""
        cpu = node.free(CPU) - pod.requests.get(CPU, 0)
        memory = node.free(MEMORY) - pod.requests.get(MEMORY, 0)
        taken = frozenset(index for index, milli in shares if milli > 0)
        mask = 0
        for k, request in enumerate(self.requests):
            if among >> k & 1 and request.held(node, cpu, memory, taken):
                mask |= 1 << k
        return mask

    def served_by(self, pod: PodInfo) -> int:
        """The bitmask of classes whose reserve `pod` may use: those it counts in (it
        is of the class or needs at least as much)."""
        mask = 0
        own = WholeNodeRequest(
            pod.gpu.count if pod.gpu.milli >= MILLI_PER_GPU else 0,
            pod.requests.get(CPU, 0),
            pod.requests.get(MEMORY, 0),
            allowed_models(pod),
            0.0,
        )
        for k, request in enumerate(self.requests):
            if own.needs_at_least(request):
                mask |= 1 << k
        return mask

    def reserve(self, free_gpu_milli: int) -> list[int]:
        """Per class, the nodes to keep able to hold it: the pods counted in it that the
        free GPU capacity is expected to bring, times the margin, rounded up."""
        if self.mean_gpu_milli <= 0:
            return [0] * len(self.requests)
        arrivals = max(0, free_gpu_milli) / self.mean_gpu_milli
        return [math.ceil(self.margin * share * arrivals - 1e-9) for share in self.shares]

    def short(self, counts: Sequence[int], free_gpu_milli: int) -> int:
        """The bitmask of classes held by no more nodes than their reserve."""
        mask = 0
        for k, (count, kept) in enumerate(zip(counts, self.reserve(free_gpu_milli), strict=True)):
            if kept > 0 and count <= kept:
                mask |= 1 << k
        return mask


class ReserveSource(Protocol):
    def current(self, cluster: Callable[[], LargestNodes] | None = None) -> WholeNodeReserve:
        """The reserve to apply now; `cluster` gives the cluster's LargestNodes, for a
        source that leaves out the requests no node could run."""
        ...


class LearnedWholeNodeReserve:
    """A reserve whose classes and shares follow the pods an OnlineWorkload has seen,
    as a live cluster, which has no trace to read, must learn them: rebuilt each time
    the pods observed grow by `growth` (fragmentation.rebuild_due). A class asks the
    memory its pods ask (OnlineWorkload.whole_gpu_requests), so a node whose memory
    other pods took no longer counts as kept for it. Until a pod asking whole GPUs has
    been seen there is no class, and nothing is reserved.

    What is learnt is what tenants ask, so the pods no node of the cluster could run
    are left out (policies/node_builds.py, when the caller gives the cluster's
    LargestNodes): rebuilt too when those figures change."""

    def __init__(
        self,
        workload: OnlineWorkload,
        last_resort: LastResort = "any",
        margin: float = 1.0,
        growth: float = REBUILD_GROWTH,
    ) -> None:
        self.workload = workload
        self.last_resort = last_resort
        self.margin = margin
        self._cluster: LargestNodes | None = None  # the figures the classes were chosen by
        self._relearnt = Relearnt(
            workload,
            lambda counts: WholeNodeReserve.from_shape_counts(
                counts, last_resort, margin, self._cluster, workload.whole_gpu_requests()
            ),
            growth,
        )

    def current(self, cluster: Callable[[], LargestNodes] | None = None) -> WholeNodeReserve:
        if cluster is not None:
            largest = cluster()
            if largest != self._cluster:
                self._cluster = largest
                self._relearnt.invalidate()
        return self._relearnt.current()


class ReserveGuard:
    """For one pod at one moment: whether placing it on a node breaks a short class."""

    __slots__ = ("pod", "reserve", "short")

    def __init__(self, reserve: WholeNodeReserve, pod: PodInfo, short: int) -> None:
        self.reserve = reserve
        self.pod = pod
        self.short = short

    def breaks(self, node: NodeInfo, shares: DeviceShares) -> bool:
        held = self.reserve.held(node, self.short)
        if not held:
            return False
        return self.reserve.held_after(node, self.pod, shares, held) != held

    def strands(self, node: NodeInfo, shares: DeviceShares) -> bool:
        """Whether the pod takes a larger share of the node's free CPU or memory than
        of its free GPU milli."""
        gpu_free = node.free_gpu_milli
        gpu = sum(milli for _, milli in shares) / gpu_free if gpu_free > 0 else 1.0
        for name in (CPU, MEMORY):
            free = node.free(name)
            if free > 0 and self.pod.requests.get(name, 0) / free > gpu:
                return True
        return False

    def may_break(self, node: NodeInfo, shares: DeviceShares) -> bool:
        """As a last resort (no feasible node keeps the reserve): whether the pod may
        go to this node."""
        mode = self.reserve.last_resort
        if mode == "any":
            return True
        if mode == "none":
            return not self.breaks(node, shares)
        return not self.breaks(node, shares) or not self.strands(node, shares)


def _count_change(counts: list[int], old_mask: int, new_mask: int) -> None:
    """Move the per-class node counts from a node holding `old_mask` to `new_mask`."""
    changed = old_mask ^ new_mask
    k = 0
    while changed:
        if changed & 1:
            counts[k] += 1 if new_mask >> k & 1 else -1
        changed >>= 1
        k += 1


class ReserveLedger:
    """The cluster summary the reserve reads: per class, how many nodes hold it, and the
    free GPU milli; kept per node so that a caller catches it up with the nodes that
    changed (the snapshot's change log), not every node."""

    def __init__(self, reserve: WholeNodeReserve) -> None:
        self.reserve = reserve
        self.generation = -1
        self._held: dict[str, int] = {}
        self._free: dict[str, int] = {}
        self.counts = [0] * len(reserve.requests)
        self.free_gpu_milli = 0

    def update(self, nodes: Mapping[str, NodeInfo], names: Iterable[str]) -> None:
        """Re-read the named nodes (absent from `nodes`: gone)."""
        counts = self.counts
        for name in names:
            old_mask = self._held.pop(name, 0)
            self.free_gpu_milli -= self._free.pop(name, 0)
            node = nodes.get(name)
            mask = 0
            if node is not None:
                mask = self.reserve.held(node)
                free = node.free_gpu_milli
                self._held[name] = mask
                self._free[name] = free
                self.free_gpu_milli += free
            _count_change(counts, old_mask, mask)

    def planned(self, node: NodeInfo) -> PlannedNode:
        """What the guard reads of a node as a caller's plan has changed it."""
        return node.name, self.reserve.held(node), node.free_gpu_milli

    def guard(self, pod: PodInfo, planned: Iterable[PlannedNode] = ()) -> ReserveGuard | None:
        """The guard for `pod`, or None when no class it may not use is short. `planned`:
        the nodes the caller's plan already changed (earlier members of the same gang),
        as `planned` reads them; the ledger knows what they were before."""
        reserve = self.reserve
        if not reserve.requests:
            return None
        counts = self.counts
        free = self.free_gpu_milli
        adjusted = False
        for name, held, free_after in planned:
            if not adjusted:
                counts = list(counts)
                adjusted = True
            _count_change(counts, self._held.get(name, 0), held)
            free += free_after - self._free.get(name, 0)
        short = reserve.short(counts, free) & ~reserve.served_by(pod)
        return ReserveGuard(reserve, pod, short) if short else None
