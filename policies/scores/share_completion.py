"""Share completion: how much of a node's free GPU milli the expected requests can still
fill, device by device, as far as the node's free CPU lets them in.

At the end of an openb replay under FGD most idle GPU milli are holes no request fills:
an 810-milli share leaves 190 that only the rare 160/110/50 shares fit, two 470 shares
leave 60, a 650 and a 230 leave 120 where a 650 and a 320 would leave 30. FGD counts a
device as usable for a shape as soon as one copy fits, and fill fragmentation
(fill_fragmentation.py) counts copies of one shape at a time; neither asks which *mix*
of the expected requests can still complete a device to 1000, nor how likely the rare
ones that a small hole needs are to come at all.

Model, per device with free milli f on a node with c free CPU milli. The requests that
can land there are the expected single-device requests (share milli m, CPU k, weight
p: every pod asking GPUs, a multi-GPU pod counting as `count` requests of 1000 milli and
its CPU split evenly) with m <= f and k <= c. The expected milli the device ends up
wasting:

    E_c(f) = f                                          when no request fits
           = (1 - a) x f + a x sum_fit (p / P) x E_c(f - m)   otherwise,
    P = sum_fit p,   a = P / (P + competition)

`a` is the chance the hole is filled at all before the cluster closes: a hole that only
rare requests fit (P small) mostly stays empty, whatever they would complete it to;
`competition` says how rare "rare" is (the total weight is 1). The CPU the requests take
is not subtracted as the recursion goes (c stays fixed), which keeps one table per
distinct CPU threshold; it still marks what matters: holes on a node whose free CPU no
request fits are waste for good.

A node's expected waste is the sum of E_c(f) over its open holes, the devices with
0 < f < 1000. An idle device counts nothing: whole-GPU requests are the commonest
device request on the openb traces, so it is not waste in waiting. (Counting it as
E_c(1000) was measured and is wrong: under the model an idle device needs several
arrivals to complete, each a chance to stay short, so a share started on it scored
better than one completing an open hole, which spread shares over fresh devices: in
fill fragmentation's place in fgd-keep-largest, 94.63% of GPU allocated at 130% load on
the default trace instead of 95.75.) The score rewards the
placement that lowers it the most, `100 x sigmoid((before - after) / 1000)` as FGD,
before with the node's free CPU, after with the pod's CPU taken (so a pod that takes
the last cores next to open holes pays for stranding them).

Measured in fill fragmentation's place in fgd-keep-largest (policy `fgd-complete` of the
simulator) and as other tie-breaks: docs/decisions.md, "Tried and not kept".
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import CPU, MILLI_PER_GPU
from policies.gpu_models import allowed_models
from policies.interface import CandidateOrder, GangContext
from policies.scores.fragmentation import (
    REBUILD_GROWTH,
    OnlineWorkload,
    Relearnt,
    WorkloadProvider,
    WorkloadShape,
    state_change,
    waste_change_score,
)

DEFAULT_COMPETITION = 0.05


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One expected request as a single device sees it: `milli` of it (1000 for a whole
    GPU) and `cpu_milli` of the node's CPU, on one of `models` (None: any model)."""

    milli: int
    cpu_milli: int
    models: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not 0 < self.milli <= MILLI_PER_GPU or self.cpu_milli < 0:
            raise ValueError(f"a device request needs 1..{MILLI_PER_GPU} milli and CPU >= 0")


def device_requests(pods: Iterable[PodInfo]) -> dict[DeviceRequest, float]:
    """Per device request, how many devices the pods ask of it: a pod asking `count`
    GPUs counts `count` times (its CPU split evenly), CPU-only pods not at all."""
    counts: dict[DeviceRequest, float] = {}
    for pod in pods:
        count = pod.gpu.count
        if count < 1 or not 0 < pod.gpu.milli <= MILLI_PER_GPU:
            continue
        request = DeviceRequest(
            pod.gpu.milli, pod.requests.get(CPU, 0) // count, allowed_models(pod)
        )
        counts[request] = counts.get(request, 0.0) + count
    return counts


def device_requests_of_shapes(shapes: Mapping[WorkloadShape, float]) -> dict[DeviceRequest, float]:
    """`device_requests` of pods counted by shape (weight: pods of that shape)."""
    counts: dict[DeviceRequest, float] = {}
    for shape, weight in shapes.items():
        count = shape.gpu_count
        if count < 1 or weight <= 0.0:
            continue
        request = DeviceRequest(shape.gpu_milli, shape.cpu_milli // count, shape.models)
        counts[request] = counts.get(request, 0.0) + weight * count
    return counts


def waste_table(
    requests: Mapping[int, float], competition: float = DEFAULT_COMPETITION
) -> tuple[float, ...]:
    """E(f) for f = 0..1000 (module docstring) for requests given as {milli: weight}
    (weights relative to the whole workload's, so that rarity counts)."""
    sizes = sorted((milli, weight) for milli, weight in requests.items() if weight > 0.0)
    table = [0.0] * (MILLI_PER_GPU + 1)
    fitting = 0  # sizes[:fitting] are <= f
    for free in range(1, MILLI_PER_GPU + 1):
        while fitting < len(sizes) and sizes[fitting][0] <= free:
            fitting += 1
        total = sum(weight for _, weight in sizes[:fitting])
        if not total:
            table[free] = float(free)
            continue
        filled = total / (total + competition)
        expected = sum(weight * table[free - milli] for milli, weight in sizes[:fitting]) / total
        table[free] = (1.0 - filled) * free + filled * expected
    return tuple(table)


class ShareCompletion:
    """Score: 100 x sigmoid((expected waste before - after) / 1000), a float."""

    name = "share-completion"
    candidate_order: CandidateOrder | None = None
    # The expected requests are fixed at construction: a function of (pod, node state).
    memoizable = True

    def __init__(
        self,
        requests: Mapping[DeviceRequest, float],
        competition: float = DEFAULT_COMPETITION,
        memo_size: int = 1 << 16,
    ) -> None:
        if not competition > 0.0:
            raise ValueError(f"competition must be > 0, not {competition}")
        total = sum(weight for weight in requests.values() if weight > 0.0)
        self._requests = {r: w / total for r, w in requests.items() if w > 0.0} if total else {}
        self.competition = competition
        self.memo_size = memo_size
        # The CPU amounts at which another request starts to fit: one table per step.
        self._cpu_steps = sorted({request.cpu_milli for request in self._requests})
        self._tables: dict[tuple[str, int], tuple[float, ...]] = {}
        self._by_mix: dict[tuple[tuple[int, float], ...], tuple[float, ...]] = {}
        self._memo: dict[tuple[tuple[int, ...], int, str], float] = {}

    @property
    def requests(self) -> Mapping[DeviceRequest, float]:
        """The expected requests, each weighted by its share of all of them."""
        return self._requests

    def _table(self, model: str, cpu: int) -> tuple[float, ...]:
        step = bisect_right(self._cpu_steps, cpu)  # requests with cpu_milli <= cpu
        key = (model, step)
        table = self._tables.get(key)
        if table is None:
            allowed = self._cpu_steps[step - 1] if step else -1
            by_milli: dict[int, float] = {}
            for request, weight in self._requests.items():
                if request.cpu_milli <= allowed and (
                    request.models is None or model in request.models
                ):
                    by_milli[request.milli] = by_milli.get(request.milli, 0.0) + weight
            # Most models see the same requests (only pinned ones differ), and a table
            # costs ~8 ms: one per distinct mix, shared by the models and steps that see it.
            mix = tuple(sorted(by_milli.items()))
            table = self._by_mix.get(mix)
            if table is None:
                table = self._by_mix[mix] = waste_table(by_milli, self.competition)
            self._tables[key] = table
        return table

    def expected_waste(self, free: tuple[int, ...], cpu: int, model: str) -> float:
        """Expected milli the node's open holes end up wasting (module docstring);
        `free` already clipped at 0."""
        key = (free, cpu, model)
        value = self._memo.get(key)
        if value is None:
            table = self._table(model, cpu)
            value = 0.0
            for milli in free:
                if 0 < milli < MILLI_PER_GPU:
                    value += table[milli]
            if len(self._memo) >= self.memo_size:
                del self._memo[next(iter(self._memo))]
            self._memo[key] = value
        return value

    def change(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares) -> float:
        """Expected waste before minus after placing the pod (positive: less waste)."""
        return state_change(pod, node, shares, self.expected_waste)

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        return waste_change_score(self.change(pod, node, shares))


# What tenants' pods can make a learnt share completion cost: each (GPU model, CPU
# step) table costs ~1000 x the distinct share sizes, so learnt requests have their
# share rounded up to SHARE_GRID_MILLI and their CPU up to one of at most
# MAX_CPU_STEPS thresholds. Rounding up only makes a request fit fewer places, so
# holes look no fuller than they are. The bundled traces' requests (multiples of 10
# milli, 40 CPU amounts) are within both: for them the learnt model is exact.
SHARE_GRID_MILLI = 10
MAX_CPU_STEPS = 64


def coarsened(requests: Mapping[DeviceRequest, float]) -> dict[DeviceRequest, float]:
    """`requests` with shares rounded up to the grid and CPU up to at most
    MAX_CPU_STEPS thresholds (the CPU amounts at evenly spaced ranks), merged."""
    amounts = sorted({request.cpu_milli for request in requests})
    if len(amounts) > MAX_CPU_STEPS:
        amounts = [
            amounts[(rank + 1) * len(amounts) // MAX_CPU_STEPS - 1] for rank in range(MAX_CPU_STEPS)
        ]
    merged: dict[DeviceRequest, float] = {}
    for request, weight in requests.items():
        milli = -(-request.milli // SHARE_GRID_MILLI) * SHARE_GRID_MILLI
        cpu = amounts[bisect_left(amounts, request.cpu_milli)]
        key = DeviceRequest(min(milli, MILLI_PER_GPU), cpu, request.models)
        merged[key] = merged.get(key, 0.0) + weight
    return merged


class LearnedShareCompletion:
    """Share completion whose expected requests follow a workload provider: an
    OnlineWorkload's pods counted per shape (every shape, the rare small shares that
    close holes included), or a fixed workload's shares. What a live cluster, which
    has no trace to read, uses (`share-completion` in policies/profile.py)."""

    name = "share-completion"
    candidate_order: CandidateOrder | None = None

    def __init__(
        self,
        workload: WorkloadProvider,
        competition: float = DEFAULT_COMPETITION,
        growth: float = REBUILD_GROWTH,
    ) -> None:
        if not competition > 0.0:
            raise ValueError(f"competition must be > 0, not {competition}")
        self.workload = workload
        self.competition = competition
        self._online = (
            Relearnt(workload, self._built, growth)
            if isinstance(workload, OnlineWorkload)
            else None
        )
        self._learnt = ShareCompletion({}, competition)
        self._built_from: object = None  # the fixed workload it was built from

    # Within a learning step (a fixed workload has one; a learnt one is rebuilt in
    # steps), a function of (pod, node state).
    memoizable = True

    def learning_step(self) -> int:
        if self._online is not None:
            return self._online.learning_step()
        return self.workload.learning_step()

    @property
    def learnt(self) -> ShareCompletion:
        """The share completion of the requests as they stand now."""
        if self._online is not None:
            return self._online.current()
        current = self.workload.current()
        if current is not self._built_from:
            self._learnt = self._built(current.shares)
            self._built_from = current
        return self._learnt

    def _built(self, shapes: Mapping[WorkloadShape, float]) -> ShareCompletion:
        return ShareCompletion(coarsened(device_requests_of_shapes(shapes)), self.competition)

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        return self.learnt.score(pod, node, shares, gang)
