"""The node agent's own /metrics: per GPU, what NVML reads, named as NVIDIA's DCGM
exporter names it (so that dashboards built for it carry over), with each GPU
attributed to the pods and containers holding it (docs/node-agent.md, "Metrics").

- Read at scrape time (a Prometheus collector), one NVML session per scrape; a query
  a GPU does not support is left out for that GPU rather than exported as 0.
- Attribution comes from the node's pods' `gang-scheduler.io/gpu-devices` assignments,
  split per container exactly as the device plugin hands them out
  (allocation.read_pod): a pod list refreshed every `attribution_interval` seconds, not
  at each scrape, so that a 1 s scrape costs the API server nothing.
- Every series also carries DCGM's labels: gpu, UUID, pci_bus_id, device, modelName,
  Hostname, and pod, namespace, container (empty when no pod holds the GPU; one series
  per holding container when several share it, as DCGM's exporter does).
- The agent's own process (`process_*`, `python_*`): agent_registry().
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cache.jsonobj import mapping
from cache.pod import GANG_LABEL
from cache.resources import MILLI_PER_GPU, WHOLE_GPU
from scheduler.agent.allocation import ALLOCATED_ANNOTATION, Candidate, read_pod
from scheduler.agent.discovery import NVML_LOCK, normalize_bus_id
from scheduler.agent.health import HealthBook
from scheduler.agent.nvml import Handle, NvmlBackend, NvmlError

log = logging.getLogger("gang_scheduler.node_agent.metrics")

MIB = 1 << 20
DCGM_LABELS = (
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "container",
    "namespace",
    "pod",
)


def agent_registry() -> CollectorRegistry:
    """The registry the agent serves: prometheus_client's process and platform
    collectors, which only its global registry has by default, so that a scrape shows
    whether the agent leaks or burns CPU on the node (as the scheduler's registry does,
    scheduler/process/metrics.py). Their labels (`generation`, the interpreter's version) name
    no tenant; the GPU collector is registered beside them."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    if GC_COLLECTOR is not None:  # absent on interpreters without gc.get_stats
        GCCollector(registry=registry)
    return registry


# --- who holds what ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Holding:
    """One container's share of one GPU (milli), as the device plugin hands it out."""

    index: int
    milli: int
    namespace: str
    pod: str
    container: str
    gang: str


# No report from the kubelet (holdings).
EMPTY_KUBELET: Mapping[tuple[str, str], Mapping[str, Sequence[int]]] = {}


def holdings(
    pods: Iterable[Mapping[str, object]],
    node: str,
    unit: int,
    schedulers: Iterable[str],
    kubelet: Mapping[tuple[str, str], Mapping[str, Sequence[int]]] = EMPTY_KUBELET,
) -> list[Holding]:
    """Who holds which GPU of the node, by container:

    - `nvidia.com/vgpu` shares: the pod's assignment, split as the device plugin hands
      it out. Pods it would refuse (no or malformed assignment, another scheduler)
      hold nothing here, since it gives them no GPU either.
    - whole GPUs (`nvidia.com/gpu`) a container was served by this agent's plugin (its
      name in the pod's gpu-allocated mark): its assigned GPUs, which the plugin handed
      out whatever IDs the kubelet recorded.
    - other `nvidia.com/gpu` containers (NVIDIA's plugin served them): the GPUs the
      kubelet's pod-resources API names (`kubelet`: (namespace, pod) -> container ->
      GPU indices, podresources.container_gpus), whatever the assignment says.

    Init containers that run to completion are left out: the containers after them
    hold the same GPUs once they ran."""
    found: list[Holding] = []
    trusted = tuple(schedulers)
    for obj in pods:
        meta = mapping(obj.get("metadata"))
        labels = mapping(meta.get("labels"))
        gang = str(labels.get(GANG_LABEL) or "")
        read = read_pod(obj, node, unit, trusted)
        if isinstance(read, Candidate):
            for part in read.containers:
                if part.init:
                    continue  # ran before the containers that hold its GPUs now
                for index, milli in part.shares:
                    found.append(Holding(index, milli, read.namespace, read.name, part.name, gang))
        whole = read_pod(obj, node, MILLI_PER_GPU, trusted, resource=WHOLE_GPU)
        served: frozenset[str] = frozenset()
        if isinstance(whole, Candidate):
            served = whole.allocated
            for part in whole.containers:
                if part.init or part.name not in served:
                    continue
                for index, milli in part.shares:
                    found.append(
                        Holding(index, milli, whole.namespace, whole.name, part.name, gang)
                    )
        if whole is None or not kubelet:
            continue  # no whole-GPU container (or not running here), or no report
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        marked = served or _marked(meta)
        for container, indices in kubelet.get((namespace, name), {}).items():
            if container in marked:
                continue  # the agent's plugin served it: its assignment, above
            for index in indices:
                found.append(Holding(index, MILLI_PER_GPU, namespace, name, container, gang))
    return found


def _marked(meta: Mapping[str, object]) -> frozenset[str]:
    """The containers named in the pod's gpu-allocated mark."""
    text = mapping(meta.get("annotations")).get(ALLOCATED_ANNOTATION)
    names = text.split(",") if isinstance(text, str) else ()
    return frozenset(n.strip() for n in names if n.strip())


# --- one reading of the GPUs -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    uuid: str = ""
    model: str = ""
    bus_id: str = ""
    values: Mapping[str, float] = field(default_factory=dict)  # DCGM name -> value


def _try(values: dict[str, float], read: Callable[[], Mapping[str, float]]) -> None:
    """One NVML query's values, or none when the GPU does not answer it."""
    try:
        values.update(read())
    except NvmlError as error:
        if not error.unsupported:
            log.debug("GPU metric left out: %s", error)


def read_gpu(backend: NvmlBackend, index: int) -> GpuReading:
    try:
        handle = backend.handle(index)
        uuid = backend.uuid(handle)
    except NvmlError as error:
        log.debug("GPU %d not read: %s", index, error)
        return GpuReading(index)
    model = bus = ""
    try:
        model = backend.name(handle)
        bus = backend.pci_bus_id(handle)
    except NvmlError as error:
        log.debug("GPU %d name or PCI address not read: %s", index, error)
    values: dict[str, float] = {}
    _try(values, lambda: _memory(backend, handle))
    _try(values, lambda: _utilization(backend, handle))
    _try(values, lambda: {"DCGM_FI_DEV_POWER_USAGE": backend.power_milliwatts(handle) / 1000})
    _try(values, lambda: {"DCGM_FI_DEV_GPU_TEMP": backend.temperature_celsius(handle)})
    _try(values, lambda: {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": backend.corrected_ecc_errors(handle)})
    _try(values, lambda: {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": backend.uncorrected_ecc_errors(handle)})
    return GpuReading(index, uuid, model, normalize_bus_id(bus) if bus else "", values)


def _memory(backend: NvmlBackend, handle: Handle) -> dict[str, float]:
    use = backend.memory_use(handle)
    return {
        "DCGM_FI_DEV_FB_USED": use.used // MIB,
        "DCGM_FI_DEV_FB_FREE": use.free // MIB,
        "DCGM_FI_DEV_FB_TOTAL": use.total // MIB,
    }


def _utilization(backend: NvmlBackend, handle: Handle) -> dict[str, float]:
    gpu, memory = backend.utilization(handle)
    return {"DCGM_FI_DEV_GPU_UTIL": gpu, "DCGM_FI_DEV_MEM_COPY_UTIL": memory}


def read_gpus(backend: NvmlBackend) -> list[GpuReading]:
    """Every GPU, in one NVML session (none when NVML is not there)."""
    with NVML_LOCK:
        try:
            backend.init()
        except NvmlError:
            return []
        try:
            return [read_gpu(backend, index) for index in range(backend.device_count())]
        except NvmlError:
            return []
        finally:
            try:
                backend.shutdown()
            except NvmlError as error:
                log.debug("NVML shutdown: %s", error)


# --- the collector -----------------------------------------------------------------------------
# DCGM field -> its help text (DCGM exporter's wording of the unit). All are gauges, as
# DCGM's exporter types most of them; the two ECC totals it types as counters would be
# renamed *_total by the Prometheus client, breaking the DCGM names, so they are gauges
# here too (rate() works on them all the same).
DCGM_FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_FB_TOTAL": "Framebuffer memory total (in MiB).",
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "Memory utilization (in %).",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "Total number of single-bit volatile ECC errors.",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "Total number of double-bit volatile ECC errors.",
    "DCGM_FI_DEV_XID_ERRORS": "Value of the last XID error encountered.",
}


@dataclass(eq=False)  # the registry keys its collectors by identity
class GpuCollector(Collector):
    """Prometheus collector of the GPUs of one node. `holders()` is the latest
    attribution (cheap: no I/O), `book` the XIDs and faults the event watcher saw."""

    backend: NvmlBackend
    hostname: str
    holders: Callable[[], Sequence[Holding]] = lambda: ()
    book: HealthBook | None = None
    healthy: Callable[[], Mapping[str, bool]] = lambda: {}

    def collect(self) -> Iterator[Metric]:
        readings = read_gpus(self.backend)
        by_index: dict[int, list[Holding]] = {}
        for holding in self.holders():
            by_index.setdefault(holding.index, []).append(holding)
        xids = self.book.xids() if self.book is not None else {}
        faults = self.book.faults() if self.book is not None else {}
        families = {
            name: GaugeMetricFamily(name, text, labels=DCGM_LABELS)
            for name, text in DCGM_FIELDS.items()
        }
        healthy = GaugeMetricFamily(
            "gang_scheduler_node_agent_gpu_healthy",
            "1 when the GPU takes new work, 0 when it is unhealthy (NVML queries, XID or "
            "ECC faults).",
            labels=("gpu", "UUID", "modelName", "Hostname"),
        )
        xid_count = GaugeMetricFamily(
            "gang_scheduler_node_agent_gpu_xid_errors",
            "XID errors the driver reported for the GPU since the agent started.",
            labels=("gpu", "UUID", "modelName", "Hostname"),
        )
        shares = GaugeMetricFamily(
            "gang_scheduler_node_agent_gpu_share_milli",
            "Milli-GPU of the GPU held by a container (gang-scheduler.io/gpu-devices).",
            labels=(
                "gpu",
                "UUID",
                "modelName",
                "Hostname",
                "namespace",
                "pod",
                "container",
                "gang",
            ),
        )
        published = self.healthy()
        for reading in readings:
            if not reading.uuid:
                continue
            values = dict(reading.values)
            if reading.uuid in xids:
                values["DCGM_FI_DEV_XID_ERRORS"] = xids[reading.uuid][0]
            elif self.book is not None:
                values["DCGM_FI_DEV_XID_ERRORS"] = 0
            base = [
                str(reading.index),
                reading.uuid,
                reading.bus_id,
                f"nvidia{reading.index}",
                reading.model,
                self.hostname,
            ]
            holders = by_index.get(reading.index) or []
            owners = sorted({(h.container, h.namespace, h.pod) for h in holders}) or [("", "", "")]
            for name, value in values.items():
                for owner in owners:
                    families[name].add_metric([*base, *owner], value)
            gpu_labels = [str(reading.index), reading.uuid, reading.model, self.hostname]
            ok = reading.uuid not in faults and published.get(reading.uuid, True)
            healthy.add_metric(gpu_labels, 1.0 if ok else 0.0)
            if self.book is not None:
                xid_count.add_metric(gpu_labels, xids.get(reading.uuid, (0, 0))[1])
            for h in holders:
                shares.add_metric([*gpu_labels, h.namespace, h.pod, h.container, h.gang], h.milli)
        yield from families.values()
        yield healthy
        yield xid_count
        yield shares
