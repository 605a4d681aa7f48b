"""A reserve per GPU model for the pods pinned to it: pods that may run anywhere are
steered away from a model while taking its GPUs or CPU would cut into what the pods
pinned to that model are still expected to need.

Why: on a cluster of several GPU models where some pods may only run on some models
(the openb gpuspec traces: a fifth to a third of GPU pods name their models), a
placement score judges each node alone, and the small nodes of a scarce model (P100,
V100) are often the tightest fit for an unpinned share or 1-GPU pod. Those pods then
take GPUs and CPU there that only pinned pods could have used, while the plentiful
model (G2) keeps room that fits them as well; pinned pods arriving later fail. No
per-node score sees this: whether a model is short is a sum over all its nodes.

The reserve of model m is the GPU milli (and CPU milli) that pods pinned to m are
expected to ask while the cluster fills once: their share of the expected GPU demand
(from the shape distribution of a known workload, never its arrival order) times the
cluster's GPU milli. A pod allowing several models counts on each in proportion to its
GPUs. What pinned pods already run on m is taken off its reserve, so

    left_m      = max(0, reserve_m - pinned pods' use of m)
    available_m = free on m - left_m                    (GPU milli, and CPU milli)

A pod without a model constraint *prefers* the nodes of models whose available GPU and
CPU cover its request (GPU only when it asks for some): its scores still rank the
nodes, and it is placed on the best ranked node of a model it does not cut into, or,
when no such node fits, on the best ranked node at all. It is a preference, never a
filter: a reserve never makes a pod fail. A model without pinned demand has no reserve
and is always open; pods with a model constraint are not steered.

The ledger follows the snapshot's change log (`Snapshot.changed_since`), so a call
costs the nodes changed since the last one, not a pass over the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import CPU
from cache.snapshot import Snapshot
from policies.gpu_models import allowed_models
from policies.scores.fragmentation import node_model


@dataclass(frozen=True, slots=True)
class PinnedDemand:
    """Per GPU model, the GPU milli and CPU milli of model-pinned pods as a fraction of
    the GPU milli of all pods of a workload; a pod allowing several models is split
    over them in proportion to `model_gpus` (the cluster's GPUs per model) when known,
    evenly otherwise."""

    gpu_fraction: Mapping[str, float]
    cpu_per_gpu_milli: Mapping[str, float]

    @classmethod
    def from_pods(
        cls, pods: Iterable[PodInfo], model_gpus: Mapping[str, int] | None = None
    ) -> PinnedDemand:
        gpu: dict[str, float] = {}
        cpu: dict[str, float] = {}
        total = 0
        for pod in pods:
            milli = pod.gpu.total_milli
            if not milli:
                continue
            total += milli
            models = allowed_models(pod)
            if models is None:
                continue
            weights = {m: float((model_gpus or {}).get(m, 0)) for m in models}
            if model_gpus is None:
                weights = dict.fromkeys(models, 1.0)
            whole = sum(weights.values())
            if not whole:
                continue  # none of its models is in the cluster: it never runs
            for model, weight in weights.items():
                part = weight / whole
                gpu[model] = gpu.get(model, 0.0) + part * milli
                cpu[model] = cpu.get(model, 0.0) + part * pod.requests.get(CPU, 0)
        if not total:
            return cls({}, {})
        return cls(
            {m: v / total for m, v in gpu.items()},
            {m: v / total for m, v in cpu.items()},
        )


@dataclass(slots=True)
class _NodeEntry:
    model: str
    free_gpu: int
    free_cpu: int
    pinned_gpu: int
    pinned_cpu: int


@dataclass(slots=True)
class ModelTotals:
    """Sums over a model's nodes (milli)."""

    free_gpu: int = 0
    free_cpu: int = 0
    pinned_gpu: int = 0
    pinned_cpu: int = 0
    gpus: int = 0

    def add(self, entry: _NodeEntry, sign: int) -> None:
        self.free_gpu += sign * entry.free_gpu
        self.free_cpu += sign * entry.free_cpu
        self.pinned_gpu += sign * entry.pinned_gpu
        self.pinned_cpu += sign * entry.pinned_cpu


def _entry(node: NodeInfo, pods: Iterable[PodInfo]) -> _NodeEntry:
    pinned_gpu = pinned_cpu = 0
    for pod in pods:
        if pod.gpu.count and allowed_models(pod) is not None:
            pinned_gpu += pod.gpu.total_milli
            pinned_cpu += pod.requests.get(CPU, 0)
    return _NodeEntry(
        node_model(node),
        sum(milli for milli in node.usable_free() if milli > 0),
        max(0, node.free(CPU)),
        pinned_gpu,
        pinned_cpu,
    )


@dataclass
class ModelReserve:
    """The node preference of the module docstring. `history`: the workload whose
    shape distribution sets the reserves (the trace's pods, as FGD's target workload);
    `horizon`: how many cluster-fulls of expected demand the reserve covers."""

    history: tuple[PodInfo, ...]
    horizon: float = 1.0
    name: str = "model-reserve"
    _entries: dict[str, _NodeEntry] = field(default_factory=dict, init=False)
    _totals: dict[str, ModelTotals] = field(default_factory=dict, init=False)
    _reserve: dict[str, tuple[float, float]] = field(default_factory=dict, init=False)
    _snapshot: Snapshot | None = field(default=None, init=False)
    _generation: int = field(default=-1, init=False)
    _labels_generation: int = field(default=-1, init=False)

    def __post_init__(self) -> None:
        if not self.horizon >= 0.0:
            raise ValueError(f"horizon must be >= 0, not {self.horizon}")

    # --- the ledger -------------------------------------------------------------------
    def _catch_up(self, snapshot: Snapshot) -> None:
        rebuild = (
            snapshot is not self._snapshot
            or snapshot.labels_generation != self._labels_generation
            or not snapshot.remembers(self._generation)
        )
        if rebuild:
            self._entries.clear()
            self._totals.clear()
            names: Iterable[str] = snapshot.nodes.keys()
        else:
            names = snapshot.changed_since(self._generation)
        on_node = snapshot.pods.on_node
        for name in names:
            old = self._entries.pop(name, None)
            if old is not None:
                self._totals[old.model].add(old, -1)
            node = snapshot.nodes.get(name)
            if node is None:
                continue
            entry = self._entries[name] = _entry(node, on_node.get(name, ()))
            totals = self._totals.setdefault(entry.model, ModelTotals())
            totals.add(entry, 1)
            if rebuild:
                totals.gpus += len(node.devices)
        if rebuild:
            self._set_reserves()
        self._snapshot = snapshot
        self._generation = snapshot.generation
        self._labels_generation = snapshot.labels_generation

    def _set_reserves(self) -> None:
        model_gpus = {model: totals.gpus for model, totals in self._totals.items()}
        demand = PinnedDemand.from_pods(self.history, model_gpus)
        cluster_milli = 1000 * sum(model_gpus.values()) * self.horizon
        self._reserve = {
            model: (
                fraction * cluster_milli,
                demand.cpu_per_gpu_milli.get(model, 0.0) * cluster_milli,
            )
            for model, fraction in demand.gpu_fraction.items()
        }

    def available(self, snapshot: Snapshot) -> dict[str, tuple[float, float]]:
        """Per model with a reserve: (GPU milli, CPU milli) free beyond what its pinned
        pods are still expected to need (negative: the reserve is already cut into)."""
        self._catch_up(snapshot)
        out: dict[str, tuple[float, float]] = {}
        for model, (gpu, cpu) in self._reserve.items():
            totals = self._totals.get(model)
            if totals is None:
                continue
            left_gpu = max(0.0, gpu - totals.pinned_gpu)
            left_cpu = max(0.0, cpu - totals.pinned_cpu)
            out[model] = (totals.free_gpu - left_gpu, totals.free_cpu - left_cpu)
        return out

    # --- the preference ---------------------------------------------------------------
    def preferred(self, pod: PodInfo, snapshot: Snapshot) -> Callable[[str], bool] | None:
        """A test of node names: True on the nodes `pod` should go to first; None when
        the pod is not steered (it names its models, or every model is open to it)."""
        if pod.gpu.count and allowed_models(pod) is not None:
            return None
        gpu = pod.gpu.total_milli
        cpu = pod.requests.get(CPU, 0)
        closed = {
            model
            for model, (free_gpu, free_cpu) in self.available(snapshot).items()
            if (gpu and free_gpu < gpu) or free_cpu < cpu
        }
        if not closed:
            return None
        entries = self._entries

        def open_node(name: str) -> bool:
            entry = entries.get(name)
            return entry is None or entry.model not in closed

        return open_node
