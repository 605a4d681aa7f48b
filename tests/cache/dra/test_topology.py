"""Where a DRA device sits, read from its attributes (cache/dra/topology.py): the
vendors' names, and hostile values read as unknown, never as an error."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cache.dra.fields import Attribute
from cache.dra.slices import Device, slice_from_api
from cache.dra.topology import (
    NVLINK_CLIQUE_LABEL,
    PCIE_ROOT,
    UNKNOWN,
    DeviceTopology,
    device_topology,
)
from tests.dra_builders import device, slice_obj

NVIDIA = "gpu.nvidia.com"
AMD = "gpu.amd.com"
INTEL = "gpu.intel.com"
CLIQUE = "a1b2c3d4-e5f6-7890-abcd-ef1234567890.0"


def read(driver: str, labels: dict[str, str] | None = None, **attributes: Any) -> DeviceTopology:
    """The topology of one device as a driver publishes it through a ResourceSlice."""
    parsed = slice_from_api(slice_obj("s", [device("d", **attributes)], driver=driver))
    assert not parsed.problems, parsed.problems
    [record] = parsed.devices
    return device_topology(driver, record, labels or {})


def test_nvidia_gpu_reads_the_standard_pcie_root_and_the_nodes_nvlink_clique() -> None:
    # k8s-dra-driver-gpu: uuid, productName, resource.kubernetes.io/pciBusID and
    # pcieRoot; no NUMA attribute for a full GPU; the clique is GFD's node label.
    topology = read(
        NVIDIA,
        {NVLINK_CLIQUE_LABEL: CLIQUE},
        uuid="GPU-1",
        productName="NVIDIA H100 80GB HBM3",
        **{PCIE_ROOT: "pci0000:00", "resource.kubernetes.io/pciBusID": "0000:19:00.0"},
    )
    assert topology == DeviceTopology("pci0000:00", None, CLIQUE)


def test_nvidia_vfio_device_reads_numa() -> None:
    assert read(NVIDIA, numa=1).numa == 1


def test_amd_gpu_reads_numa_node_and_pcie_root() -> None:
    topology = read(AMD, numaNode=3, **{PCIE_ROOT: "pci0000:80"})
    assert topology == DeviceTopology("pci0000:80", 3, None)


def test_intel_deprecated_pci_root_is_read_only_within_its_driver() -> None:
    topology = read(INTEL, pciRoot="3a")
    assert topology.pcie_root == f"{INTEL}/3a"
    # The standard attribute wins where both are published.
    assert read(INTEL, pciRoot="3a", **{PCIE_ROOT: "pci0000:3a"}).pcie_root == "pci0000:3a"


def test_clique_label_counts_only_for_nvidia_gpus() -> None:
    assert read(AMD, {NVLINK_CLIQUE_LABEL: CLIQUE}, numaNode=0).nvlink is None
    assert read(NVIDIA, {NVLINK_CLIQUE_LABEL: CLIQUE}).nvlink == CLIQUE


def test_missing_attributes_are_unknown() -> None:
    assert read(NVIDIA) is UNKNOWN
    assert not UNKNOWN.known


def test_wrong_types_read_as_unknown() -> None:
    assert read(AMD, numaNode="0", **{PCIE_ROOT: 7}) is UNKNOWN
    assert read(AMD, numaNode=True) is UNKNOWN
    assert read(AMD, numaNode=("version", "1.0.0")) is UNKNOWN
    assert read(AMD, **{PCIE_ROOT: True}) is UNKNOWN


def test_numa_out_of_range_reads_as_unknown() -> None:
    # sysfs says -1 when a device has no NUMA node; Linux has at most 1024 nodes.
    assert read(AMD, numaNode=-1) is UNKNOWN
    assert read(AMD, numaNode=1024) is UNKNOWN
    assert read(AMD, numaNode=2**63 - 1) is UNKNOWN
    assert read(AMD, numaNode=1023).numa == 1023


def test_oversized_or_empty_values_read_as_unknown() -> None:
    # Records built by hand (the parser already refuses strings over 64 characters).
    huge = Device("d", attributes={PCIE_ROOT: Attribute("string", "p" * 100_000)})
    assert device_topology(NVIDIA, huge, {}) is UNKNOWN
    empty = Device("d", attributes={PCIE_ROOT: Attribute("string", "")})
    assert device_topology(NVIDIA, empty, {}) is UNKNOWN
    assert read(NVIDIA, {NVLINK_CLIQUE_LABEL: "c" * 64}) is UNKNOWN
    assert read(NVIDIA, {NVLINK_CLIQUE_LABEL: ""}) is UNKNOWN


def test_a_device_whose_attribute_value_is_unreadable_is_refused_not_read() -> None:
    # A list value (alpha) is refused on the device by the slice parser; the reader
    # then sees no attribute at all.
    parsed = slice_from_api(
        slice_obj("s", [{"name": "d", "attributes": {PCIE_ROOT: {"strings": ["a", "b"]}}}])
    )
    [record] = parsed.devices
    assert record.refusal
    assert device_topology(NVIDIA, record, {}) is UNKNOWN


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=200),
    st.floats(allow_nan=True),
)


@given(
    kinds=st.lists(st.sampled_from(["int", "bool", "string", "version", "other"]), max_size=4),
    values=st.lists(_values, min_size=4, max_size=4),
    names=st.lists(
        st.sampled_from([PCIE_ROOT, f"{AMD}/numaNode", f"{AMD}/numa", f"{AMD}/pciRoot", "x"]),
        min_size=4,
        max_size=4,
    ),
    clique=st.one_of(st.none(), st.text(max_size=100), st.integers()),
)
def test_any_attribute_values_read_without_error(
    kinds: list[str], values: list[object], names: list[str], clique: object
) -> None:
    attributes = {
        name: Attribute(kind, value)  # type: ignore[arg-type]
        for kind, value, name in zip(kinds, values, names, strict=False)
    }
    labels: dict[str, Any] = {} if clique is None else {NVLINK_CLIQUE_LABEL: clique}
    topology = device_topology(AMD, Device("d", attributes=attributes), labels)
    assert topology.pcie_root is None or 0 < len(topology.pcie_root) <= 64 + len(AMD) + 1
    assert topology.numa is None or 0 <= topology.numa <= 1023
    assert topology.nvlink is None  # not an NVIDIA GPU
