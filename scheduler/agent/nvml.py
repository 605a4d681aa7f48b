"""The NVML calls the node agent makes, as a Protocol, and their pynvml implementation.

The Protocol is the boundary the tests fake: it holds exactly the queries discovery
needs and nothing that decides anything (which failures make a device unhealthy, how
links become levels: discovery.py). Every method raises `NvmlError` when NVML fails.

pynvml (the `nvidia-ml-py` package, optional dependency group `agent`) is imported only
when `PynvmlBackend.init` runs, so the rest of the scheduler works without it; without
it, or without libnvidia-ml.so.1, `init` raises `NvmlLibraryNotFound`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

# nvmlReturn_t values the agent tells apart (nvml.h; the same numbers in pynvml).
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
TIMEOUT = 10
GPU_IS_LOST = 15

# nvmlEventType bits (nvml.h): the events that say a GPU may be unusable.
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8

# nvmlGpuTopologyLevel_t, as nvmlDeviceGetTopologyCommonAncestor returns it (nvml.h; the
# values are spaced so that NVIDIA can add levels between them).
TOPOLOGY_INTERNAL = 0  # same board (multi-GPU cards such as the Tesla K80)
TOPOLOGY_SINGLE = 10  # at most one PCIe switch between the two
TOPOLOGY_MULTIPLE = 20  # several PCIe switches, no host bridge
TOPOLOGY_HOSTBRIDGE = 30  # the same PCIe host bridge
TOPOLOGY_NODE = 40  # the same NUMA node, possibly several host bridges (was "CPU")
TOPOLOGY_SYSTEM = 50  # across NUMA nodes (the SMP interconnect)

# How many 64-bit words of NUMA-node mask to ask for (1024 nodes).
_NODE_MASK_WORDS = 16

Handle = Any
"""A device handle; opaque to everything but the backend that made it."""

EventSet = Any
"""An nvmlEventSet_t; opaque to everything but the backend that made it."""


class NvmlError(Exception):
    """An NVML call failed. `code` is NVML's nvmlReturn_t (0 when there is none)."""

    def __init__(self, call: str, code: int, message: str) -> None:
        super().__init__(f"{call} failed: {message}")
        self.call = call
        self.code = code
        self.message = message

    @property
    def unsupported(self) -> bool:
        """The GPU or driver does not offer this query (not a fault of the device)."""
        return self.code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND)


class NvmlLibraryNotFound(NvmlError):
    """libnvidia-ml.so.1 (or the pynvml module) cannot be loaded: no NVIDIA driver here."""


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """nvmlDeviceGetRemappedRows (Ampere and later): rows of memory remapped after ECC
    errors; `pending` needs a GPU reset to take effect, `failed` means remapping failed."""

    correctable: int
    uncorrectable: int
    pending: bool
    failed: bool


@dataclass(frozen=True, slots=True)
class NvmlEvent:
    """One nvmlEventData_t: the device's UUID (read by the backend from the event's
    handle), the EVENT_* bit, and its data (the XID number for EVENT_XID_CRITICAL)."""

    uuid: str
    kind: int
    data: int


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG GPU-instance profile of a GPU (nvmlDeviceGetGpuInstanceProfileInfo, v2)
    and where an instance of it may sit (nvmlDeviceGetGpuInstancePossiblePlacements):
    each placement is (start, size) in memory slices. What a partition of the GPU would
    hold; nothing here says the partition exists (dra_slices.py)."""

    profile_id: int
    name: str  # as nvidia-smi names it, without NVML's "MIG " prefix: "1g.10gb"
    slice_count: int  # compute slices
    instance_count: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_mib: int
    placements: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class MemoryUse:
    """nvmlDeviceGetMemoryInfo, in bytes."""

    total: int
    used: int
    free: int


class NvmlBackend(Protocol):
    """The NVML queries of the node agent, one method per NVML call (or fallback pair)."""

    def init(self) -> None:
        """nvmlInit; NvmlLibraryNotFound when NVML cannot be loaded at all."""

    def shutdown(self) -> None:
        """nvmlShutdown."""

    def device_count(self) -> int:
        """nvmlDeviceGetCount."""

    def handle(self, index: int) -> Handle:
        """nvmlDeviceGetHandleByIndex."""

    def name(self, handle: Handle) -> str:
        """nvmlDeviceGetName: the product name, e.g. "NVIDIA A100-SXM4-80GB"."""

    def uuid(self, handle: Handle) -> str:
        """nvmlDeviceGetUUID: "GPU-<uuid>"."""

    def memory_total_bytes(self, handle: Handle) -> int:
        """nvmlDeviceGetMemoryInfo(...).total."""

    def pci_bus_id(self, handle: Handle) -> str:
        """nvmlDeviceGetPciInfo(...).busId, e.g. "00000000:07:00.0"."""

    def numa_node(self, handle: Handle) -> int | None:
        """nvmlDeviceGetNumaNodeId, else the single NUMA node of
        nvmlDeviceGetCpuAffinityWithinScope(scope NODE); None when not one node."""

    def mig_enabled(self, handle: Handle) -> bool:
        """nvmlDeviceGetMigMode: whether MIG mode is on now (not merely pending)."""

    def common_ancestor(self, first: Handle, second: Handle) -> int:
        """nvmlDeviceGetTopologyCommonAncestor: a TOPOLOGY_* level."""

    def max_nvlinks(self) -> int:
        """NVML_NVLINK_MAX_LINKS: how many link numbers to try per device."""

    def nvlink_active(self, handle: Handle, link: int) -> bool:
        """nvmlDeviceGetNvLinkState == NVML_FEATURE_ENABLED."""

    def nvlink_remote_bus_id(self, handle: Handle, link: int) -> str:
        """nvmlDeviceGetNvLinkRemotePciInfo(...).busId: what the link leads to."""

    def nvlink_remote_is_switch(self, handle: Handle, link: int) -> bool:
        """nvmlDeviceGetNvLinkRemoteDeviceType == NVML_NVLINK_DEVICE_TYPE_SWITCH."""

    def remapped_rows(self, handle: Handle) -> RemappedRows:
        """nvmlDeviceGetRemappedRows."""

    def retired_pages_pending(self, handle: Handle) -> bool:
        """nvmlDeviceGetRetiredPagesPendingStatus (pre-Ampere page retirement)."""

    def uncorrected_ecc_errors(self, handle: Handle) -> int:
        """nvmlDeviceGetTotalEccErrors(uncorrected, volatile): since the last driver load."""

    def corrected_ecc_errors(self, handle: Handle) -> int:
        """nvmlDeviceGetTotalEccErrors(corrected, volatile): since the last driver load."""

    def minor_number(self, handle: Handle) -> int:
        """nvmlDeviceGetMinorNumber: N of the device node /dev/nvidiaN."""

    def memory_use(self, handle: Handle) -> MemoryUse:
        """nvmlDeviceGetMemoryInfo: total, used and free bytes."""

    def mig_profiles(self, handle: Handle) -> tuple[MigProfile, ...]:
        """The MIG GPU-instance profiles the GPU offers, with their placements; () on a
        GPU without MIG."""

    def utilization(self, handle: Handle) -> tuple[int, int]:
        """nvmlDeviceGetUtilizationRates: (gpu, memory) percent over the last sample
        period (the duty cycle of the kernels, and of memory reads and writes)."""

    def power_milliwatts(self, handle: Handle) -> int:
        """nvmlDeviceGetPowerUsage."""

    def temperature_celsius(self, handle: Handle) -> int:
        """nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)."""

    def event_set_create(self) -> EventSet:
        """nvmlEventSetCreate."""

    def supported_events(self, handle: Handle) -> int:
        """nvmlDeviceGetSupportedEventTypes: a mask of EVENT_* bits."""

    def register_events(self, handle: Handle, mask: int, event_set: EventSet) -> None:
        """nvmlDeviceRegisterEvents."""

    def wait_event(self, event_set: EventSet, timeout_ms: int) -> NvmlEvent | None:
        """nvmlEventSetWait_v2; None when nothing happened within the timeout."""

    def event_set_free(self, event_set: EventSet) -> None:
        """nvmlEventSetFree."""


def single_numa_node(mask: Sequence[int]) -> int | None:
    """The NUMA node of a node mask (64-bit words, lowest node in bit 0 of word 0), or
    None when the mask names no node or several (a GPU close to more than one node)."""
    nodes = [
        word_index * 64 + bit
        for word_index, word in enumerate(mask)
        for bit in range(64)
        if (word >> bit) & 1
    ]
    return nodes[0] if len(nodes) == 1 else None


class PynvmlBackend:
    """NvmlBackend over pynvml (nvidia-ml-py), imported when `init` runs."""

    def __init__(self) -> None:
        self._nvml: ModuleType | None = None
        # NVML counts its inits (each nvmlInit needs its nvmlShutdown), and so does this
        # backend: the event watcher holds a session for its whole life while the
        # publisher's passes open and close theirs on the same backend (health.py).
        self._sessions = 0
        self._sessions_lock = threading.Lock()

    @property
    def _lib(self) -> Any:
        if self._nvml is None:
            raise NvmlError("nvml", 1, "NVML is not initialised (call init first)")
        return self._nvml

    def _call(self, call: str, *args: Any) -> Any:
        """Run the pynvml function named like the NVML call, its NVMLError turned into
        NvmlError; a pynvml too old to have the function answers "function not found",
        as NVML does for a driver too old to have it."""
        function = getattr(self._lib, call, None)
        if function is None:
            raise NvmlError(call, FUNCTION_NOT_FOUND, f"pynvml {_version(self._lib)} lacks it")
        try:
            return function(*args)
        except self._lib.NVMLError as error:
            code = int(getattr(error, "value", 0) or 0)
            raise NvmlError(call, code, str(error)) from None

    def init(self) -> None:
        try:
            import pynvml
        except ImportError:
            raise NvmlLibraryNotFound(
                "nvmlInit",
                LIBRARY_NOT_FOUND,
                "the pynvml module is not installed (pip install 'gang-scheduler[agent]')",
            ) from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            code = int(getattr(error, "value", 0) or 0)
            if code == LIBRARY_NOT_FOUND:
                raise NvmlLibraryNotFound(
                    "nvmlInit",
                    code,
                    "libnvidia-ml.so.1 cannot be loaded (is the NVIDIA driver installed, and "
                    "its libraries mounted into this container?)",
                ) from None
            raise NvmlError("nvmlInit", code, str(error)) from None
        with self._sessions_lock:
            self._sessions += 1
            self._nvml = pynvml

    def shutdown(self) -> None:
        with self._sessions_lock:
            nvml = self._nvml
            if nvml is None:
                return
            self._sessions -= 1
            if self._sessions <= 0:
                self._sessions = 0
                self._nvml = None
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as error:
            code = int(getattr(error, "value", 0) or 0)
            raise NvmlError("nvmlShutdown", code, str(error)) from None

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def handle(self, index: int) -> Handle:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def name(self, handle: Handle) -> str:
        return _text(self._call("nvmlDeviceGetName", handle))

    def uuid(self, handle: Handle) -> str:
        return _text(self._call("nvmlDeviceGetUUID", handle))

    def memory_total_bytes(self, handle: Handle) -> int:
        info = self._call("nvmlDeviceGetMemoryInfo", handle)
        return int(info.total)

    def pci_bus_id(self, handle: Handle) -> str:
        info = self._call("nvmlDeviceGetPciInfo", handle)
        return _text(info.busId)

    def numa_node(self, handle: Handle) -> int | None:
        try:
            node = int(self._call("nvmlDeviceGetNumaNodeId", handle))
            return node if node >= 0 else None
        except NvmlError as error:
            if not error.unsupported:
                raise
        # Older drivers: the device's affinity at NUMA-node scope is a mask of nodes.
        mask = self._call(
            "nvmlDeviceGetCpuAffinityWithinScope",
            handle,
            _NODE_MASK_WORDS,
            self._lib.NVML_AFFINITY_SCOPE_NODE,
        )
        return single_numa_node([int(word) for word in mask])

    def mig_enabled(self, handle: Handle) -> bool:
        current, _pending = self._call("nvmlDeviceGetMigMode", handle)
        return bool(current == self._lib.NVML_DEVICE_MIG_ENABLE)

    def common_ancestor(self, first: Handle, second: Handle) -> int:
        return int(self._call("nvmlDeviceGetTopologyCommonAncestor", first, second))

    def max_nvlinks(self) -> int:
        return int(self._lib.NVML_NVLINK_MAX_LINKS)

    def nvlink_active(self, handle: Handle, link: int) -> bool:
        state = self._call("nvmlDeviceGetNvLinkState", handle, link)
        return bool(state == self._lib.NVML_FEATURE_ENABLED)

    def nvlink_remote_bus_id(self, handle: Handle, link: int) -> str:
        info = self._call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        return _text(info.busId)

    def nvlink_remote_is_switch(self, handle: Handle, link: int) -> bool:
        kind = self._call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        return bool(kind == self._lib.NVML_NVLINK_DEVICE_TYPE_SWITCH)

    def remapped_rows(self, handle: Handle) -> RemappedRows:
        correctable, uncorrectable, pending, failed = self._call(
            "nvmlDeviceGetRemappedRows", handle
        )
        return RemappedRows(int(correctable), int(uncorrectable), bool(pending), bool(failed))

    def retired_pages_pending(self, handle: Handle) -> bool:
        status = self._call("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        return bool(status == self._lib.NVML_FEATURE_ENABLED)

    def uncorrected_ecc_errors(self, handle: Handle) -> int:
        return int(
            self._call(
                "nvmlDeviceGetTotalEccErrors",
                handle,
                self._lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                self._lib.NVML_VOLATILE_ECC,
            )
        )

    def corrected_ecc_errors(self, handle: Handle) -> int:
        return int(
            self._call(
                "nvmlDeviceGetTotalEccErrors",
                handle,
                self._lib.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                self._lib.NVML_VOLATILE_ECC,
            )
        )

    def minor_number(self, handle: Handle) -> int:
        return int(self._call("nvmlDeviceGetMinorNumber", handle))

    def memory_use(self, handle: Handle) -> MemoryUse:
        info = self._call("nvmlDeviceGetMemoryInfo", handle)
        return MemoryUse(int(info.total), int(info.used), int(info.free))

    def mig_profiles(self, handle: Handle) -> tuple[MigProfile, ...]:
        count = int(getattr(self._lib, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0))
        profiles: list[MigProfile] = []
        for profile in range(count):
            try:
                info = self._call("nvmlDeviceGetGpuInstanceProfileInfo", handle, profile)
            except NvmlError as error:
                # A profile this GPU lacks answers "not supported" or "invalid argument";
                # a GPU without MIG answers so for every profile.
                if error.unsupported or error.code in (INVALID_ARGUMENT, NOT_FOUND):
                    continue
                raise
            profiles.append(
                MigProfile(
                    profile_id=int(info.id),
                    name=_text(getattr(info, "name", "")).removeprefix("MIG ").strip(),
                    slice_count=int(info.sliceCount),
                    instance_count=int(info.instanceCount),
                    multiprocessors=int(info.multiprocessorCount),
                    copy_engines=int(info.copyEngineCount),
                    decoders=int(info.decoderCount),
                    encoders=int(info.encoderCount),
                    jpeg_engines=int(info.jpegCount),
                    ofa_engines=int(info.ofaCount),
                    memory_mib=int(info.memorySizeMB),
                    placements=self._placements(handle, int(info.id)),
                )
            )
        return tuple(profiles)

    def _placements(self, handle: Handle, profile_id: int) -> tuple[tuple[int, int], ...]:
        """nvmlDeviceGetGpuInstancePossiblePlacements_v2, which pynvml exposes as the C
        call (an array and a count in and out). () when the driver will not say."""
        import ctypes

        placement_type = getattr(self._lib, "c_nvmlGpuInstancePlacement_t", None)
        if placement_type is None:
            return ()
        room = 32  # more than any GPU has (seven on an H100)
        placements = (placement_type * room)()
        count = ctypes.c_uint(room)
        try:
            self._call(
                "nvmlDeviceGetGpuInstancePossiblePlacements",
                handle,
                profile_id,
                placements,
                ctypes.byref(count),
            )
        except NvmlError:
            return ()
        return tuple(
            (int(placements[i].start), int(placements[i].size)) for i in range(count.value)
        )

    def utilization(self, handle: Handle) -> tuple[int, int]:
        rates = self._call("nvmlDeviceGetUtilizationRates", handle)
        return int(rates.gpu), int(rates.memory)

    def power_milliwatts(self, handle: Handle) -> int:
        return int(self._call("nvmlDeviceGetPowerUsage", handle))

    def temperature_celsius(self, handle: Handle) -> int:
        return int(self._call("nvmlDeviceGetTemperature", handle, self._lib.NVML_TEMPERATURE_GPU))

    def event_set_create(self) -> EventSet:
        return self._call("nvmlEventSetCreate")

    def supported_events(self, handle: Handle) -> int:
        return int(self._call("nvmlDeviceGetSupportedEventTypes", handle))

    def register_events(self, handle: Handle, mask: int, event_set: EventSet) -> None:
        self._call("nvmlDeviceRegisterEvents", handle, mask, event_set)

    def wait_event(self, event_set: EventSet, timeout_ms: int) -> NvmlEvent | None:
        # The _v2 call where pynvml has it (it also reports MIG instances), else the first.
        call = (
            "nvmlEventSetWait_v2"
            if hasattr(self._lib, "nvmlEventSetWait_v2")
            else ("nvmlEventSetWait")
        )
        try:
            data = self._call(call, event_set, timeout_ms)
        except NvmlError as error:
            if error.code == TIMEOUT:
                return None
            raise
        uuid = _text(self._call("nvmlDeviceGetUUID", data.device))
        return NvmlEvent(uuid, int(data.eventType), int(data.eventData))

    def event_set_free(self, event_set: EventSet) -> None:
        self._call("nvmlEventSetFree", event_set)


def _version(module: Any) -> str:
    return str(getattr(module, "__version__", "")) or "(version unknown)"


def _text(value: object) -> str:
    """pynvml hands back str (recent versions) or bytes (older ones)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
