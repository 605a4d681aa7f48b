"""Where a DRA device sits: its PCIe root complex, its NUMA node and its NVLink domain,
read from the attributes GPU vendors' drivers publish (docs/conventions.md, "DRA device
attributes this scheduler reads").

Attribute names are fully qualified here (cache/dra/slices.py qualifies a bare name with
the driver's domain, as the allocator resolves it), so the driver-specific names are
looked up under the device's own driver: "numaNode" of gpu.amd.com is
"gpu.amd.com/numaNode".

- PCIe root: the standard `resource.kubernetes.io/pcieRoot` (a string "pci<domain>:<bus>",
  k8s.io/dynamic-resource-allocation/deviceattribute), published by NVIDIA's, AMD's and
  Intel's drivers; else Intel's deprecated `<driver>/pciRoot` (the bus only), kept
  apart from the standard values by the driver's name.
- NUMA node: `<driver>/numaNode` (AMD), `<driver>/numa` (NVIDIA's VFIO devices),
  `<driver>/numaNodeID` (the example driver's CPU profile), each an int.
- NVLink domain: no GPU driver publishes one per device; NVIDIA's GPU feature discovery
  labels each multi-node NVLink node `nvidia.com/gpu.clique` ("<cluster uuid>.<clique
  id>"), so the devices of driver gpu.nvidia.com on such a node share that domain.

Every value is a tenant's or a driver's and may be anything: a wrong type, an empty or
oversized string, a negative or huge NUMA number reads as unknown, never as an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from cache.dra.fields import MAX_ATTRIBUTE_TEXT, Attribute
from cache.dra.slices import Device

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
# Intel's drivers (GPU, Gaudi): deprecated, the bus number without the PCI domain.
LEGACY_PCI_ROOT = "pciRoot"
NUMA_NAMES = ("numaNode", "numa", "numaNodeID")
NVIDIA_GPU_DRIVER = "gpu.nvidia.com"
NVLINK_CLIQUE_LABEL = "nvidia.com/gpu.clique"
# Linux builds with at most 2^10 NUMA nodes (CONFIG_NODES_SHIFT); sysfs says -1 for none.
MAX_NUMA_NODE = 1023
# A label value is at most 63 characters; anything longer was not written by GFD.
MAX_CLIQUE_TEXT = 63
_MEMO_KEY = "topology"


class DeviceTopology(NamedTuple):
    """What is known of where a device sits; None where nothing (valid) says."""

    pcie_root: str | None = None
    numa: int | None = None
    nvlink: str | None = None

    @property
    def known(self) -> bool:
        return self.pcie_root is not None or self.numa is not None or self.nvlink is not None


UNKNOWN = DeviceTopology()


def _text(value: Attribute | None, limit: int = MAX_ATTRIBUTE_TEXT) -> str | None:
    if value is None or value.kind != "string" or not isinstance(value.value, str):
        return None
    text = value.value
    return text if 0 < len(text) <= limit else None


def _numa(value: Attribute | None) -> int | None:
    if value is None or value.kind != "int" or isinstance(value.value, bool):
        return None
    number = value.value
    if not isinstance(number, int) or not 0 <= number <= MAX_NUMA_NODE:
        return None
    return number


def pcie_root(driver: str, attributes: Mapping[str, Attribute]) -> str | None:
    standard = _text(attributes.get(PCIE_ROOT))
    if standard is not None:
        return standard
    legacy = _text(attributes.get(f"{driver}/{LEGACY_PCI_ROOT}"))
    # Prefixed with the driver: a bus number alone is comparable within one driver only.
    return None if legacy is None else f"{driver}/{legacy}"


def numa_node(driver: str, attributes: Mapping[str, Attribute]) -> int | None:
    for name in NUMA_NAMES:
        number = _numa(attributes.get(f"{driver}/{name}"))
        if number is not None:
            return number
    return None


def nvlink_domain(driver: str, node_labels: Mapping[str, str]) -> str | None:
    """The node's NVLink clique for NVIDIA GPUs (None for other drivers' devices)."""
    if driver != NVIDIA_GPU_DRIVER:
        return None
    value = node_labels.get(NVLINK_CLIQUE_LABEL)
    if not isinstance(value, str) or not 0 < len(value) <= MAX_CLIQUE_TEXT:
        return None
    return value


def device_topology(driver: str, device: Device, node_labels: Mapping[str, str]) -> DeviceTopology:
    """The device's place; the attribute part is read once per device record (a slice's
    change replaces the record, and its memo with it)."""
    memo = device.memo
    read = memo.get(_MEMO_KEY)
    if read is None:
        read = memo[_MEMO_KEY] = (
            pcie_root(driver, device.attributes),
            numa_node(driver, device.attributes),
        )
    nvlink = nvlink_domain(driver, node_labels)
    if read[0] is None and read[1] is None and nvlink is None:
        return UNKNOWN
    return DeviceTopology(read[0], read[1], nvlink)
