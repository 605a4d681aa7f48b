"""Kubernetes Node objects for runs without a cluster: the simulator's clusters, the
demo, the benchmarks and the tests all build their nodes here, in the JSON form the API
server returns, so that the cache reads them exactly as it reads real ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cache.gpu import COUNT_LABEL, PRODUCT_LABEL, TOPOLOGY_ANNOTATION, GpuDevice, format_topology
from cache.resources import MILLI_PER_GPU, SHARED_GPU, WHOLE_GPU

HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"


def nvlink_links(count: int, links: int = 12) -> list[list[str]]:
    """Every pair on NVLink, as a DGX A100 reports (`NV12`)."""
    return [["X" if i == j else f"NV{links}" for j in range(count)] for i in range(count)]


def pcie_links(count: int, per_switch: int = 2) -> list[list[str]]:
    """GPUs behind PCIe switches of `per_switch`: PIX on one switch, SYS across."""
    return [
        [
            "X" if i == j else ("PIX" if i // per_switch == j // per_switch else "SYS")
            for j in range(count)
        ]
        for i in range(count)
    ]


def node_object(
    name: str,
    *,
    cpu: str,
    memory: str,
    pods: int = 110,
    gpus: int = 0,
    model: str = "",
    labels: Mapping[str, str] | None = None,
    links: Sequence[Sequence[str]] | None = None,
    gpu_memory_mib: int = 0,
    extra: Mapping[str, str] | None = None,
    resource_version: str = "1",
) -> dict[str, Any]:
    """A Node with `gpus` GPUs advertised as `nvidia.com/gpu` and `nvidia.com/vgpu` (1000
    per GPU), GPU feature discovery labels, and with `links` (an `nvidia-smi topo -m`
    matrix) the node agent's topology annotation: devices `GPU-<node>-<i>`, the first
    half on NUMA node 0."""
    all_labels = {HOSTNAME_LABEL: name, **(labels or {})}
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    annotations: dict[str, str] = {}
    if gpus:
        if model:
            all_labels[PRODUCT_LABEL] = model
        all_labels[COUNT_LABEL] = str(gpus)
        allocatable[WHOLE_GPU] = str(gpus)
        allocatable[SHARED_GPU] = str(gpus * MILLI_PER_GPU)
        if links is not None:
            devices = [
                GpuDevice(i, f"GPU-{name}-{i}", model, gpu_memory_mib, i * 2 // gpus)
                for i in range(gpus)
            ]
            annotations[TOPOLOGY_ANNOTATION] = format_topology(devices, links)
    allocatable.update(extra or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": annotations,
            "resourceVersion": resource_version,
        },
        "spec": {},
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }
