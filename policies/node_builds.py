"""What the cluster's nodes are built with, for what is learnt from tenants' pods.

The reserves learnt from the pods seen (policies/whole_node_reserve.py,
policies/model_reserve.py) count what tenants ask, and a tenant can ask what no node
could ever run: 200 GPUs, more CPU or memory than any node has, 8 GPUs of a model no
node has.
Such a pod never runs, so it is no demand to reserve for; counted, a single one would
be the "largest request" the whole-node reserve keeps nodes for, in place of the real
8-GPU workers, and would weigh as 200 one-GPU pods in a model's pinned demand. So both
leave out the requests `LargestNodes.could_run` says no node is built to take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cache.node import NodeInfo
from cache.resources import CPU, MEMORY, MILLI_PER_GPU
from policies.scores.fragmentation import WorkloadShape, node_model

# What one node is built with, as a pod asks it: allocatable CPU milli and memory, its
# GPU model as pods constrain it (the product label, else the model the node agent
# reported), and its GPU devices.
NodeBuild = tuple[int, int, str, int]


def build_of(node: NodeInfo) -> NodeBuild:
    allocatable = node.allocatable
    return allocatable.get(CPU, 0), allocatable.get(MEMORY, 0), node_model(node), len(node.devices)


@dataclass(frozen=True, slots=True)
class LargestNodes:
    """The most any one node of the cluster is built with: CPU, memory, GPU devices, and
    GPU devices on a node of each model. A request asking more of any of them runs on
    no node, now or later. Each figure is a maximum on its own (the node with the most
    CPU need not be the one with the most GPUs), so a request is left out only when it
    surely cannot run."""

    cpu_milli: int = 0
    gpus: int = 0
    gpus_by_model: tuple[tuple[str, int], ...] = ()
    memory: int = 0

    @classmethod
    def of(cls, builds: Iterable[NodeBuild]) -> LargestNodes:
        cpu = memory = gpus = 0
        by_model: dict[str, int] = {}
        for node_cpu, node_memory, model, devices in builds:
            cpu, memory, gpus = max(cpu, node_cpu), max(memory, node_memory), max(gpus, devices)
            if devices:
                by_model[model] = max(by_model.get(model, 0), devices)
        return cls(cpu, gpus, tuple(sorted(by_model.items())), memory)

    def could_run(self, shape: WorkloadShape, memory: int = 0) -> bool:
        """Whether some node is built to take a pod of this shape (asking that much
        memory): its devices (whole or a share of one each) of an allowed model, its
        CPU and memory."""
        devices = shape.gpu_count if shape.gpu_milli else 0
        if devices > self.gpus or shape.cpu_milli > self.cpu_milli or memory > self.memory:
            return False
        if shape.models is None or not devices:
            return True
        return any(count >= devices for model, count in self.gpus_by_model if model in shape.models)


class NodeBuilds:
    """The cluster's LargestNodes, caught up from the snapshot's change log by its caller:
    per node only what it is built with, so that the figures are recomputed only when a
    node comes, goes, or changes its build (rare), not when pods bind."""

    def __init__(self) -> None:
        self.generation = -1
        self._builds: dict[str, NodeBuild] = {}
        self.largest = LargestNodes()
        self.totals: tuple[int, int] = (0, 0)

    def update(self, nodes: Mapping[str, NodeInfo], names: Iterable[str]) -> None:
        """Re-read the named nodes (absent from `nodes`: gone)."""
        builds = self._builds
        changed = False
        for name in names:
            node = nodes.get(name)
            build = build_of(node) if node is not None else None
            if builds.get(name) == build:
                continue
            changed = True
            if build is None:
                del builds[name]
            else:
                builds[name] = build
        if changed:
            self.largest = LargestNodes.of(builds.values())
            # All the nodes' allocatable CPU and GPU milli (policies/cpu_bound.py).
            self.totals = (
                sum(build[0] for build in builds.values()),
                sum(build[3] for build in builds.values()) * MILLI_PER_GPU,
            )
