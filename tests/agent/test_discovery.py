"""GPU discovery against recorded machines played back by a fake NVML."""

from __future__ import annotations

import ctypes.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cache.gpu import COUNT_LABEL, MEMORY_LABEL, PRODUCT_LABEL, TOPOLOGY_ANNOTATION, parse_topology
from cache.node import node_from_api
from scheduler.agent import nvml as nvml_module
from scheduler.agent.discovery import (
    NO_GPU,
    DeviceReport,
    Discovery,
    ancestor_level,
    discover,
    label_value,
    normalize_bus_id,
)
from scheduler.agent.nvml import (
    FUNCTION_NOT_FOUND,
    GPU_IS_LOST,
    LIBRARY_NOT_FOUND,
    NOT_SUPPORTED,
    TOPOLOGY_HOSTBRIDGE,
    TOPOLOGY_INTERNAL,
    TOPOLOGY_MULTIPLE,
    TOPOLOGY_NODE,
    TOPOLOGY_SINGLE,
    TOPOLOGY_SYSTEM,
    NvmlError,
    NvmlLibraryNotFound,
    PynvmlBackend,
    RemappedRows,
    single_numa_node,
)
from tests.agent import (
    DGX_A100,
    MACHINES,
    PCIE_BOX,
    TWO_SOCKET_BOX,
    FakeMachine,
    FakeNvml,
    scores_of,
    with_gpu,
)
from tests.factories import node_obj


# --- recorded machines -------------------------------------------------------------------------
@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_links_match_nvidia_smi_topo(machine: FakeMachine) -> None:
    result = discover(FakeNvml(machine))
    assert result.found and result.warnings == ()
    assert result.links == machine.topo
    assert [d.index for d in result.devices] == list(range(len(machine.gpus)))
    assert all(d.healthy for d in result.devices)


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_devices_carry_what_nvml_reports(machine: FakeMachine) -> None:
    result = discover(FakeNvml(machine))
    for report, gpu in zip(result.devices, machine.gpus, strict=True):
        assert report.model == gpu.name
        assert report.uuid == gpu.uuid
        assert report.memory_mib == gpu.memory_mib
        assert report.numa == gpu.numa
        assert report.pci_bus_id == normalize_bus_id(gpu.bus_id)
        assert not report.mig_enabled


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_annotation_round_trips_through_the_cache(machine: FakeMachine) -> None:
    result = discover(FakeNvml(machine))
    annotation = result.annotation()
    assert annotation is not None
    inventory = parse_topology(annotation)
    assert inventory == result.inventory()
    assert inventory.pair_scores is not None
    assert [list(row) for row in inventory.pair_scores] == scores_of(machine.topo)

    node = node_obj("gpu-node", gpus=len(machine.gpus))
    node["metadata"]["annotations"] = {TOPOLOGY_ANNOTATION: annotation}
    info = node_from_api(node)
    assert info.problems == ()
    assert [(d.index, d.uuid, d.model, d.memory_mib, d.numa, d.healthy) for d in info.devices] == [
        (i, g.uuid, g.name, g.memory_mib, g.numa, True) for i, g in enumerate(machine.gpus)
    ]
    assert info.pair_scores == inventory.pair_scores


def test_dgx_pairs_score_twelve_nvlinks() -> None:
    inventory = discover(FakeNvml(DGX_A100)).inventory()
    assert inventory is not None and inventory.pair_scores is not None
    assert {
        s for i, row in enumerate(inventory.pair_scores) for j, s in enumerate(row) if i != j
    } == {1200}


def test_two_socket_box_scores_by_distance() -> None:
    inventory = discover(FakeNvml(TWO_SOCKET_BOX)).inventory()
    assert inventory is not None and inventory.pair_scores is not None
    scores = inventory.pair_scores
    assert scores[0][1] == 30  # PHB: one host bridge
    assert scores[0][2] == 20  # NODE: same socket, two host bridges
    assert scores[2][3] == 400  # NV4 bridge wins over the PCIe path
    assert scores[0][4] == 10  # SYS: across sockets


def test_gfd_labels_describe_the_node() -> None:
    assert discover(FakeNvml(DGX_A100)).gfd_labels() == {
        PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB",
        MEMORY_LABEL: "81920",
        COUNT_LABEL: "8",
    }
    assert discover(FakeNvml(PCIE_BOX)).gfd_labels()[PRODUCT_LABEL] == "Tesla-V100-PCIE-32GB"


def test_a_mixed_node_gets_no_product_label() -> None:
    mixed = with_gpu(PCIE_BOX, 3, name="NVIDIA A40", memory_mib=46068)
    assert discover(FakeNvml(mixed)).gfd_labels() == {COUNT_LABEL: "4"}


def test_summary_is_one_line() -> None:
    assert discover(FakeNvml(DGX_A100)).summary() == (
        "8 GPUs (8x NVIDIA A100-SXM4-80GB), 0 unhealthy"
    )


def test_nvml_is_shut_down_after_every_pass() -> None:
    fake = FakeNvml(TWO_SOCKET_BOX)
    discover(fake)
    discover(fake)
    assert fake.calls.count("init") == 2 and fake.calls.count("shutdown") == 2
    assert fake.initialised == 0


# --- failures ----------------------------------------------------------------------------------
def test_a_device_that_cannot_be_opened_does_not_hide_the_others() -> None:
    fake = FakeNvml(PCIE_BOX, failures={("handle", 1): GPU_IS_LOST})
    result = discover(fake)
    assert result.found
    lost = result.devices[1]
    assert not lost.healthy and "GPU is lost" in lost.problems[0]
    assert [d.healthy for d in result.devices] == [True, False, True, True]
    assert result.devices[0].model == "Tesla V100-PCIE-32GB"
    assert result.links is not None
    assert [result.links[1][j] for j in (0, 2, 3)] == ["SYS", "SYS", "SYS"]
    assert result.links[2][3] == "PIX"  # the others keep their links
    assert "GPU 1 (uuid unknown) unhealthy: " in result.problems()[0]
    inventory = result.inventory()
    assert inventory is not None
    assert [d.healthy for d in inventory.devices] == [True, False, True, True]


def test_a_failing_query_marks_only_that_device_unhealthy() -> None:
    failures = {("memory_total_bytes", 2): GPU_IS_LOST, ("common_ancestor", 2): GPU_IS_LOST}
    result = discover(FakeNvml(TWO_SOCKET_BOX, failures=failures))
    broken = result.devices[2]
    assert not broken.healthy
    assert broken.problems == ("nvmlDeviceGetMemoryInfo failed: GPU is lost",)
    assert broken.model == "NVIDIA RTX A6000" and broken.memory_mib == 0
    assert sum(not d.healthy for d in result.devices) == 1
    assert result.links is not None
    assert result.links[0][2] == "SYS"  # was NODE; the pair could not be read
    assert result.links[2][3] == "NV4"  # NVLink needs no common-ancestor query
    assert result.links[0][1] == "PHB"
    assert any("GPUs 0 and 2" in warning for warning in result.warnings)


def test_unsupported_optional_queries_are_not_faults() -> None:
    failures = {("numa_node", 0): NOT_SUPPORTED, ("remapped_rows", 0): FUNCTION_NOT_FOUND}
    result = discover(FakeNvml(DGX_A100, failures=failures))
    assert result.devices[0].healthy and result.devices[0].numa is None


def test_other_failures_of_optional_queries_are_faults() -> None:
    result = discover(FakeNvml(DGX_A100, failures={("numa_node", 5): GPU_IS_LOST}))
    assert result.devices[5].problems == ("nvmlDeviceGetNumaNodeId failed: GPU is lost",)
    assert [d.healthy for d in result.devices].count(False) == 1


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"rows": RemappedRows(0, 3, True, False)}, "pending remap"),
        ({"rows": RemappedRows(0, 9, False, True)}, "row remapping failed"),
        ({"rows": None, "retired_pending": True}, "pending retirement"),
        ({"mig": True}, "MIG mode is enabled"),
    ],
)
def test_health_rules(changes: dict[str, Any], reason: str) -> None:
    result = discover(FakeNvml(with_gpu(DGX_A100, 4, **changes)))
    assert [d.index for d in result.devices if not d.healthy] == [4]
    assert reason in result.devices[4].problems[0]
    assert result.links == DGX_A100.topo  # an unhealthy device keeps its links


def test_no_gpu() -> None:
    empty = FakeMachine("no GPU", (), ())
    result = discover(FakeNvml(empty))
    assert result.unavailable == NO_GPU == "no NVIDIA GPU found"
    assert result.annotation() is None and result.gfd_labels() == {}
    assert result.summary() == "no NVIDIA GPU found"


def test_no_nvml_library() -> None:
    result = discover(FakeNvml(DGX_A100, library=False))
    assert result.unavailable == "NVML library not found: libnvidia-ml.so.1: no such file"
    assert result.annotation() is None and result.inventory() is None


def test_nvml_that_does_not_start() -> None:
    result = discover(FakeNvml(DGX_A100, init_error=9))
    assert result.unavailable == "NVML could not start: Driver Not Loaded"
    assert result.annotation() is None


def test_failing_device_count() -> None:
    result = discover(FakeNvml(DGX_A100, count_error=999))
    assert result.unavailable == "NVML could not count the GPUs: Unknown Error"


# --- pure helpers ------------------------------------------------------------------------------
def test_ancestor_levels_map_to_topo_cells() -> None:
    assert [
        ancestor_level(level)
        for level in (
            TOPOLOGY_INTERNAL,
            TOPOLOGY_SINGLE,
            TOPOLOGY_MULTIPLE,
            TOPOLOGY_HOSTBRIDGE,
            TOPOLOGY_NODE,
            TOPOLOGY_SYSTEM,
        )
    ] == ["BOARD", "PIX", "PXB", "PHB", "NODE", "SYS"]
    assert ancestor_level(35) == "NODE"  # a level NVIDIA may add later: the worse neighbour
    assert ancestor_level(60) == "SYS"


def test_bus_ids_compare_in_any_spelling() -> None:
    assert (
        normalize_bus_id("00000000:0F:00.0") == normalize_bus_id("0000:0f:00.0") == ("0000:0f:00.0")
    )
    assert normalize_bus_id("0F:00.0") == "0000:0f:00.0"
    assert normalize_bus_id(" weird ") == "weird"


def test_label_values() -> None:
    assert label_value("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert label_value("NVIDIA GeForce RTX 4090 (D)") == "NVIDIA-GeForce-RTX-4090--D"
    assert len(label_value("X" * 80)) == 63
    assert label_value("  ") == ""


def test_single_numa_node() -> None:
    assert single_numa_node([0b100]) == 2
    assert single_numa_node([0, 1]) == 64
    assert single_numa_node([0b11]) is None
    assert single_numa_node([0, 0]) is None


def test_report_defaults_are_healthy() -> None:
    assert DeviceReport(index=0).healthy
    assert Discovery(unavailable=NO_GPU).problems() == []


# --- PynvmlBackend at the pynvml boundary ------------------------------------------------------
class _FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {GPU_IS_LOST: "GPU is lost", FUNCTION_NOT_FOUND: "Function Not Found"}.get(
            self.value, f"NVML error {self.value}"
        )


def _fake_pynvml(init_error: int | None = None) -> ModuleType:
    """A stand-in pynvml module with one GPU whose memory query fails, too old to have
    nvmlDeviceGetNumaNodeId or any NVLink function."""
    module = ModuleType("pynvml")
    attrs: dict[str, Any] = {
        "NVMLError": _FakeNVMLError,
        "NVML_AFFINITY_SCOPE_NODE": 0,
        "NVML_DEVICE_MIG_ENABLE": 1,
        "NVML_FEATURE_ENABLED": 1,
        "NVML_NVLINK_MAX_LINKS": 18,
        "NVML_NVLINK_DEVICE_TYPE_SWITCH": 2,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda index: ("handle", index),
        "nvmlDeviceGetName": lambda handle: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetUUID": lambda handle: "GPU-h100",
        "nvmlDeviceGetPciInfo": lambda handle: type("Pci", (), {"busId": "00000000:1B:00.0"})(),
        "nvmlDeviceGetMigMode": lambda handle: [0, 1],
        "nvmlDeviceGetTopologyCommonAncestor": lambda a, b: 10,
        "nvmlDeviceGetCpuAffinityWithinScope": lambda handle, size, scope: (
            [0b100] + [0] * (size - 1)
        ),
        "nvmlDeviceGetRemappedRows": lambda handle: (0, 1, 1, 0),
    }

    def init() -> None:
        if init_error is not None:
            raise _FakeNVMLError(init_error)

    def fail(*_args: object) -> None:
        raise _FakeNVMLError(GPU_IS_LOST)

    def no_function(*_args: object) -> None:
        raise _FakeNVMLError(FUNCTION_NOT_FOUND)

    attrs |= {
        "nvmlInit": init,
        "nvmlDeviceGetMemoryInfo": fail,
        "nvmlDeviceGetNumaNodeId": no_function,
    }
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def test_pynvml_backend_translates_calls_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    backend = PynvmlBackend()
    backend.init()
    handle = backend.handle(0)
    assert backend.name(handle) == "NVIDIA H100 80GB HBM3"  # bytes decoded
    assert backend.pci_bus_id(handle) == "00000000:1B:00.0"
    assert backend.numa_node(handle) == 2  # NumaNodeId missing: the node mask
    assert backend.mig_enabled(handle) is False  # pending only
    assert backend.common_ancestor(handle, handle) == TOPOLOGY_SINGLE
    assert backend.remapped_rows(handle) == RemappedRows(0, 1, True, False)
    with pytest.raises(NvmlError) as caught:
        backend.memory_total_bytes(handle)
    assert caught.value.code == GPU_IS_LOST
    assert str(caught.value) == "nvmlDeviceGetMemoryInfo failed: GPU is lost"
    backend.shutdown()


def test_pynvml_backend_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    result = discover(PynvmlBackend())
    assert len(result.devices) == 1
    assert not result.devices[0].healthy  # memory query failed and rows pending
    assert result.devices[0].numa == 2


def test_pynvml_backend_without_the_shared_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_error=LIBRARY_NOT_FOUND))
    with pytest.raises(NvmlLibraryNotFound, match=r"libnvidia-ml\.so\.1 cannot be loaded"):
        PynvmlBackend().init()


def test_pynvml_backend_without_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    result = discover(PynvmlBackend())
    assert result.unavailable is not None
    assert result.unavailable.startswith("NVML library not found: the pynvml module is not")


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None, reason="this host has an NVIDIA driver"
)
def test_real_backend_on_a_host_without_nvidia_driver() -> None:
    result = discover(PynvmlBackend())
    assert result.unavailable is not None
    assert result.unavailable.startswith("NVML library not found: ")
    assert result.annotation() is None


def test_annotation_is_the_documented_json() -> None:
    annotation = discover(FakeNvml(PCIE_BOX)).annotation()
    assert annotation is not None
    document = json.loads(annotation)
    assert document["version"] == 1
    assert document["devices"][0] == {
        "index": 0,
        "uuid": PCIE_BOX.gpus[0].uuid,
        "model": "Tesla V100-PCIE-32GB",
        "memoryMiB": 32510,
        "numa": 0,
        "healthy": True,
    }
    assert document["links"][0] == ["X", "PIX", "SYS", "SYS"]


def test_pynvml_backend_reports_functions_pynvml_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    backend = PynvmlBackend()
    backend.init()
    with pytest.raises(NvmlError) as caught:
        backend.nvlink_active(backend.handle(0), 0)
    assert caught.value.unsupported and caught.value.call == "nvmlDeviceGetNvLinkState"


def test_every_pynvml_name_the_backend_uses_exists() -> None:
    """The backend reaches pynvml by name: a typo would read as "not supported"."""
    pynvml = pytest.importorskip("pynvml")
    source = Path(nvml_module.__file__).read_text()
    calls = set(re.findall(r'_call\(\s*"(\w+)"', source))
    constants = set(re.findall(r"_lib\.(NVML_\w+)", source))
    assert len(calls) >= 15 and constants
    assert [name for name in sorted(calls | constants) if not hasattr(pynvml, name)] == []
    for name in ("nvmlInit", "nvmlShutdown", "NVMLError"):
        assert hasattr(pynvml, name)
    assert pynvml.NVML_TOPOLOGY_SINGLE == TOPOLOGY_SINGLE
    assert pynvml.NVML_TOPOLOGY_SYSTEM == TOPOLOGY_SYSTEM
    assert pynvml.NVML_ERROR_GPU_IS_LOST == GPU_IS_LOST


def test_pynvml_backend_sessions_overlap_as_nvml_counts_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event watcher holds a session while the publisher's passes open and close
    theirs on the same backend: a pass's shutdown must not end the watcher's session."""
    module = _fake_pynvml()
    calls: list[str] = []
    module.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", module)
    backend = PynvmlBackend()
    backend.init()  # the watcher's session
    discover(backend)  # a pass: init, queries, shutdown
    assert backend.uuid(backend.handle(0)) == "GPU-h100"  # the watcher's still open
    backend.shutdown()
    assert calls == ["init", "init", "shutdown", "shutdown"]  # balanced, as NVML needs
    with pytest.raises(NvmlError, match="not initialised"):
        backend.handle(0)
