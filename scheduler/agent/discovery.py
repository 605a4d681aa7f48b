"""What the node agent finds on its node: the GPUs, how each pair is joined, which are
healthy, and the GFD-style labels that describe them. Blocking (NVML calls), no
Kubernetes; the publisher runs it in a thread.

Rules (docs/node-agent.md says the same for operators):
- A pair joined by n NVLinks is `NV<n>`: links straight to the peer (its PCI bus id is
  the link's remote end) plus, through NVSwitches, the smaller of the two devices'
  switch-link counts (a DGX A100: 12 links from every GPU to the switches, NV12 between
  all pairs, as `nvidia-smi topo -m` shows). Otherwise the pair's PCIe common ancestor.
- A device is unhealthy when a query that every GPU answers fails (handle, name, UUID,
  memory, PCI info), when an optional query fails other than with "not supported",
  when its memory needs a reset (rows pending remap, pages pending retirement) or row
  remapping failed, or when MIG mode is on (this scheduler hands out whole devices and
  milli shares by index, which a MIG-partitioned GPU does not honour). Its reasons are
  kept; the other devices are reported as usual.
- No NVML library, NVML failing to start, or no GPU: one line saying so, no devices,
  and nothing to publish.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import TypeVar

from cache.gpu import (
    COUNT_LABEL,
    MEMORY_LABEL,
    PRODUCT_LABEL,
    GpuDevice,
    GpuInventory,
    format_topology,
    parse_topology,
)
from scheduler.agent.nvml import (
    INVALID_ARGUMENT,
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_MULTIPLE,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
    Handle,
    MigProfile,
    NvmlBackend,
    NvmlError,
    NvmlLibraryNotFound,
)

NO_GPU = "no NVIDIA GPU found"
MIB = 1 << 20

# nvmlDeviceGetTopologyCommonAncestor level -> `nvidia-smi topo -m` cell, best first.
# The same correspondence as NVIDIA's go-gpuallocator (INTERNAL is its "same board").
ANCESTOR_LEVELS: tuple[tuple[int, str], ...] = (
    (TOPOLOGY_INTERNAL, "BOARD"),
    (TOPOLOGY_SINGLE, "PIX"),
    (TOPOLOGY_MULTIPLE, "PXB"),
    (TOPOLOGY_HOSTBRIDGE, "PHB"),
    (TOPOLOGY_NODE, "NODE"),
    (TOPOLOGY_SYSTEM, "SYS"),
)
# A pair whose level cannot be read is taken as the worst: no placement prefers it.
UNKNOWN_PAIR = "SYS"

_T = TypeVar("_T")


def ancestor_level(value: int) -> str:
    """The cell for a common-ancestor level. A value NVIDIA adds between two known
    levels (they are spaced for that) reads as the worse neighbour; beyond SYSTEM, SYS."""
    for bound, name in ANCESTOR_LEVELS:
        if value <= bound:
            return name
    return "SYS"


_BUS_ID = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$")


def normalize_bus_id(text: str) -> str:
    """A PCI address in one spelling, so that NVML's forms compare equal: busId
    "00000000:07:00.0", busIdLegacy "0000:07:00.0", any case. Unparsable text is only
    lower-cased and stripped."""
    cleaned = text.strip().lower()
    match = _BUS_ID.match(cleaned)
    if not match:
        return cleaned
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


_LABEL_INVALID = re.compile(r"[^A-Za-z0-9_.-]")


def label_value(text: str) -> str:
    """A valid label value for a product name, as GFD spells it: spaces become dashes
    ("NVIDIA A100-SXM4-80GB" -> "NVIDIA-A100-SXM4-80GB"); any other character a label
    value cannot hold also becomes a dash; at most 63 characters, alphanumeric at both
    ends ("" when nothing is left)."""
    value = _LABEL_INVALID.sub("-", text.strip().replace(" ", "-"))[:63]
    return value.strip("-_.")


@dataclass(frozen=True, slots=True)
class DeviceReport:
    """One GPU as NVML reported it; `problems` empty means healthy."""

    index: int
    uuid: str = ""
    model: str = ""
    memory_mib: int = 0
    numa: int | None = None
    pci_bus_id: str = ""
    mig_enabled: bool = False
    problems: tuple[str, ...] = ()
    minor: int | None = None  # /dev/nvidia<minor>; None when NVML cannot tell
    # The MIG partitions the GPU could be cut into (the DRA driver's counters); ()
    # on a GPU without MIG or when NVML would not say.
    mig_profiles: tuple[MigProfile, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.problems

    def as_device(self) -> GpuDevice:
        return GpuDevice(
            index=self.index,
            uuid=self.uuid,
            model=self.model,
            memory_mib=self.memory_mib,
            numa=self.numa,
            healthy=self.healthy,
        )


@dataclass(frozen=True, slots=True)
class Discovery:
    """The result of one discovery pass. `unavailable` is the one-line reason when there
    is nothing to publish (no NVML, no GPU); `warnings` are pairwise queries that failed
    (their pair taken as SYS) and similar oddities worth a log line."""

    devices: tuple[DeviceReport, ...] = ()
    links: tuple[tuple[str, ...], ...] | None = None
    unavailable: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def found(self) -> bool:
        return self.unavailable is None

    def annotation(self) -> str | None:
        """The `gang-scheduler.io/gpu-topology` value (docs/conventions.md), or None when
        there is nothing to publish."""
        if not self.found:
            return None
        return format_topology([report.as_device() for report in self.devices], self.links)

    def inventory(self) -> GpuInventory | None:
        """The annotation as the scheduler's cache reads it."""
        text = self.annotation()
        return None if text is None else parse_topology(text)

    def gfd_labels(self) -> dict[str, str]:
        """GPU feature discovery's labels for this node: the count always; the product
        and memory when every device that answered reports the same model (a mixed
        node gets no product label rather than a wrong one)."""
        if not self.found:
            return {}
        labels = {COUNT_LABEL: str(len(self.devices))}
        models = {report.model for report in self.devices if report.model}
        if len(models) == 1:
            product = label_value(models.pop())
            if product:
                labels[PRODUCT_LABEL] = product
            memories = [report.memory_mib for report in self.devices if report.memory_mib > 0]
            if memories:
                labels[MEMORY_LABEL] = str(min(memories))
        return labels

    def summary(self) -> str:
        """One line for the log: the reason there is nothing, or what was found."""
        if self.unavailable is not None:
            return self.unavailable
        models = Counter(report.model or "unknown model" for report in self.devices)
        kinds = ", ".join(f"{count}x {model}" for model, count in sorted(models.items()))
        unhealthy = sum(1 for report in self.devices if not report.healthy)
        noun = "GPU" if len(self.devices) == 1 else "GPUs"
        return f"{len(self.devices)} {noun} ({kinds}), {unhealthy} unhealthy"

    def with_faults(self, faults: Mapping[str, Sequence[str]]) -> Discovery:
        """This discovery with the faults the event watcher recorded (by GPU UUID) added
        to their devices' problems: a GPU with an XID stays unhealthy although every
        query answers (health.py)."""
        if not faults or not self.found:
            return self
        devices = tuple(
            replace(report, problems=(*report.problems, *faults[report.uuid]))
            if report.uuid in faults
            else report
            for report in self.devices
        )
        return replace(self, devices=devices)

    def problems(self) -> list[str]:
        """One line per unhealthy device, with its reasons."""
        return [
            f"GPU {report.index} ({report.uuid or 'uuid unknown'}) unhealthy: "
            + "; ".join(report.problems)
            for report in self.devices
            if report.problems
        ]


# The publisher and the device plugin discover from two threads; NVML's init and
# shutdown are reference-counted, but one pass at a time keeps them simple to reason about.
_NVML_LOCK = threading.Lock()
# The same lock, for the event watcher's init, registration and shutdown (health.py).
NVML_LOCK = _NVML_LOCK


def discover(backend: NvmlBackend) -> Discovery:
    """One discovery pass: NVML is initialised and shut down again, so that a driver
    reloaded between passes is picked up. Passes from several threads run one at a time."""
    with _NVML_LOCK:
        return _discover(backend)


def _discover(backend: NvmlBackend) -> Discovery:
    try:
        backend.init()
    except NvmlLibraryNotFound as error:
        return Discovery(unavailable=f"NVML library not found: {error.message}")
    except NvmlError as error:
        return Discovery(unavailable=f"NVML could not start: {error.message}")
    try:
        return _discover_devices(backend)
    finally:
        # A failing shutdown leaves nothing that the next pass's init would trip over.
        with suppress(NvmlError):
            backend.shutdown()


@dataclass(frozen=True, slots=True)
class _Probe:
    report: DeviceReport
    handle: Handle | None  # None: the device could not even be opened


def _discover_devices(backend: NvmlBackend) -> Discovery:
    try:
        count = backend.device_count()
    except NvmlError as error:
        return Discovery(unavailable=f"NVML could not count the GPUs: {error.message}")
    if count <= 0:
        return Discovery(unavailable=NO_GPU)
    probes = [_probe(backend, index) for index in range(count)]
    warnings: list[str] = []
    links = _link_matrix(backend, probes, warnings)
    return Discovery(
        devices=tuple(probe.report for probe in probes),
        links=links,
        warnings=tuple(warnings),
    )


def _required(
    problems: list[str], query: Callable[[Handle], _T], handle: Handle, default: _T
) -> _T:
    """A query every GPU answers: any failure is a problem of the device."""
    try:
        return query(handle)
    except NvmlError as error:
        problems.append(str(error))
        return default


def _optional(
    problems: list[str], query: Callable[[Handle], _T], handle: Handle, default: _T
) -> _T:
    """A query some GPUs or drivers do not offer: "not supported" means the default;
    any other failure is a problem of the device."""
    try:
        return query(handle)
    except NvmlError as error:
        if not error.unsupported:
            problems.append(str(error))
        return default


def _probe(backend: NvmlBackend, index: int) -> _Probe:
    try:
        handle = backend.handle(index)
    except NvmlError as error:
        return _Probe(DeviceReport(index=index, problems=(str(error),)), None)
    problems: list[str] = []
    model = _required(problems, backend.name, handle, "")
    uuid = _required(problems, backend.uuid, handle, "")
    memory = _required(problems, backend.memory_total_bytes, handle, 0)
    bus_id = normalize_bus_id(_required(problems, backend.pci_bus_id, handle, ""))
    numa = _optional(problems, backend.numa_node, handle, None)
    mig = _optional(problems, backend.mig_enabled, handle, False)
    # Only the device-node isolation mode needs it (isolation.py): a GPU whose minor
    # cannot be read is refused in that mode at Allocate, not marked unhealthy here.
    minor = _optional([], backend.minor_number, handle, None)
    # Only the DRA driver publishes them: a failure means no partitions, not a bad GPU.
    no_profiles: tuple[MigProfile, ...] = ()
    profiles = _optional([], backend.mig_profiles, handle, no_profiles)
    if mig:
        problems.append(
            "MIG mode is enabled; whole-device and milli-share placement would not hold"
        )
    problems.extend(_memory_problems(backend, handle, problems))
    return _Probe(
        DeviceReport(
            index=index,
            uuid=uuid,
            model=model,
            memory_mib=memory // MIB,
            numa=numa,
            pci_bus_id=bus_id,
            mig_enabled=mig,
            problems=tuple(problems),
            minor=minor,
            mig_profiles=profiles,
        ),
        handle,
    )


def _memory_problems(backend: NvmlBackend, handle: Handle, problems: list[str]) -> list[str]:
    """Memory faults NVML keeps track of: row remapping (Ampere and later), or page
    retirement on the GPUs before it. Both are single cheap queries; XID events would
    need an event loop of their own (docs/node-agent.md, open items)."""
    rows = _optional(problems, backend.remapped_rows, handle, None)
    if rows is not None:
        if rows.failed:
            return ["row remapping failed (uncorrectable memory errors); the GPU needs service"]
        if rows.pending:
            return ["memory rows are pending remap after uncorrectable errors; reset the GPU"]
        return []
    if _optional(problems, backend.retired_pages_pending, handle, False):
        return ["memory pages are pending retirement after ECC errors; reset the GPU"]
    return []


def _link_matrix(
    backend: NvmlBackend, probes: list[_Probe], warnings: list[str]
) -> tuple[tuple[str, ...], ...]:
    count = len(probes)
    nvlinks = _nvlink_counts(backend, probes, warnings)
    cells = [["X" if i == j else UNKNOWN_PAIR for j in range(count)] for i in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            first, second = probes[i].handle, probes[j].handle
            if first is None or second is None:
                continue  # an unopened device (unhealthy): its pairs stay SYS
            links = nvlinks[i][j]
            if links:
                cell = f"NV{links}"
            else:
                try:
                    cell = ancestor_level(backend.common_ancestor(first, second))
                except NvmlError as error:
                    warnings.append(f"GPUs {i} and {j}: {error}; the pair is taken as SYS")
                    cell = UNKNOWN_PAIR
            cells[i][j] = cells[j][i] = cell
    return tuple(tuple(row) for row in cells)


def _nvlink_counts(
    backend: NvmlBackend, probes: list[_Probe], warnings: list[str]
) -> list[list[int]]:
    """NVLinks between each pair: direct links (either end's count, the larger when the
    two disagree) plus, when both have links to NVSwitches, the fewer of the two."""
    count = len(probes)
    by_bus = {
        probe.report.pci_bus_id: probe.report.index for probe in probes if probe.report.pci_bus_id
    }
    direct = [[0] * count for _ in range(count)]
    to_switch = [0] * count
    limit = backend.max_nvlinks()
    for probe in probes:
        handle, index = probe.handle, probe.report.index
        if handle is None:
            continue
        for link in range(limit):
            try:
                if not backend.nvlink_active(handle, link):
                    continue
            except NvmlError as error:
                # "Not supported" on a GPU without NVLink, "invalid argument" past its
                # last link: either way, no more links on this device.
                if not (error.unsupported or error.code == INVALID_ARGUMENT):
                    warnings.append(f"GPU {index} NVLink {link}: {error}")
                break
            try:
                remote = normalize_bus_id(backend.nvlink_remote_bus_id(handle, link))
            except NvmlError as error:
                warnings.append(f"GPU {index} NVLink {link}: {error}; link not counted")
                continue
            peer = by_bus.get(remote)
            if peer is not None:
                if peer != index:
                    direct[index][peer] += 1
            elif _is_switch(backend, handle, link):
                to_switch[index] += 1
    result = [[0] * count for _ in range(count)]
    for i in range(count):
        for j in range(count):
            if i != j:
                through_switches = min(to_switch[i], to_switch[j])
                result[i][j] = max(direct[i][j], direct[j][i]) + through_switches
    return result


def _is_switch(backend: NvmlBackend, handle: Handle, link: int) -> bool:
    """Whether a link leads to an NVSwitch; a driver that cannot tell gets no credit
    for the link (it might lead to an IBM NPU or another host's GPU)."""
    try:
        return backend.nvlink_remote_is_switch(handle, link)
    except NvmlError:
        return False
