"""The openb trace (Alibaba cluster-trace-gpu-v2023) and the FGD paper's protocol on it.

The rules here are the ones `scheduler/sim/data/openb/README.md` (a copy of
shared/data/openb/README.md) reads off the paper's public simulator:

- Nodes become Node objects as the API server returns them: allocatable CPU, memory,
  `nvidia.com/gpu` and `nvidia.com/vgpu` (1000 per GPU), the GPU model as the
  `nvidia.com/gpu.product` label. The trace does not limit pods per node, so every
  node allows 1000 pods (never the binding constraint: CPU runs out long before).
- Pods become Pod objects for this scheduler: a 1-GPU pod with `gpu_milli` < 1000
  asks `nvidia.com/vgpu: <milli>` (a share of ONE device), any other GPU pod asks
  `nvidia.com/gpu: <count>` (whole devices); `gpu_spec` "A|B" becomes a required node
  affinity on the product label.
- `arrival_order`: originals sorted by name and shuffled with the seed, then clones
  drawn with replacement until the requested GPU milli would pass `load` x the
  cluster's GPU milli.
- `Readings`: after every pod, (arrived, allocated); the value at X% is the mean of
  the readings whose arrived % rounds half to even to X.

Nothing here prints; `load_nodes` and `load_pods` read a file when handed a Path and
otherwise parse the text they are given.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any

from cache.gpu import PRODUCT_LABEL
from cache.pod import DEFAULT_GANG_KEYS, GangKeys, PodInfo, pod_from_api
from cache.pod_copy import copied
from cache.resources import CPU, MILLI_PER_GPU, WHOLE_GPU, parse_resource_list
from scheduler.cycle.core import DEFAULT_SCHEDULER_NAME
from scheduler.sim import objects

# Re-exported: the trace files and the load are the openb replay's, kept in a module of
# their own so that the CLI can show them without importing the simulator.
from scheduler.sim.defaults import DEFAULT_LOAD as DEFAULT_LOAD
from scheduler.sim.defaults import NODE_FILE as NODE_FILE
from scheduler.sim.defaults import TRACES as TRACES

# The trace does not limit pods per node; every bundled pod asks >= 1 CPU and no node has
# more than 128, so this never binds (Kubernetes' usual 110 could).
PODS_PER_NODE = 1000
NAMESPACE = "openb"

_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
# multigpu50 has only these five; the other pod files add gpu_spec, qos and times.
_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
# Pods are created one second apart in arrival order, from this instant.
_EPOCH = datetime(2023, 7, 10, tzinfo=UTC)
_EPOCH_SECONDS = _EPOCH.timestamp()


class OpenbFormatError(ValueError):
    """A trace file that cannot be read as the openb format; the message names the
    file and line."""


@dataclass(frozen=True, slots=True)
class OpenbPod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    # GPU models allowed (exact names); None: any model.
    gpu_spec: frozenset[str] | None = None


# --- loading ------------------------------------------------------------------------------
def _rows(source: Path | str, required: Sequence[str]) -> Iterable[tuple[str, dict[str, str]]]:
    """(where, row) for every data row; `where` is "file:line" for error messages."""
    if isinstance(source, Path):
        label = str(source)
        text = source.read_text(encoding="utf-8")
    else:
        label, text = "<text>", source
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [column for column in required if column not in header]
    if missing:
        raise OpenbFormatError(
            f"{label}:1: missing column(s) {', '.join(missing)}; expected a header with "
            f"{','.join(required)}"
        )
    for row in reader:  # blank lines are skipped by the reader
        if None in row.values() or None in row:
            raise OpenbFormatError(
                f"{label}:{reader.line_num}: expected {len(header)} fields as the header has"
            )
        yield f"{label}:{reader.line_num}", row


def _whole(row: Mapping[str, str], column: str, where: str) -> int:
    text = row[column].strip()
    if not (text.isascii() and text.isdigit()):
        raise OpenbFormatError(f"{where}: {column} must be a whole number >= 0, got {text!r}")
    return int(text)


def bundled_file(filename: str) -> str:
    """The text of a bundled openb file: NODE_FILE or one of TRACES' pod files."""
    return resources.files("scheduler.sim").joinpath("data", "openb", filename).read_text("utf-8")


def load_nodes(source: Path | str) -> list[dict[str, Any]]:
    """Node objects, in file order, from a node list (`sn,cpu_milli,memory_mib,gpu,model`).

    `source` is a Path to read or the CSV text itself."""
    nodes: list[dict[str, Any]] = []
    seen: set[str] = set()
    for where, row in _rows(source, _NODE_COLUMNS):
        name = row["sn"].strip()
        if not name or name in seen:
            raise OpenbFormatError(f"{where}: node name {name!r} is empty or repeated")
        seen.add(name)
        cpu = _whole(row, "cpu_milli", where)
        memory = _whole(row, "memory_mib", where)
        gpus = _whole(row, "gpu", where)
        model = row["model"].strip()
        nodes.append(node_object(name, cpu, memory, gpus, model))
    return nodes


def node_object(
    name: str, cpu_milli: int, memory_mib: int, gpus: int, model: str
) -> dict[str, Any]:
    """One node of the trace as the API server would return it."""
    return objects.node_object(
        name,
        cpu=f"{cpu_milli}m",
        memory=f"{memory_mib}Mi",
        pods=PODS_PER_NODE,
        gpus=gpus,
        model=model,
    )


def load_pods(source: Path | str) -> list[OpenbPod]:
    """Pods, in file order, from a pod list (the first five columns are required;
    `gpu_spec` is read when present, the rest is ignored).

    `source` is a Path to read or the CSV text itself."""
    pods: list[OpenbPod] = []
    seen: set[str] = set()
    for where, row in _rows(source, _POD_COLUMNS):
        name = row["name"].strip()
        if not name or name in seen:
            raise OpenbFormatError(f"{where}: pod name {name!r} is empty or repeated")
        seen.add(name)
        num_gpu = _whole(row, "num_gpu", where)
        gpu_milli = _whole(row, "gpu_milli", where)
        if num_gpu == 1 and gpu_milli == 0:
            raise OpenbFormatError(
                f"{where}: num_gpu is 1 but gpu_milli is 0; a 1-GPU pod names its share "
                f"(1..{MILLI_PER_GPU}, {MILLI_PER_GPU} = the whole GPU)"
            )
        spec_text = (row.get("gpu_spec") or "").strip()
        models = frozenset(m.strip() for m in spec_text.split("|") if m.strip())
        pods.append(
            OpenbPod(
                name=name,
                cpu_milli=_whole(row, "cpu_milli", where),
                memory_mib=_whole(row, "memory_mib", where),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_spec=models or None,
            )
        )
    return pods


@dataclass(frozen=True, slots=True)
class ClusterSize:
    """What the protocol and the paper's scores need to know of the whole node list."""

    total_gpu_milli: int
    # The largest node's CPU milli and GPU milli: the paper's scores divide by them.
    max_cpu_milli: int
    max_gpu_milli: int
    # All the nodes' allocatable CPU milli: what fgd-complete-reserve weighs the
    # workload's CPU against (policies/cpu_bound.py).
    total_cpu_milli: int = 0


def cluster_size(nodes: Iterable[Mapping[str, Any]]) -> ClusterSize:
    """Totals of Node objects (as `load_nodes` makes them) from their allocatable."""
    total = max_cpu = max_gpu = total_cpu = 0
    for node in nodes:
        allocatable = parse_resource_list((node.get("status") or {}).get("allocatable"))
        gpu_milli = allocatable.get(WHOLE_GPU, 0) * MILLI_PER_GPU
        total += gpu_milli
        total_cpu += allocatable.get(CPU, 0)
        max_cpu = max(max_cpu, allocatable.get(CPU, 0))
        max_gpu = max(max_gpu, gpu_milli)
    return ClusterSize(total, max_cpu, max_gpu, total_cpu)


# --- the protocol ---------------------------------------------------------------------------
def per_gpu_milli(pod: OpenbPod) -> int:
    """Milli of each GPU the pod takes: its share for a 1-GPU pod (a whole GPU at most),
    a whole GPU for a multi-GPU pod, nothing for a CPU-only pod."""
    if pod.num_gpu == 0:
        return 0
    if pod.num_gpu == 1:
        return min(pod.gpu_milli, MILLI_PER_GPU)
    return MILLI_PER_GPU


def requested_gpu_milli(pod: OpenbPod) -> int:
    """What the pod adds to "arrived": per-GPU milli x GPU count."""
    return per_gpu_milli(pod) * pod.num_gpu


def arrival_order(
    pods: Sequence[OpenbPod], total_gpu_milli: int, seed: int, load: float = DEFAULT_LOAD
) -> list[OpenbPod]:
    """The paper's arrival order: every original, sorted by name and shuffled with
    `random.Random(seed)`; then clones drawn uniformly with replacement from all
    originals (the same random stream), appended while the running total of requested
    GPU milli, originals included, stays within `load` x `total_gpu_milli`. The first
    draw that would pass it ends the list. Clones are named `<name>-clone-<n>`."""
    if not load >= 0 or load == float("inf"):
        raise ValueError(f"load must be a finite number >= 0, got {load!r}")
    originals = sorted(pods, key=lambda pod: pod.name)
    rng = random.Random(seed)
    order = list(originals)
    rng.shuffle(order)
    # Exact decimal arithmetic: 1.3 x 6,212,000 is 8,075,600, not a float near it.
    limit = Fraction(str(load)) * total_gpu_milli
    running = sum(requested_gpu_milli(pod) for pod in originals)
    if not any(requested_gpu_milli(pod) for pod in originals):
        return order  # clones of CPU-only pods would never reach the bound
    taken = {pod.name for pod in originals}
    clones = 0
    while True:
        pod = rng.choice(originals)
        milli = requested_gpu_milli(pod)
        if running + milli > limit:
            return order
        running += milli
        clones += 1
        name = f"{pod.name}-clone-{clones}"
        while name in taken:
            name += "x"
        taken.add(name)
        order.append(dataclasses.replace(pod, name=name))


def pod_object(
    pod: OpenbPod, uid: int, scheduler_name: str = DEFAULT_SCHEDULER_NAME
) -> dict[str, Any]:
    """The pod as this scheduler sees it. `uid` is its position in arrival order: it
    makes the object's uid and its creationTimestamp (one second per position, so
    creation order is arrival order)."""
    requests = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
    if pod.num_gpu == 1 and pod.gpu_milli < MILLI_PER_GPU:
        requests["nvidia.com/vgpu"] = str(pod.gpu_milli)
    elif pod.num_gpu:
        requests["nvidia.com/gpu"] = str(pod.num_gpu)
    spec: dict[str, Any] = {
        "schedulerName": scheduler_name,
        "containers": [{"name": "main", "resources": {"requests": requests}}],
    }
    if pod.gpu_spec and pod.num_gpu:
        # The trace's gpu_spec constrains GPU models, so only GPU pods carry it.
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": PRODUCT_LABEL,
                                    "operator": "In",
                                    "values": sorted(pod.gpu_spec),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    created = _EPOCH + timedelta(seconds=uid)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": NAMESPACE,
            "uid": f"openb-{uid}",
            "resourceVersion": "1",
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


class PodRecords:
    """The scheduler's record of each pod of a replay: what the cache's parser reads from
    `pod_object(pod, uid, scheduler_name)` (`cache.pod.pod_from_api`), parsed once per
    distinct trace pod and copied per arrival.

    Parsing a pod object is a pure function of it, and the objects of two trace pods
    differ only in name, uid and creation time when their requests and GPU models are
    the same: a replay of 10,771 pods parses ~150 shapes instead of 10,771 objects
    (26 µs each), and each arrival gets its own copy (the cache changes a record's node
    and phase when it binds it). tests/sim/test_pod_records.py checks the copies against
    the parse of the object."""

    def __init__(
        self,
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        share_milli: int = 1,
        keys: GangKeys = DEFAULT_GANG_KEYS,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.share_milli = share_milli
        self.keys = keys
        self._parsed: dict[tuple[int, int, int, int, frozenset[str] | None], PodInfo] = {}

    def parse(self, pod: OpenbPod, uid: int) -> PodInfo:
        """The record of `pod_object(pod, uid)` parsed as the cache parses it (the slow
        path `record` stands for)."""
        return pod_from_api(pod_object(pod, uid, self.scheduler_name), self.share_milli, self.keys)

    def record(self, pod: OpenbPod, uid: int) -> PodInfo:
        """A new record equal to `parse(pod, uid)`."""
        if not pod.name:
            return self.parse(pod, uid)  # a nameless pod is refused by name: parse it
        shape = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.gpu_spec)
        parsed = self._parsed.get(shape)
        if parsed is None:
            parsed = self._parsed[shape] = self.parse(pod, uid)
        # The object's uid, name and creationTimestamp (whole seconds from the epoch,
        # so the sum is exact) are all that differ between pods of one shape.
        record = copied(parsed)
        record.uid, record.name, record.created = f"openb-{uid}", pod.name, _EPOCH_SECONDS + uid
        return record


def deleted_pod_object(record: PodInfo) -> dict[str, Any]:
    """What a DELETED event of a replayed pod needs: its identity and version."""
    return {
        "metadata": {
            "uid": record.uid,
            "namespace": record.namespace,
            "name": record.name,
            "resourceVersion": record.resource_version,
        }
    }


# --- readings -------------------------------------------------------------------------------
def round_percent(part: int, whole: int) -> int:
    """100 x part / whole rounded half to even, in exact integer arithmetic (as Python's
    round does on the exact value; a float could land a hair off the half)."""
    quotient, remainder = divmod(100 * part, whole)
    twice = 2 * remainder
    if twice > whole or (twice == whole and quotient % 2 == 1):
        return quotient + 1
    return quotient


class Readings:
    """(arrived, allocated) GPU milli after every pod, as fractions of the cluster's."""

    def __init__(self, total_gpu_milli: int) -> None:
        if total_gpu_milli <= 0:
            raise ValueError(f"the cluster has no GPU to read allocation of ({total_gpu_milli})")
        self.total_gpu_milli = total_gpu_milli
        self.arrived: list[int] = []
        self.allocated: list[int] = []

    def record(self, arrived_milli: int, allocated_milli: int) -> None:
        self.arrived.append(arrived_milli)
        self.allocated.append(allocated_milli)

    def __len__(self) -> int:
        return len(self.arrived)

    def _by_percent(self) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        total = self.total_gpu_milli
        for arrived, allocated in zip(self.arrived, self.allocated, strict=True):
            groups.setdefault(round_percent(arrived, total), []).append(allocated)
        return groups

    def value_at(self, percent: int) -> float | None:
        """Mean allocated % over the readings whose arrived % rounds (half to even) to
        `percent`; None when no reading does."""
        total = self.total_gpu_milli
        values = [
            allocated
            for arrived, allocated in zip(self.arrived, self.allocated, strict=True)
            if round_percent(arrived, total) == percent
        ]
        if not values:
            return None
        return 100.0 * sum(values) / (len(values) * total)

    def curve(self) -> list[tuple[int, float]]:
        """(arrived %, mean allocated %) for every whole arrived % read, ascending."""
        total = self.total_gpu_milli
        return [
            (percent, 100.0 * sum(values) / (len(values) * total))
            for percent, values in sorted(self._by_percent().items())
        ]
