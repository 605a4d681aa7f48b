"""Fragmentation gradient descent (FGD): place a pod where it wastes the least GPU room.

From Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC'23), with the exact rules of its public
simulator as the openb trace README (shared/data/openb/README.md) writes them down.

Free GPU milli on a node is *fragmented* for a workload shape when that shape could
not use it. For one shape (all in GPU milli; idle = all free milli of the node):
- a CPU-only shape: all idle is fragmented (it uses no GPU at all);
- the node's GPU model is not one the shape allows: all idle;
- at least `gpu_count` devices each have free >= the shape's per-GPU milli and the
  node's free CPU covers the shape's CPU: only the free milli of the devices whose free
  is below the shape's per-GPU milli (the shape fits; what it cannot use is the rest);
- otherwise: all idle.
A node's fragmentation is the sum over the target workload's shapes of share x that.
The score rewards the placement that lowers the node's fragmentation the most:
`100 x sigmoid((before - after) / 1000)` (50 = no change).

The target workload (which shapes arrive, how often) comes from a provider:
- `TargetWorkload.from_pods(history)`: as the paper does, shapes counted over a known
  set of pods up front and fixed from then on;
- `OnlineWorkload`: shapes learned from the pods seen so far, as a live cluster must;
  the scheduler calls `observe(pod)` when a pod arrives.
Both keep the most frequent shapes covering 95% of pods and renormalise their shares.

Cost: the score runs for every feasible node of every pod (a trace replay: ~10^4 pods x
~10^3 nodes). Per node model, a workload's shapes are precompiled into groups by per-GPU
milli, walked in descending order against the node's free milli sorted once, so a node
costs one sort of its devices plus one comparison per shape. The score also memoises
fragmentation by node state (free milli per device, free CPU, model), since identical
states recur across nodes and across the device sets tried for one pod.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, Protocol, TypeVar

from cache.gpu import PRODUCT_LABEL, DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import CPU, MEMORY, MILLI_PER_GPU
from policies.gpu_models import allowed_models
from policies.interface import MAX_SCORE, CandidateOrder, GangContext

DEFAULT_COVERAGE = 0.95
# The scale of the sigmoid's argument: a change of one whole GPU of fragmentation moves
# the score from 50 to 73 (or 27).
SIGMOID_SCALE_MILLI = 1000.0
# Distinct shapes an OnlineWorkload counts at most (a trace of 10^5 pods has hundreds).
DEFAULT_MAX_SHAPES = 4096


@dataclass(frozen=True, slots=True)
class WorkloadShape:
    """What a pod asks for, as far as fragmentation cares: CPU, and `gpu_count` devices
    with `gpu_milli` free on each, on one of `models` (None: any model)."""

    cpu_milli: int
    gpu_milli: int = 0
    gpu_count: int = 0
    models: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.gpu_count < 0:
            raise ValueError(f"negative request in {self}")
        if self.gpu_count and not 0 < self.gpu_milli <= MILLI_PER_GPU:
            raise ValueError(f"per-GPU milli must be in 1..{MILLI_PER_GPU} in {self}")
        if not self.gpu_count and self.gpu_milli:
            raise ValueError(f"per-GPU milli without a GPU count in {self}")


def shape_of(pod: PodInfo) -> WorkloadShape:
    """The pod's workload shape. A CPU-only pod's model constraint is dropped: a CPU-only
    shape finds all idle GPU milli fragmented whatever the model."""
    if not pod.gpu.count:
        return WorkloadShape(pod.requests.get(CPU, 0))
    return WorkloadShape(
        pod.requests.get(CPU, 0), pod.gpu.milli, pod.gpu.count, allowed_models(pod)
    )


# --- target workloads ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ModelPlan:
    """A workload compiled for nodes of one GPU model.

    fragmentation = total_share x idle - sum over fitting shapes of share x (free milli
    of the devices that shape can use); `groups` holds the shapes that can fit on this
    model at all, as (per-GPU milli, ((gpu count, cpu milli, share), ...) by count),
    per-GPU milli descending so that the set of devices qualifying only grows.
    """

    total_share: float
    groups: tuple[tuple[int, tuple[tuple[int, int, float], ...]], ...]


def _check_coverage(coverage: float) -> None:
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage must be in (0, 1], not {coverage}")


def most_frequent(
    counts: Mapping[WorkloadShape, int], coverage: float = DEFAULT_COVERAGE
) -> dict[WorkloadShape, int]:
    """The most frequent shapes whose counts together first reach `coverage` of all
    (the paper's rule: 95% of pods). Among equal counts the shape met first wins."""
    _check_coverage(coverage)
    total = sum(counts.values())
    kept: dict[WorkloadShape, int] = {}
    covered = 0
    # sorted() is stable: equal counts keep the mapping's (first-seen) order.
    for shape, count in sorted(counts.items(), key=lambda item: -item[1]):
        if count <= 0 or covered >= coverage * total * (1.0 - 1e-12):
            break
        kept[shape] = count
        covered += count
    return kept


def shape_counts(pods: Iterable[PodInfo]) -> Counter[WorkloadShape]:
    """Pods counted per workload shape."""
    return Counter(shape_of(pod) for pod in pods)


class TargetWorkload:
    """Workload shapes with shares summing to 1 (weights given are renormalised).

    An empty workload is allowed (nothing observed yet): every node's fragmentation is
    then 0, and the score 50 everywhere.
    """

    __slots__ = ("_plans", "_shares")

    def __init__(self, shares: Mapping[WorkloadShape, float]) -> None:
        weights: dict[WorkloadShape, float] = {}
        for shape, weight in shares.items():
            if not 0.0 <= weight < math.inf:
                raise ValueError(f"share of {shape} must be a finite number >= 0")
            if weight:
                weights[shape] = weight
        total = sum(weights.values())
        self._shares = MappingProxyType({s: w / total for s, w in weights.items()})
        self._plans: dict[str, _ModelPlan] = {}

    @classmethod
    def from_counts(
        cls, counts: Mapping[WorkloadShape, int], coverage: float = DEFAULT_COVERAGE
    ) -> TargetWorkload:
        return cls({shape: float(n) for shape, n in most_frequent(counts, coverage).items()})

    @classmethod
    def from_pods(
        cls, pods: Iterable[PodInfo], coverage: float = DEFAULT_COVERAGE
    ) -> TargetWorkload:
        """Shapes counted over `pods` (history known up front, as the paper does); the
        most frequent ones covering `coverage` of the pods are kept."""
        return cls.from_counts(shape_counts(pods), coverage)

    @property
    def shares(self) -> Mapping[WorkloadShape, float]:
        return self._shares

    def current(self) -> TargetWorkload:
        """A fixed workload is its own provider."""
        return self

    def learning_step(self) -> int:
        """A fixed workload never moves: one step."""
        return 0

    def __len__(self) -> int:
        return len(self._shares)

    def __repr__(self) -> str:
        return f"TargetWorkload({len(self._shares)} shapes)"

    def plan_for(self, model: str) -> _ModelPlan:
        """The workload compiled for nodes whose GPU model is `model` (memoised)."""
        plan = self._plans.get(model)
        if plan is None:
            plan = self._plans[model] = self._compile(model)
        return plan

    def _compile(self, model: str) -> _ModelPlan:
        by_milli: dict[int, dict[tuple[int, int], float]] = {}
        for shape, share in self._shares.items():
            if not shape.gpu_count or (shape.models is not None and model not in shape.models):
                continue  # never fits: share x all idle, counted in total_share
            entries = by_milli.setdefault(shape.gpu_milli, {})
            key = (shape.gpu_count, shape.cpu_milli)
            entries[key] = entries.get(key, 0.0) + share
        groups = tuple(
            (milli, tuple((count, cpu, share) for (count, cpu), share in sorted(entries.items())))
            for milli, entries in sorted(by_milli.items(), reverse=True)
        )
        return _ModelPlan(sum(self._shares.values()), groups)


# A model learnt from an OnlineWorkload is rebuilt when the pods observed since its last
# build reach this fraction of those it was built from (and after each of the first
# pods): about 100 builds over the first 10^4 pods.
REBUILD_GROWTH = 0.1


def rebuild_due(observed: int, built_at: int, growth: float = REBUILD_GROWTH) -> bool:
    """Whether a model built when `built_at` pods had been observed (-1: never built)
    is due a rebuild now that `observed` have been."""
    return observed > built_at and (built_at < 0 or observed - built_at >= growth * built_at)


class OnlineWorkload:
    """A target workload learned from the pods seen so far, as a live cluster must.

    Call `observe(pod)` when a pod arrives (each pod counts once, by uid, however often
    it is retried) and `forget(uid)` when it is deleted; `current()` recomputes the
    shares (same coverage rule as `TargetWorkload.from_pods`) when `rebuild_due` says
    so: after each of the first pods, then each time the pods seen grow by `growth`.
    Moving in steps, as every model learnt from it does (Relearnt), makes the scores
    judged against it a function of pod shape and node state between two steps, which
    a planner may keep (`learning_step`); per pod, the shares of a trace barely move
    past its first thousand pods. Counts do not decay when pods go: the shares describe
    every pod seen since the start. Memory is bounded: per pod, only the uids of pods
    that still exist are kept; per shape, at most `max_shapes` shapes are counted (a
    tenant creating pods of ever new CPU sizes would otherwise grow the counts without
    end): past that, the rarer half is dropped, which the coverage rule (the most
    frequent shapes covering 95% of pods) barely notices.

    Beside the shapes, the pods asking whole GPUs are counted per (shape, memory
    request), bounded alike (`whole_gpu_requests`): a shape leaves memory out, which
    fragmentation does not need, but a node kept whole for such pods must keep their
    memory free too (LearnedWholeNodeReserve).
    """

    def __init__(
        self,
        coverage: float = DEFAULT_COVERAGE,
        max_shapes: int = DEFAULT_MAX_SHAPES,
        growth: float = REBUILD_GROWTH,
    ) -> None:
        _check_coverage(coverage)
        if max_shapes < 2:
            raise ValueError(f"max_shapes must be at least 2, not {max_shapes}")
        if not growth >= 0.0:
            raise ValueError(f"growth must be >= 0, not {growth}")
        self.coverage = coverage
        self.max_shapes = max_shapes
        self.growth = growth
        self._counts: Counter[WorkloadShape] = Counter()
        self._whole_gpu_requests: Counter[tuple[WorkloadShape, int]] = Counter()
        self._seen: set[str] = set()
        self._observed = 0
        self._current = TargetWorkload({})
        self._built_at = 0  # pods observed when `_current` was built

    def observe(self, pod: PodInfo) -> bool:
        """Count the pod's shape; False when this pod was already counted, or when its
        request is one the scheduler refuses (it has problems; it is never placed)."""
        if pod.uid in self._seen or pod.problems:
            return False
        try:
            shape = shape_of(pod)
        except ValueError:
            return False  # not a shape a placed pod can have
        self._seen.add(pod.uid)
        self._observed += 1
        self._counts = _count_bounded(self._counts, shape, self.max_shapes)
        if shape.gpu_milli >= MILLI_PER_GPU:
            request = (shape, pod.requests.get(MEMORY, 0))
            self._whole_gpu_requests = _count_bounded(
                self._whole_gpu_requests, request, self.max_shapes
            )
        return True

    def forget(self, uid: str) -> None:
        """The pod is gone: its shape stays counted, its uid is no longer kept."""
        self._seen.discard(uid)

    @property
    def observed(self) -> int:
        """Pods counted since the start."""
        return self._observed

    @property
    def tracked(self) -> int:
        """Pods whose uid is kept (observed and not yet deleted)."""
        return len(self._seen)

    @property
    def shapes(self) -> int:
        return len(self._counts)

    def shape_counts(self) -> Mapping[WorkloadShape, int]:
        """Pods counted per shape, every shape kept (no coverage cut: a score that
        needs the rare shapes, such as share completion, reads them here)."""
        return MappingProxyType(self._counts)

    def whole_gpu_requests(self) -> Mapping[tuple[WorkloadShape, int], int]:
        """The pods asking whole GPUs counted per (shape, memory request in bytes)."""
        return MappingProxyType(self._whole_gpu_requests)

    def current(self) -> TargetWorkload:
        if rebuild_due(self._observed, self._built_at, self.growth):
            self._current = TargetWorkload.from_counts(self._counts, self.coverage)
            self._built_at = self._observed
        return self._current

    def learning_step(self) -> int:
        """Which of its steps `current()` is at: the pods observed when it was built."""
        self.current()
        return self._built_at


Counted = TypeVar("Counted")


def _count_bounded(counts: Counter[Counted], key: Counted, limit: int) -> Counter[Counted]:
    """`counts` with one more of `key`; when `key` is new and `limit` keys are counted
    already, the rarer half is dropped first (a new Counter is returned)."""
    if key not in counts and len(counts) >= limit:
        # most_common() is stable: among equal counts the first seen are kept.
        counts = Counter(dict(counts.most_common(limit // 2)))
    counts[key] += 1
    return counts


Model = TypeVar("Model")


class Relearnt(Generic[Model]):
    """A model built from an OnlineWorkload's pods counted per shape, rebuilt when
    `rebuild_due` says so: what the learnt scores and reserves of a live cluster share."""

    def __init__(
        self,
        workload: OnlineWorkload,
        build: Callable[[Mapping[WorkloadShape, int]], Model],
        growth: float = REBUILD_GROWTH,
    ) -> None:
        if not growth >= 0.0:
            raise ValueError(f"growth must be >= 0, not {growth}")
        self.workload = workload
        self.growth = growth
        self._build = build
        self._model = build({})
        self._built_at = -1  # pods the workload had observed at the last build
        self._builds = 0

    def invalidate(self) -> None:
        """What the model is built from besides the counts changed: rebuild it at the
        next `current`."""
        self._built_at = -1

    def learning_step(self) -> int:
        """Which build `current()` answers (they are numbered)."""
        self.current()
        return self._builds

    def current(self) -> Model:
        seen = self.workload.observed
        if rebuild_due(seen, self._built_at, self.growth):
            self._model = self._build(self.workload.shape_counts())
            self._built_at = seen
            self._builds += 1
        return self._model


class WorkloadProvider(Protocol):
    def current(self) -> TargetWorkload:
        """The target workload to judge fragmentation against now."""
        ...

    def learning_step(self) -> int:
        """A number that changes whenever `current()` may answer another workload:
        answers judged against it may be kept while it stays."""
        ...


# --- fragmentation ------------------------------------------------------------------------


def node_fragmentation(
    node_free_cpu: int, gpu_free: Sequence[int], model: str, workload: TargetWorkload
) -> float:
    """Expected fragmented GPU milli of a node for `workload` (module docstring).

    `gpu_free` is the usable free milli per device (0 for unhealthy devices); negative
    values are read as 0. `model` is the node's GPU model as pods constrain it.
    """
    free = sorted((milli if milli > 0 else 0 for milli in gpu_free), reverse=True)
    idle = sum(free)
    if not idle:
        return 0.0
    plan = workload.plan_for(model)
    devices = len(free)
    qualifying = 0  # devices with free >= the current per-GPU milli: free[:qualifying]
    qualifying_free = 0
    usable = 0.0  # sum over fitting shapes of share x free milli they can use
    for milli, entries in plan.groups:
        while qualifying < devices and free[qualifying] >= milli:
            qualifying_free += free[qualifying]
            qualifying += 1
        if not qualifying:
            continue
        for count, cpu, share in entries:
            if count > qualifying:
                break
            if cpu <= node_free_cpu:
                usable += share * qualifying_free
    fragmented = plan.total_share * idle - usable
    return fragmented if fragmented > 0.0 else 0.0


def node_model(node: NodeInfo) -> str:
    """The node's GPU model as pods constrain it: the GPU feature discovery label that
    their nodeSelector/affinity match, else the model the node agent reported."""
    return node.labels.get(PRODUCT_LABEL) or node.gpu_model


def waste_change_score(change_milli: float) -> float:
    """100 x sigmoid(change / 1000): the score of a change in expected waste (positive:
    less waste), for the tie-break scores measured against FGD's (fill fragmentation,
    share completion); exp's argument floored so that a huge loss scores 0, not an
    overflow."""
    x = change_milli / SIGMOID_SCALE_MILLI
    if x >= 0:
        return MAX_SCORE / (1.0 + math.exp(-x))
    e = math.exp(max(x, -700.0))
    return MAX_SCORE * e / (1.0 + e)


def take_shares(free: list[int], shares: DeviceShares) -> None:
    """Take `shares` ((device index, milli), ...) from a node's free milli per device, in
    place; an index the list does not have is ignored, and no device goes below 0."""
    for index, milli in shares:
        if 0 <= index < len(free):
            left = free[index] - milli
            free[index] = left if left > 0 else 0


# A value of a node's state: (free milli per device clipped at 0, free CPU, GPU model).
StateValue = Callable[[tuple[int, ...], int, str], float]


def state_change(pod: PodInfo, node: NodeInfo, shares: DeviceShares, value: StateValue) -> float:
    """`value` of the node's state without the pod minus with it (the pod's `shares`
    and CPU taken): what the fragmentation and waste scores judge (positive: less)."""
    free = [milli if milli > 0 else 0 for milli in node.usable_free()]
    cpu = node.free(CPU)
    model = node_model(node)
    before = value(tuple(free), cpu, model)
    take_shares(free, shares)
    return before - value(tuple(free), cpu - pod.requests.get(CPU, 0), model)


def _sigmoid(x: float) -> float:
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


_MemoKey = tuple[tuple[int, ...], int, str]


class Fragmentation:
    """FGD score: 100 x sigmoid((fragmentation before - after) / 1000), as a float.

    `after` applies the pod's CPU and `shares` to a copy of the node's free milli; the
    node itself is never touched. Memoised per workload: a new workload from the
    provider (an OnlineWorkload at its next learning step) clears the memo.
    """

    name: str = "fragmentation"
    candidate_order: CandidateOrder | None = None

    def __init__(self, workload: WorkloadProvider, memo_size: int = 1 << 16) -> None:
        if memo_size < 1:
            raise ValueError("memo_size must be at least 1")
        self.workload = workload
        self.memo_size = memo_size
        self._memo: dict[_MemoKey, float] = {}
        self._memo_of: TargetWorkload | None = None

    # Within a learning step of its workload (a fixed one has one step; one learnt
    # online moves in steps) the score is a function of (pod, node state) that a
    # planner may keep.
    memoizable = True

    def learning_step(self) -> int:
        return self.workload.learning_step()

    def _fragmentation(
        self, free: tuple[int, ...], free_cpu: int, model: str, workload: TargetWorkload
    ) -> float:
        key = (free, free_cpu, model)
        value = self._memo.get(key)
        if value is None:
            value = node_fragmentation(free_cpu, free, model, workload)
            if len(self._memo) >= self.memo_size:
                # Oldest first (dicts keep insertion order): cheap and good enough, as
                # the states that recur most are re-inserted soon after.
                del self._memo[next(iter(self._memo))]
            self._memo[key] = value
        return value

    def fragmentation_change(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares) -> float:
        """Fragmentation before minus after placing the pod (positive: less waste)."""
        workload = self.workload.current()
        if workload is not self._memo_of:
            self._memo.clear()
            self._memo_of = workload

        def fragmentation(free: tuple[int, ...], free_cpu: int, model: str) -> float:
            return self._fragmentation(free, free_cpu, model, workload)

        return state_change(pod, node, shares, fragmentation)

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        change = self.fragmentation_change(pod, node, shares)
        return MAX_SCORE * _sigmoid(change / SIGMOID_SCALE_MILLI)
