"""Cluster files for the time-based replay: node pools in YAML, or the openb node CSV.

A YAML cluster is a list of node pools (docs/simulator.md documents every field):

    pools:
      - name: dgx            # node names: dgx-00, dgx-01, ...
        count: 16
        cpu: 128
        memory: 1Ti
        gpus: 8
        gpu_model: A100      # the nodes' nvidia.com/gpu.product label
        links: nvlink        # nvlink | pcie | none
        racks: 4             # nodes spread over topology.kubernetes.io/zone rack-0..rack-3
        rack_nodes: 8        # racks of 8 nodes: label topology.kubernetes.io/rack dgx-r0, ...
        clique_nodes: 2      # NVLink cliques of 2 nodes inside each rack: nvidia.com/gpu.clique

Each node becomes a Node object as the API server would return it, with the
`gang-scheduler.io/gpu-topology` annotation the node agent would publish (devices and
the `nvidia-smi topo -m` link matrix) unless `links: none`. Link kinds:
- `nvlink`: a DGX-like box, every pair of GPUs on NVLink (`NV12`, or `nvlinks: n`);
- `pcie`: GPUs behind PCIe switches of `gpus_per_switch` (default 2): `PIX` within a
  switch, `SYS` across;
- `none`: no topology annotation (devices are inferred from the GPU count; no links known).

`rack_nodes` and `clique_nodes` give the levels a gang may require (issue 30): racks
of consecutive nodes (label `topology.kubernetes.io/rack`, values `<pool>-r<i>`) and
multi-node NVLink domains of consecutive nodes inside each rack (label
`nvidia.com/gpu.clique`, values `<pool>-r<i>-c<j>`, or `<pool>-c<j>` without racks).

A `.csv` file is read as the openb node list (`scheduler.sim.openb.load_nodes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from cache.dra.topology import NVLINK_CLIQUE_LABEL
from cache.gpu import PRODUCT_LABEL
from cache.quantity import QuantityError, to_milli, to_units
from cache.resources import WHOLE_GPU, parse_resource_list
from scheduler.process.yamltext import YamlSyntaxError, load_yaml
from scheduler.sim.objects import ZONE_LABEL, node_object, nvlink_links, pcie_links
from scheduler.sim.openb import OpenbFormatError, load_nodes
from scheduler.sim.workload import GpuPool, TopologyLevel

DEFAULT_CLUSTER = "cluster-mixed-64.yaml"
EXAMPLE_WORKLOAD = "workload-example.yaml"
LINK_KINDS = ("nvlink", "pcie", "none")
# The rack level of `rack_nodes` (the label the issue and Kueue's examples use).
RACK_LABEL = "topology.kubernetes.io/rack"
CLIQUE_LABEL = NVLINK_CLIQUE_LABEL
PODS_PER_NODE = 110
_POOL_FIELDS = (
    "name",
    "count",
    "cpu",
    "memory",
    "gpus",
    "gpu_model",
    "gpu_memory",
    "links",
    "nvlinks",
    "gpus_per_switch",
    "racks",
    "rack_nodes",
    "clique_nodes",
    "labels",
)
_TOP_FIELDS = ("pools", "description")


class ClusterSpecError(ValueError):
    """A cluster file that cannot be read; the message names the file, pool and field."""


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    count: int
    cpu_milli: int
    memory_bytes: int
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    links: str = "none"
    nvlinks: int = 12
    gpus_per_switch: int = 2
    racks: int = 0
    # Nodes per rack (label RACK_LABEL) and per NVLink clique inside a rack
    # (CLIQUE_LABEL); 0: no such label.
    rack_nodes: int = 0
    clique_nodes: int = 0
    labels: tuple[tuple[str, str], ...] = ()


# --- reading ---------------------------------------------------------------------------------
def load_cluster(path: Path) -> list[dict[str, Any]]:
    """Node objects from a cluster file: `.csv` is the openb node list, anything else a
    YAML cluster. OSError when it cannot be read; ClusterSpecError when its content is
    not a cluster."""
    if path.suffix.lower() == ".csv":
        try:
            return load_nodes(path)
        except OpenbFormatError as error:
            raise ClusterSpecError(str(error)) from None
    return parse_cluster(path.read_text(encoding="utf-8"), str(path))


def bundled_text(filename: str) -> str:
    """A file shipped in scheduler/sim/data (package data)."""
    return resources.files("scheduler.sim").joinpath("data", filename).read_text("utf-8")


def default_cluster() -> list[dict[str, Any]]:
    """The bundled mixed cluster: 64 nodes (DGX-like and PCIe boxes) in 4 racks."""
    return parse_cluster(bundled_text(DEFAULT_CLUSTER), DEFAULT_CLUSTER)


def parse_cluster(text: str, source: str = "<cluster>") -> list[dict[str, Any]]:
    return nodes_of(parse_pools(text, source))


def parse_pools(text: str, source: str = "<cluster>") -> list[Pool]:
    try:
        data = load_yaml(text)
    except YamlSyntaxError as error:
        raise ClusterSpecError(f"{source}: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("pools"), list):
        raise ClusterSpecError(f"{source}: expected a mapping with a list 'pools'")
    for key in data:
        if key not in _TOP_FIELDS:
            raise ClusterSpecError(
                f"{source}: unknown top-level field {key!r}; known: {', '.join(_TOP_FIELDS)}"
            )
    pools: list[Pool] = []
    for position, raw in enumerate(data["pools"], start=1):
        pool = _parse_pool(raw, f"{source}: pool #{position}", source)
        if any(other.name == pool.name for other in pools):
            raise ClusterSpecError(f"{source}: pool {pool.name!r} (#{position}): name is repeated")
        pools.append(pool)
    if not pools:
        raise ClusterSpecError(f"{source}: the cluster has no pool")
    return pools


def _parse_pool(raw: object, where: str, source: str) -> Pool:
    if not isinstance(raw, dict):
        raise ClusterSpecError(f"{where}: expected a mapping with fields {', '.join(_POOL_FIELDS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not _dns_label(name):
        raise ClusterSpecError(
            f"{where}: field 'name' must be 1-50 lower-case letters, digits or '-', starting "
            f"and ending with a letter or digit, got {name!r}"
        )
    where = f"{source}: pool {name!r}"
    for key in raw:
        if key not in _POOL_FIELDS:
            raise ClusterSpecError(
                f"{where}: unknown field {key!r}; known: {', '.join(_POOL_FIELDS)}"
            )
    count = _whole(raw, "count", where, minimum=1)
    cpu = _quantity(raw, "cpu", where, milli=True, example="64")
    memory = _quantity(raw, "memory", where, milli=False, example="512Gi")
    gpus = _whole(raw, "gpus", where, minimum=0, default=0)
    model = raw.get("gpu_model")
    if gpus and (not isinstance(model, str) or not model.strip()):
        raise ClusterSpecError(f"{where}: field 'gpu_model' is needed when 'gpus' is given")
    if not gpus and model is not None:
        raise ClusterSpecError(f"{where}: field 'gpu_model' needs 'gpus'")
    gpu_memory = 0
    if raw.get("gpu_memory") is not None:
        gpu_memory = _quantity(raw, "gpu_memory", where, milli=False, example="80Gi") // 2**20
    links = raw.get("links", "none" if not gpus else None)
    if links not in LINK_KINDS:
        raise ClusterSpecError(
            f"{where}: field 'links' must be one of {', '.join(LINK_KINDS)}, got {links!r}"
        )
    if links != "none" and not gpus:
        raise ClusterSpecError(f"{where}: field 'links' needs 'gpus'")
    nvlinks = _whole(raw, "nvlinks", where, minimum=1, default=12)
    per_switch = _whole(raw, "gpus_per_switch", where, minimum=1, default=2)
    racks = _whole(raw, "racks", where, minimum=1, default=0)
    rack_nodes = _whole(raw, "rack_nodes", where, minimum=1, default=0)
    clique_nodes = _whole(raw, "clique_nodes", where, minimum=1, default=0)
    if clique_nodes and rack_nodes and clique_nodes > rack_nodes:
        raise ClusterSpecError(
            f"{where}: field 'clique_nodes' ({clique_nodes}) must not exceed 'rack_nodes' "
            f"({rack_nodes}): a clique lies inside one rack"
        )
    labels = raw.get("labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int | float | bool) for k, v in labels.items()
    ):
        raise ClusterSpecError(f"{where}: field 'labels' must map label keys to values")
    return Pool(
        name=name,
        count=count,
        cpu_milli=cpu,
        memory_bytes=memory,
        gpus=gpus,
        gpu_model=model.strip() if isinstance(model, str) else "",
        gpu_memory_mib=gpu_memory,
        links=str(links),
        nvlinks=nvlinks,
        gpus_per_switch=per_switch,
        racks=racks,
        rack_nodes=rack_nodes,
        clique_nodes=clique_nodes,
        labels=tuple(sorted((k, str(v)) for k, v in labels.items())),
    )


def _dns_label(text: str) -> bool:
    return (
        0 < len(text) <= 50
        and text[0].isalnum()
        and text[-1].isalnum()
        and all(c.isdigit() or ("a" <= c <= "z") or c == "-" for c in text)
    )


def _whole(
    raw: Mapping[str, Any], field: str, where: str, *, minimum: int, default: int | None = None
) -> int:
    value = raw.get(field)
    if value is None:
        if default is not None:
            return default
        raise ClusterSpecError(f"{where}: field {field!r} is missing")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ClusterSpecError(
            f"{where}: field {field!r} must be a whole number >= {minimum}, got {value!r}"
        )
    return value


def _quantity(raw: Mapping[str, Any], field: str, where: str, *, milli: bool, example: str) -> int:
    value = raw.get(field)
    if value is None:
        raise ClusterSpecError(f"{where}: field {field!r} is missing")
    try:
        amount = to_milli(value) if milli else to_units(value)
    except (QuantityError, ValueError, TypeError):
        amount = -1
    if amount <= 0:
        raise ClusterSpecError(
            f"{where}: field {field!r} must be a positive Kubernetes quantity "
            f"(e.g. {example}), got {value!r}"
        )
    return amount


# --- nodes -----------------------------------------------------------------------------------
def _links(pool: Pool) -> list[list[str]] | None:
    if not pool.gpus or pool.links == "none":
        return None
    if pool.links == "nvlink":
        return nvlink_links(pool.gpus, pool.nvlinks)
    return pcie_links(pool.gpus, pool.gpus_per_switch)


def nodes_of(pools: Iterable[Pool]) -> list[dict[str, Any]]:
    """Node objects for the pools, in pool order. Racks are contiguous blocks: with
    `racks: 4` and 16 nodes, nodes 0-3 are in rack-0, 4-7 in rack-1, and so on.
    `rack_nodes` and `clique_nodes` cut the pool the same way, by size: with 10 nodes,
    `rack_nodes: 4` and `clique_nodes: 2`, racks r0 (nodes 0-3), r1 (4-7), r2 (8-9),
    cliques r0-c0 (0-1), r0-c1 (2-3), r1-c0 (4-5), ... (a last rack or clique may be
    smaller)."""
    nodes: list[dict[str, Any]] = []
    for pool in pools:
        width = max(2, len(str(pool.count - 1)))
        links = _links(pool)
        for index in range(pool.count):
            name = f"{pool.name}-{index:0{width}d}"
            labels = dict(pool.labels)
            if pool.racks:
                labels[ZONE_LABEL] = f"rack-{index * pool.racks // pool.count}"
            labels.update(_level_labels(pool, index))
            nodes.append(
                node_object(
                    name,
                    cpu=f"{pool.cpu_milli}m",
                    memory=str(pool.memory_bytes),
                    pods=PODS_PER_NODE,
                    gpus=pool.gpus,
                    model=pool.gpu_model,
                    labels=labels,
                    links=links,
                    gpu_memory_mib=pool.gpu_memory_mib,
                )
            )
    return nodes


def _level_labels(pool: Pool, index: int) -> dict[str, str]:
    """The rack and clique labels of the pool's `index`-th node (none when not asked)."""
    labels: dict[str, str] = {}
    prefix = pool.name
    within = index
    if pool.rack_nodes:
        rack, within = divmod(index, pool.rack_nodes)
        prefix = f"{pool.name}-r{rack}"
        labels[RACK_LABEL] = prefix
    if pool.clique_nodes:
        labels[CLIQUE_LABEL] = f"{prefix}-c{within // pool.clique_nodes}"
    return labels


def gpu_pools(nodes: Iterable[Mapping[str, Any]]) -> list[GpuPool]:
    """GPUs per model (the product label; "" when a node has none), for the generator."""
    totals: dict[str, list[int]] = {}
    for node in nodes:
        allocatable = parse_resource_list((node.get("status") or {}).get("allocatable"))
        gpus = allocatable.get(WHOLE_GPU, 0)
        if not gpus:
            continue
        labels = (node.get("metadata") or {}).get("labels") or {}
        entry = totals.setdefault(str(labels.get(PRODUCT_LABEL, "")), [0, 0])
        entry[0] += gpus
        entry[1] = max(entry[1], gpus)
    return [GpuPool(model, total, most) for model, (total, most) in sorted(totals.items())]


def topology_levels(nodes: Iterable[Mapping[str, Any]]) -> list[TopologyLevel]:
    """The clique and rack levels the nodes carry, narrowest first, each with the GPUs of
    its largest domain (for the generator's required gangs); absent levels left out."""
    levels: list[TopologyLevel] = []
    for key in (CLIQUE_LABEL, RACK_LABEL):
        gpus: dict[str, int] = {}
        for node in nodes:
            labels = (node.get("metadata") or {}).get("labels") or {}
            value = labels.get(key)
            if value is None:
                continue
            allocatable = parse_resource_list((node.get("status") or {}).get("allocatable"))
            gpus[str(value)] = gpus.get(str(value), 0) + allocatable.get(WHOLE_GPU, 0)
        if gpus:
            levels.append(TopologyLevel(key, max(gpus.values())))
    return levels
