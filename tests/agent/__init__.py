"""A fake NVML (scheduler.agent.nvml.NvmlBackend) and the machines it plays back.

Each machine is written down as NVML describes it: per GPU its product name, memory,
PCI address, NUMA node and what each active NVLink leads to, and per pair the PCIe
common-ancestor level (nvmlDeviceGetTopologyCommonAncestor). `topo` is what
`nvidia-smi topo -m` prints for that machine, the matrix discovery must rebuild.

- DGX A100: 8 A100-SXM4-80GB, each with 12 NVLinks to the 6 NVSwitches of the HGX
  baseboard (2 per switch); `nvidia-smi topo -m` shows NV12 between all pairs; GPUs
  in pairs on NUMA nodes 3, 1, 7, 5 (NPS4), PCIe pairs under one switch tree (PXB).
- 4-GPU PCIe box: 4 V100-PCIE-32GB on a 2-socket server, two per PCIe switch, one
  switch per socket: PIX within a switch, SYS across.
- 2-socket box: 8 RTX A6000, four per socket, each pair of root ports on one host
  bridge (PHB), host bridges of a socket joined in the CPU (NODE), sockets over UPI
  (SYS); GPUs 2-3 and 6-7 joined by an NVLink bridge (4 links each: NV4).
- H100 box: 4 H100 80GB HBM3 with the MIG profiles the real one reported
  (docs/real-gpu/h100-2026-11-27-nvml.json) and the placements NVIDIA's MIG user guide
  lists for it (8 memory slices); pairs 0-1 and 2-3 joined by NVLink (NV4), one PCIe
  switch per pair, one socket.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.agent.nvml import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_SINGLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    LIBRARY_NOT_FOUND,
    NOT_SUPPORTED,
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_MULTIPLE,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
    MemoryUse,
    MigProfile,
    NvmlError,
    NvmlEvent,
    NvmlLibraryNotFound,
    RemappedRows,
)

MIB = 1 << 20
CLEAN_ROWS = RemappedRows(0, 0, False, False)
MAX_NVLINKS = 18  # NVML_NVLINK_MAX_LINKS of the drivers these machines ran


@dataclass(frozen=True)
class FakeGpu:
    name: str
    uuid: str
    memory_mib: int
    bus_id: str  # as nvmlDeviceGetPciInfo spells it: 8-digit domain, upper case
    numa: int | None
    nvlinks: tuple[str, ...] = ()  # remote PCI address of each active link
    has_nvlink: bool = True  # False: NVLink queries are "not supported"
    mig: bool | None = False  # None: MIG mode "not supported" (pre-Ampere)
    rows: RemappedRows | None = CLEAN_ROWS  # None: not supported
    retired_pending: bool = False
    # nvmlDeviceGetSupportedEventTypes: data-centre GPUs offer XID and both ECC events;
    # 0 plays a GPU (or a platform, e.g. inside some VMs) without events.
    events: int = EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC | EVENT_SINGLE_BIT_ECC
    mig_profiles: tuple[MigProfile, ...] = ()


@dataclass(frozen=True)
class FakeMachine:
    name: str
    gpus: tuple[FakeGpu, ...]
    ancestors: tuple[tuple[int, ...], ...]
    switches: frozenset[str] = frozenset()
    topo: tuple[tuple[str, ...], ...] = ()


def _matrix(text: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(line.split()) for line in text.strip().splitlines())


def _ancestors(
    count: int, level_of: dict[tuple[int, int], int], default: int
) -> tuple[tuple[int, ...], ...]:
    return tuple(
        tuple(0 if i == j else level_of.get((min(i, j), max(i, j)), default) for j in range(count))
        for i in range(count)
    )


# --- DGX A100 ----------------------------------------------------------------------------------
_DGX_BUS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
_DGX_NUMA = (3, 3, 1, 1, 7, 7, 5, 5)
_DGX_SWITCHES = tuple(f"00000000:{bus}:00.0" for bus in ("C4", "C5", "C6", "C7", "C8", "C9"))


def _dgx_a100() -> FakeMachine:
    gpus = tuple(
        FakeGpu(
            name="NVIDIA A100-SXM4-80GB",
            uuid=f"GPU-a100-{i:04d}-8f3c-4d2a-9b7e-000000000000",
            memory_mib=81920,
            bus_id=f"00000000:{bus}:00.0",
            numa=_DGX_NUMA[i],
            # 12 links, two to each NVSwitch.
            nvlinks=tuple(_DGX_SWITCHES[link // 2] for link in range(12)),
        )
        for i, bus in enumerate(_DGX_BUS)
    )
    pairs = {(0, 1): TOPOLOGY_MULTIPLE, (2, 3): TOPOLOGY_MULTIPLE}
    pairs |= {(4, 5): TOPOLOGY_MULTIPLE, (6, 7): TOPOLOGY_MULTIPLE}
    topo = _matrix(
        """
        X    NV12 NV12 NV12 NV12 NV12 NV12 NV12
        NV12 X    NV12 NV12 NV12 NV12 NV12 NV12
        NV12 NV12 X    NV12 NV12 NV12 NV12 NV12
        NV12 NV12 NV12 X    NV12 NV12 NV12 NV12
        NV12 NV12 NV12 NV12 X    NV12 NV12 NV12
        NV12 NV12 NV12 NV12 NV12 X    NV12 NV12
        NV12 NV12 NV12 NV12 NV12 NV12 X    NV12
        NV12 NV12 NV12 NV12 NV12 NV12 NV12 X
        """
    )
    return FakeMachine(
        "DGX A100", gpus, _ancestors(8, pairs, TOPOLOGY_SYSTEM), frozenset(_DGX_SWITCHES), topo
    )


# --- 4-GPU PCIe box ----------------------------------------------------------------------------
def _pcie_box() -> FakeMachine:
    buses = ("1A", "1B", "88", "89")
    gpus = tuple(
        FakeGpu(
            name="Tesla V100-PCIE-32GB",
            uuid=f"GPU-v100-{i:04d}-1c2d-3e4f-5a6b-000000000000",
            memory_mib=32510,
            bus_id=f"00000000:{bus}:00.0",
            numa=0 if i < 2 else 1,
            has_nvlink=False,
            mig=None,
            rows=None,
        )
        for i, bus in enumerate(buses)
    )
    pairs = {(0, 1): TOPOLOGY_SINGLE, (2, 3): TOPOLOGY_SINGLE}
    topo = _matrix(
        """
        X   PIX SYS SYS
        PIX X   SYS SYS
        SYS SYS X   PIX
        SYS SYS PIX X
        """
    )
    return FakeMachine("4-GPU PCIe box", gpus, _ancestors(4, pairs, TOPOLOGY_SYSTEM), topo=topo)


# --- 2-socket box ------------------------------------------------------------------------------
def _two_socket_box() -> FakeMachine:
    buses = ("01", "21", "41", "61", "81", "A1", "C1", "E1")
    bridged = {2: 3, 3: 2, 6: 7, 7: 6}  # NVLink bridges, 4 links each

    def links(i: int) -> tuple[str, ...]:
        if i not in bridged:
            return ()
        return (f"00000000:{buses[bridged[i]]}:00.0",) * 4

    gpus = tuple(
        FakeGpu(
            name="NVIDIA RTX A6000",
            uuid=f"GPU-a6000-{i:04d}-77aa-4c1e-8d2f-000000000000",
            memory_mib=49140,
            bus_id=f"00000000:{bus}:00.0",
            numa=0 if i < 4 else 1,
            nvlinks=links(i),
            mig=None,
        )
        for i, bus in enumerate(buses)
    )
    pairs: dict[tuple[int, int], int] = {}
    for socket in (0, 4):
        for i in range(socket, socket + 4):
            for j in range(i + 1, socket + 4):
                same_bridge = i // 2 == j // 2
                pairs[(i, j)] = TOPOLOGY_HOSTBRIDGE if same_bridge else TOPOLOGY_NODE
    topo = _matrix(
        """
        X    PHB  NODE NODE SYS  SYS  SYS  SYS
        PHB  X    NODE NODE SYS  SYS  SYS  SYS
        NODE NODE X    NV4  SYS  SYS  SYS  SYS
        NODE NODE NV4  X    SYS  SYS  SYS  SYS
        SYS  SYS  SYS  SYS  X    PHB  NODE NODE
        SYS  SYS  SYS  SYS  PHB  X    NODE NODE
        SYS  SYS  SYS  SYS  NODE NODE X    NV4
        SYS  SYS  SYS  SYS  NODE NODE NV4  X
        """
    )
    return FakeMachine("2-socket box", gpus, _ancestors(8, pairs, TOPOLOGY_SYSTEM), topo=topo)


# --- H100 box ----------------------------------------------------------------------------------
def _profile(
    profile_id: int,
    name: str,
    slices: int,
    instances: int,
    sms: int,
    engines: int,
    mib: int,
    placements: tuple[tuple[int, int], ...],
    ofa: int = 0,
) -> MigProfile:
    return MigProfile(
        profile_id=profile_id, name=name, slice_count=slices, instance_count=instances,
        multiprocessors=sms, copy_engines=engines, decoders=engines, encoders=0,
        jpeg_engines=engines, ofa_engines=ofa, memory_mib=mib, placements=placements,
    )  # fmt: skip


H100_MIG_PROFILES = (
    _profile(19, "1g.10gb", 1, 7, 16, 1, 9984, tuple((s, 1) for s in range(7))),
    _profile(14, "2g.20gb", 2, 3, 32, 2, 20096, ((0, 2), (2, 2), (4, 2))),
    _profile(9, "3g.40gb", 3, 2, 60, 3, 40448, ((0, 4), (4, 4))),
    _profile(5, "4g.40gb", 4, 1, 64, 4, 40448, ((0, 4),)),
    # 7g.80gb has 8 copy engines, as the real one reported (7 decoders, 7 JPEG).
    replace(_profile(0, "7g.80gb", 7, 1, 132, 7, 81152, ((0, 8),), ofa=1), copy_engines=8),
    _profile(20, "1g.10gb+me", 1, 1, 16, 1, 9984, tuple((s, 1) for s in range(7)), ofa=1),
    _profile(15, "1g.20gb", 1, 4, 26, 1, 20096, ((0, 2), (2, 2), (4, 2), (6, 2))),
)


def _h100_box() -> FakeMachine:
    buses = ("18", "2A", "3A", "5D")
    bridged = {0: 1, 1: 0, 2: 3, 3: 2}
    gpus = tuple(
        FakeGpu(
            name="NVIDIA H100 80GB HBM3",
            uuid=f"GPU-h100-{i:04d}-e9ec-7929-ffdb-000000000000",
            memory_mib=81559,
            bus_id=f"00000000:{bus}:00.0",
            numa=0,
            nvlinks=(f"00000000:{buses[bridged[i]]}:00.0",) * 4,
            mig_profiles=H100_MIG_PROFILES,
        )
        for i, bus in enumerate(buses)
    )
    pairs = {(0, 1): TOPOLOGY_SINGLE, (2, 3): TOPOLOGY_SINGLE}
    topo = _matrix(
        """
        X   NV4 NODE NODE
        NV4 X   NODE NODE
        NODE NODE X  NV4
        NODE NODE NV4 X
        """
    )
    return FakeMachine("H100 box", gpus, _ancestors(4, pairs, TOPOLOGY_NODE), topo=topo)


DGX_A100 = _dgx_a100()
PCIE_BOX = _pcie_box()
TWO_SOCKET_BOX = _two_socket_box()
H100_BOX = _h100_box()
MACHINES = (DGX_A100, PCIE_BOX, TWO_SOCKET_BOX, H100_BOX)


def with_gpu(machine: FakeMachine, index: int, **changes: Any) -> FakeMachine:
    """The machine with GPU `index` changed (e.g. rows=RemappedRows(..., pending=True))."""
    gpus = list(machine.gpus)
    gpus[index] = replace(gpus[index], **changes)
    return replace(machine, gpus=tuple(gpus))


@dataclass
class FakeNvml:
    """NvmlBackend playing back a FakeMachine. `failures` maps (method, device index)
    to the NVML error code that call answers with (for common_ancestor: either device);
    `library` False plays a host without libnvidia-ml.so.1."""

    machine: FakeMachine
    failures: dict[tuple[str, int], int] = field(default_factory=dict)
    library: bool = True
    init_error: int | None = None
    count_error: int | None = None
    calls: list[str] = field(default_factory=list)
    initialised: int = 0
    # The event API: what nvmlEventSetWait will hand out, the counters a poll reads
    # (volatile uncorrected ECC errors by device index), and an error code that
    # nvmlEventSetCreate answers with (e.g. NOT_SUPPORTED).
    pending_events: queue.Queue[NvmlEvent] = field(default_factory=queue.Queue)
    ecc_uncorrected: dict[int, int] = field(default_factory=dict)
    event_set_error: int | None = None
    registered: dict[int, int] = field(default_factory=dict)  # device index -> mask
    event_sets: int = 0
    # Telemetry by device index (defaults: idle, 70 W, 40 C, no memory in use).
    used_mib: dict[int, int] = field(default_factory=dict)
    util: dict[int, tuple[int, int]] = field(default_factory=dict)
    power_mw: dict[int, int] = field(default_factory=dict)
    temperature: dict[int, int] = field(default_factory=dict)
    ecc_corrected: dict[int, int] = field(default_factory=dict)

    def inject(self, index: int, kind: int, data: int = 0) -> None:
        """The driver reporting an event on GPU `index` (any thread)."""
        self.pending_events.put(NvmlEvent(self.machine.gpus[index].uuid, kind, data))

    def _check(self, method: str, *indices: int) -> None:
        self.calls.append(method)
        if not self.initialised:
            raise NvmlError(method, 1, "Uninitialized")
        for index in indices:
            code = self.failures.get((method, index))
            if code is not None:
                call = NVML_CALLS.get(method, method)
                raise NvmlError(call, code, _MESSAGES.get(code, f"error {code}"))

    def _gpu(self, handle: object) -> FakeGpu:
        assert isinstance(handle, int)
        return self.machine.gpus[handle]

    def init(self) -> None:
        self.calls.append("init")
        if not self.library:
            raise NvmlLibraryNotFound(
                "nvmlInit", LIBRARY_NOT_FOUND, "libnvidia-ml.so.1: no such file"
            )
        if self.init_error is not None:
            raise NvmlError("nvmlInit", self.init_error, _MESSAGES.get(self.init_error, "?"))
        self.initialised += 1

    def shutdown(self) -> None:
        self._check("shutdown")
        self.initialised -= 1

    def device_count(self) -> int:
        self._check("device_count")
        if self.count_error is not None:
            raise NvmlError("nvmlDeviceGetCount", self.count_error, "Unknown Error")
        return len(self.machine.gpus)

    def handle(self, index: int) -> object:
        self._check("handle", index)
        if not 0 <= index < len(self.machine.gpus):
            raise NvmlError("nvmlDeviceGetHandleByIndex", INVALID_ARGUMENT, "Invalid Argument")
        return index

    def name(self, handle: object) -> str:
        self._check("name", self._index(handle))
        return self._gpu(handle).name

    def uuid(self, handle: object) -> str:
        self._check("uuid", self._index(handle))
        return self._gpu(handle).uuid

    def memory_total_bytes(self, handle: object) -> int:
        self._check("memory_total_bytes", self._index(handle))
        return self._gpu(handle).memory_mib * MIB

    def pci_bus_id(self, handle: object) -> str:
        self._check("pci_bus_id", self._index(handle))
        return self._gpu(handle).bus_id

    def numa_node(self, handle: object) -> int | None:
        self._check("numa_node", self._index(handle))
        return self._gpu(handle).numa

    def mig_enabled(self, handle: object) -> bool:
        self._check("mig_enabled", self._index(handle))
        mig = self._gpu(handle).mig
        if mig is None:
            raise NvmlError("nvmlDeviceGetMigMode", NOT_SUPPORTED, "Not Supported")
        return mig

    def common_ancestor(self, first: object, second: object) -> int:
        self._check("common_ancestor", self._index(first), self._index(second))
        return self.machine.ancestors[self._index(first)][self._index(second)]

    def max_nvlinks(self) -> int:
        return MAX_NVLINKS

    def _link(self, handle: object, link: int, method: str) -> str:
        self._check(method, self._index(handle))
        gpu = self._gpu(handle)
        if not gpu.has_nvlink:
            raise NvmlError(method, NOT_SUPPORTED, "Not Supported")
        if link >= MAX_NVLINKS:
            raise NvmlError(method, INVALID_ARGUMENT, "Invalid Argument")
        return gpu.nvlinks[link] if link < len(gpu.nvlinks) else ""

    def nvlink_active(self, handle: object, link: int) -> bool:
        return bool(self._link(handle, link, "nvlink_active"))

    def nvlink_remote_bus_id(self, handle: object, link: int) -> str:
        return self._link(handle, link, "nvlink_remote_bus_id")

    def nvlink_remote_is_switch(self, handle: object, link: int) -> bool:
        return self._link(handle, link, "nvlink_remote_is_switch") in self.machine.switches

    def remapped_rows(self, handle: object) -> RemappedRows:
        self._check("remapped_rows", self._index(handle))
        rows = self._gpu(handle).rows
        if rows is None:
            raise NvmlError("nvmlDeviceGetRemappedRows", NOT_SUPPORTED, "Not Supported")
        return rows

    def retired_pages_pending(self, handle: object) -> bool:
        self._check("retired_pages_pending", self._index(handle))
        return self._gpu(handle).retired_pending

    def uncorrected_ecc_errors(self, handle: object) -> int:
        self._check("uncorrected_ecc_errors", self._index(handle))
        return self.ecc_uncorrected.get(self._index(handle), 0)

    def minor_number(self, handle: object) -> int:
        self._check("minor_number", self._index(handle))
        return self._index(handle)  # /dev/nvidiaN numbered as NVML numbers the GPUs here

    def mig_profiles(self, handle: object) -> tuple[MigProfile, ...]:
        self._check("mig_profiles", self._index(handle))
        return self._gpu(handle).mig_profiles

    def corrected_ecc_errors(self, handle: object) -> int:
        self._check("corrected_ecc_errors", self._index(handle))
        return self.ecc_corrected.get(self._index(handle), 0)

    def memory_use(self, handle: object) -> MemoryUse:
        self._check("memory_use", self._index(handle))
        total = self._gpu(handle).memory_mib * MIB
        used = self.used_mib.get(self._index(handle), 0) * MIB
        return MemoryUse(total, used, total - used)

    def utilization(self, handle: object) -> tuple[int, int]:
        self._check("utilization", self._index(handle))
        return self.util.get(self._index(handle), (0, 0))

    def power_milliwatts(self, handle: object) -> int:
        self._check("power_milliwatts", self._index(handle))
        return self.power_mw.get(self._index(handle), 70000)

    def temperature_celsius(self, handle: object) -> int:
        self._check("temperature_celsius", self._index(handle))
        return self.temperature.get(self._index(handle), 40)

    def event_set_create(self) -> object:
        self._check("event_set_create")
        if self.event_set_error is not None:
            raise NvmlError("nvmlEventSetCreate", self.event_set_error, "Not Supported")
        self.event_sets += 1
        return ("event-set", self.event_sets)

    def supported_events(self, handle: object) -> int:
        self._check("supported_events", self._index(handle))
        return self._gpu(handle).events

    def register_events(self, handle: object, mask: int, event_set: object) -> None:
        self._check("register_events", self._index(handle))
        if mask & ~self._gpu(handle).events:
            # nvml.h: NOT_SUPPORTED "if the platform does not support this feature or
            # some of requested event types".
            raise NvmlError("nvmlDeviceRegisterEvents", NOT_SUPPORTED, "Not Supported")
        self.registered[self._index(handle)] = mask

    def wait_event(self, event_set: object, timeout_ms: int) -> NvmlEvent | None:
        self._check("wait_event", 0)  # failures[("wait_event", 0)]: the event set breaks
        try:
            event = self.pending_events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return None  # NVML_ERROR_TIMEOUT
        index = next(i for i, g in enumerate(self.machine.gpus) if g.uuid == event.uuid)
        if not event.kind & self.registered.get(index, 0):
            return None  # NVML delivers only registered kinds; count it as a timeout
        return event

    def event_set_free(self, event_set: object) -> None:
        self._check("event_set_free")

    @staticmethod
    def _index(handle: object) -> int:
        assert isinstance(handle, int)
        return handle


# The NVML function behind each backend method, for error messages as PynvmlBackend words them.
NVML_CALLS = {
    "handle": "nvmlDeviceGetHandleByIndex",
    "name": "nvmlDeviceGetName",
    "uuid": "nvmlDeviceGetUUID",
    "memory_total_bytes": "nvmlDeviceGetMemoryInfo",
    "pci_bus_id": "nvmlDeviceGetPciInfo",
    "numa_node": "nvmlDeviceGetNumaNodeId",
    "mig_enabled": "nvmlDeviceGetMigMode",
    "common_ancestor": "nvmlDeviceGetTopologyCommonAncestor",
    "nvlink_active": "nvmlDeviceGetNvLinkState",
    "nvlink_remote_bus_id": "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvlink_remote_is_switch": "nvmlDeviceGetNvLinkRemoteDeviceType",
    "remapped_rows": "nvmlDeviceGetRemappedRows",
    "retired_pages_pending": "nvmlDeviceGetRetiredPagesPendingStatus",
    "uncorrected_ecc_errors": "nvmlDeviceGetTotalEccErrors",
    "supported_events": "nvmlDeviceGetSupportedEventTypes",
    "register_events": "nvmlDeviceRegisterEvents",
    "wait_event": "nvmlEventSetWait_v2",
    "corrected_ecc_errors": "nvmlDeviceGetTotalEccErrors",
    "minor_number": "nvmlDeviceGetMinorNumber",
    "mig_profiles": "nvmlDeviceGetGpuInstanceProfileInfo",
    "memory_use": "nvmlDeviceGetMemoryInfo",
    "utilization": "nvmlDeviceGetUtilizationRates",
    "power_milliwatts": "nvmlDeviceGetPowerUsage",
    "temperature_celsius": "nvmlDeviceGetTemperature",
}

_MESSAGES = {
    NOT_SUPPORTED: "Not Supported",
    INVALID_ARGUMENT: "Invalid Argument",
    GPU_IS_LOST: "GPU is lost",
    9: "Driver Not Loaded",
}


def scores_of(topo: Sequence[Sequence[str]]) -> list[list[int]]:
    """Pair scores of a `nvidia-smi topo -m` matrix, as docs/conventions.md defines them."""
    per_level = {"BOARD": 60, "PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20, "SYS": 10}
    return [
        [
            0 if cell == "X" else 100 * int(cell[2:]) if cell.startswith("NV") else per_level[cell]
            for cell in row
        ]
        for row in topo
    ]
