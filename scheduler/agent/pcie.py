"""The PCIe root complex of a PCI device, read from sysfs, for the DRA standard attribute
`resource.kubernetes.io/pcieRoot` (KEP-5491).

`/sys/bus/pci/devices/<domain:bus:device.function>` is a link into `/sys/devices`, whose
first directory is the root complex the device hangs under (`pci0000:00`), whatever the
switches between them. Devices of one root share a value, so a claim can ask for a GPU
and a NIC under the same root with `matchAttribute`. The value is written as Kubernetes'
helper (k8s.io/dynamic-resource-allocation/deviceattribute) writes it: `pci<domain>:<bus>`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
DEFAULT_SYSFS = Path("/sys")

# Extended BDF notation, as the standard attribute requires it: 0000:07:00.0.
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


def is_bus_id(text: str) -> bool:
    return bool(_BDF.match(text))


def pcie_root(bus_id: str, sysfs: Path = DEFAULT_SYSFS) -> str | None:
    """`pci<domain>:<bus>` of the root complex above the device, or None when sysfs does
    not say (not mounted, a VM that hides it, a bus id that is not extended BDF)."""
    if not is_bus_id(bus_id):
        return None
    link = sysfs / "bus" / "pci" / "devices" / bus_id
    try:
        target = os.readlink(link)
    except OSError:
        return None
    resolved = os.path.normpath(os.path.join(link.parent, target))
    devices = os.path.join(os.path.normpath(sysfs), "devices") + os.sep
    if not resolved.startswith(devices) or os.path.basename(resolved) != bus_id:
        return None
    root = resolved[len(devices) :].split(os.sep, 1)[0]
    return root if _ROOT.match(root) else None
