"""The ResourceSlices (`resource.k8s.io/v1`) the node agent publishes in DRA mode, built
from its NVML discovery. Pure: a Discovery in, slice specs out (dra_publisher.py writes
them; docs/node-agent.md, "DRA mode", lists every name).

One pool per node, named after the node, of the driver `gpu.gang-scheduler.io`:

- one slice per GPU (more where a GPU's devices exceed what a slice may hold) with its
  devices: the GPU itself, `gpu-<index>`, and where the GPU has MIG profiles, one
  device per possible partition (profile and placement),
  `gpu-<index>-mig-<profile>-<profile id>-<start>`, as NVIDIA's DRA driver
  (k8s-dra-driver-gpu) names and models them;
- where any GPU has MIG profiles, first the slices with the shared counters (1.35 and
  later keep counters and devices in separate slices of the pool; 8 sets a slice): one
  counter set per GPU, `gpu-<index>-counters`, counting its multiprocessors, engines
  and memory, plus one counter per memory slice; the GPU consumes all of it, each
  partition its profile's share and the memory slices of its placement, so that a GPU
  and a partition of it, or two overlapping partitions, are never both allocated.

kube-scheduler consumes a shareable device's counters once, at its first share
(KEP-5075; kubernetes#139034, fixed by PR #139040 in May 2026, made it forget them in
later cycles): with partitions tainted (below) no claim meets that case yet.

The GPU device allows multiple allocations: capacity `milli` (1000 = one GPU, the unit
of `nvidia.com/vgpu`) with a request policy of 1 to 1000 in steps of 1 and a default of
1000, so a request that names no capacity takes the whole GPU and one that asks for
`milli: 300` shares it; `memory` (bytes) with a default of 0, so shares that name no
memory do not exhaust it.

A partition is published but not yet preparable (creating MIG instances is not
implemented): it carries the taint `gpu.gang-scheduler.io/partition-not-prepared`
(NoSchedule), so no claim gets one unless it tolerates that on purpose. An unhealthy
GPU (discovery.py's rules) keeps its name and carries `gpu.gang-scheduler.io/unhealthy`
(NoSchedule) on itself and its partitions: nothing new is placed on it, and a claim
already holding it is left alone (no NoExecute: whether a job survives is its own call).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cache.resources import MILLI_PER_GPU
from scheduler.agent.discovery import MIB, DeviceReport, Discovery
from scheduler.agent.nvml import MigProfile
from scheduler.agent.pcie import PCI_BUS_ID_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE, is_bus_id

DRIVER = "gpu.gang-scheduler.io"
API_VERSION = "resource.k8s.io/v1"
MILLI = "milli"
MEMORY = "memory"
UNHEALTHY_TAINT = f"{DRIVER}/unhealthy"
PARTITION_TAINT = f"{DRIVER}/partition-not-prepared"
GPU_TYPE = "gpu"
MIG_TYPE = "mig"
# The object name limit (a DNS subdomain), a device name's (a DNS label), and a string
# attribute's (bytes).
NAME_MAX = 253
DNS_LABEL_MAX = 63
STRING_MAX_BYTES = 64
# What one slice may hold (resource.k8s.io/v1 validation).
DEVICES_PER_SLICE = 128
DEVICES_PER_SLICE_ADVANCED = 64  # when a device has taints or consumes counters
COUNTERS_PER_SLICE = 1024  # counters consumed by all devices of a slice together
COUNTER_SETS_PER_SLICE = 8
COUNTERS_PER_SET = 32

JsonObject = dict[str, Any]

# Each partition capacity and the counter it consumes (counters are DNS labels).
_ENGINE_CAPACITIES: tuple[tuple[str, str, str], ...] = (
    ("multiprocessors", "multiprocessors", "multiprocessors"),
    ("copyEngines", "copy-engines", "copy_engines"),
    ("decoders", "decoders", "decoders"),
    ("encoders", "encoders", "encoders"),
    ("jpegEngines", "jpeg-engines", "jpeg_engines"),
    ("ofaEngines", "ofa-engines", "ofa_engines"),
)


def device_name(index: int) -> str:
    return f"gpu-{index}"


def counter_set_name(index: int) -> str:
    return f"gpu-{index}-counters"


def memory_slice_counter(number: int) -> str:
    return f"memory-slice-{number}"


def partition_name(index: int, profile: MigProfile, start: int) -> str:
    """NVIDIA's canonical MIG device name: parent, profile without dots, id, start; the
    profile part cut so that the name stays a DNS label (63 characters)."""
    tail = f"-{profile.profile_id}-{start}"
    head = f"gpu-{index}-mig-"
    label = re.sub(r"[^a-z0-9]+", "-", profile.name.lower().replace(".", "")).strip("-")
    label = label[: max(1, DNS_LABEL_MAX - len(head) - len(tail))].strip("-")
    return f"{head}{label or 'profile'}{tail}"


def slice_name(node: str, number: int) -> str:
    """A stable name per node and slice number; a node name too long to fit is hashed."""
    suffix = f"-{DRIVER}-{number}"
    if len(node) + len(suffix) <= NAME_MAX:
        return node + suffix
    return hashlib.sha256(node.encode()).hexdigest()[:32] + suffix


def nvlink_domains(discovery: Discovery) -> dict[int, int]:
    """GPU index -> its NVLink domain: GPUs joined by NVLink, directly or through
    others, share one, numbered by their lowest index. GPUs without NVLink have none.
    Numbers are per node: two nodes' domain 0 are not one domain."""
    links = discovery.links or ()
    parent = list(range(len(links)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    linked: set[int] = set()
    for i, row in enumerate(links):
        for j, cell in enumerate(row):
            if i != j and cell.startswith("NV"):
                linked.update((i, j))
                a, b = root(i), root(j)
                parent[max(a, b)] = min(a, b)
    return {i: root(i) for i in sorted(linked)}


def _string(value: str) -> JsonObject:
    """A string attribute, cut to the API's 64 bytes on a character boundary (NVML's
    names are the driver's to choose; a longer one must not get the slice refused)."""
    cut = value.encode()[:STRING_MAX_BYTES].decode("utf-8", "ignore")
    return {"string": cut}


def _int(value: int) -> JsonObject:
    return {"int": value}


def _gpu_attributes(
    report: DeviceReport, roots: Mapping[str, str], domains: Mapping[int, int]
) -> JsonObject:
    attributes: JsonObject = {
        "type": _string(GPU_TYPE),
        "index": _int(report.index),
    }
    if report.uuid:
        attributes["uuid"] = _string(report.uuid)
    if report.model:
        attributes["productName"] = _string(report.model)
    if report.numa is not None:
        attributes["numaNode"] = _int(report.numa)
    if report.index in domains:
        attributes["nvlinkDomain"] = _int(domains[report.index])
    if is_bus_id(report.pci_bus_id):
        attributes[PCI_BUS_ID_ATTRIBUTE] = _string(report.pci_bus_id)
    root = roots.get(report.pci_bus_id)
    if root:
        attributes[PCIE_ROOT_ATTRIBUTE] = _string(root)
    return attributes


def _memory_bytes(mib: int) -> str:
    return str(mib * MIB)


def _taints(report: DeviceReport, *extra: str) -> list[JsonObject]:
    keys = [*extra, *([] if report.healthy else [UNHEALTHY_TAINT])]
    return [{"key": key, "effect": "NoSchedule"} for key in keys]


def _full_counters(profiles: Sequence[MigProfile]) -> dict[str, int]:
    """What a whole GPU holds, as NVIDIA's driver counts it: each capacity's largest
    value over the profiles (the 7g profile's), and one counter per memory slice."""
    counters = {
        counter: max(getattr(p, field) for p in profiles)
        for _, counter, field in _ENGINE_CAPACITIES
    }
    counters[MEMORY] = max(p.memory_mib for p in profiles) * MIB
    counters |= {memory_slice_counter(n): 1 for n in range(_memory_slices(profiles))}
    return counters


def _quantities(counters: Mapping[str, int]) -> JsonObject:
    return {name: {"value": str(value)} for name, value in counters.items()}


def _memory_slices(profiles: Sequence[MigProfile]) -> int:
    return max((start + size for p in profiles for start, size in p.placements), default=0)


def _has_partitions(report: DeviceReport) -> bool:
    """Whether the GPU's partitions are published: it has placements, and its counters
    fit a counter set (32; 8 memory slices on today's GPUs). A GPU whose NVML answers
    cannot be modelled is published whole, without partitions."""
    if not any(p.placements for p in report.mig_profiles):
        return False
    return len(_ENGINE_CAPACITIES) + 1 + _memory_slices(report.mig_profiles) <= COUNTERS_PER_SET


def _gpu_device(
    report: DeviceReport, roots: Mapping[str, str], domains: Mapping[int, int]
) -> JsonObject:
    capacity: JsonObject = {
        MILLI: {
            "value": str(MILLI_PER_GPU),
            "requestPolicy": {
                "default": str(MILLI_PER_GPU),
                "validRange": {"min": "1", "max": str(MILLI_PER_GPU), "step": "1"},
            },
        }
    }
    if report.memory_mib > 0:
        capacity[MEMORY] = {
            "value": _memory_bytes(report.memory_mib),
            "requestPolicy": {"default": "0", "validRange": {"min": "0"}},
        }
    device: JsonObject = {
        "name": device_name(report.index),
        "attributes": _gpu_attributes(report, roots, domains),
        "capacity": capacity,
        "allowMultipleAllocations": True,
    }
    if _has_partitions(report):
        device["consumesCounters"] = [
            {
                "counterSet": counter_set_name(report.index),
                "counters": _quantities(_full_counters(report.mig_profiles)),
            }
        ]
    taints = _taints(report)
    if taints:
        device["taints"] = taints
    return device


def _partition_devices(
    report: DeviceReport, roots: Mapping[str, str], domains: Mapping[int, int]
) -> list[JsonObject]:
    parent = _gpu_attributes(report, roots, domains)
    devices = []
    named: set[str] = set()
    for profile in sorted(report.mig_profiles, key=lambda p: (p.memory_mib, p.profile_id)):
        counters = {counter: getattr(profile, field) for _, counter, field in _ENGINE_CAPACITIES}
        counters[MEMORY] = profile.memory_mib * MIB
        capacity = {name: getattr(profile, field) for name, _, field in _ENGINE_CAPACITIES}
        capacity[MEMORY] = profile.memory_mib * MIB
        for start, size in profile.placements:
            name = partition_name(report.index, profile, start)
            if name in named:
                continue  # one device per profile and start, as NVML lists them
            named.add(name)
            attributes = {key: value for key, value in parent.items() if key != "uuid"}
            attributes |= {
                "type": _string(MIG_TYPE),
                "profile": _string(profile.name),
                "parentUUID": _string(report.uuid),
                "placementStart": _int(start),
            }
            used = counters | {memory_slice_counter(start + n): 1 for n in range(size)}
            devices.append(
                {
                    "name": name,
                    "attributes": attributes,
                    "capacity": _quantities(capacity),
                    "consumesCounters": [
                        {
                            "counterSet": counter_set_name(report.index),
                            "counters": _quantities(used),
                        }
                    ],
                    "taints": _taints(report, PARTITION_TAINT),
                }
            )
    return devices


def _counter_entries(device: Mapping[str, Any]) -> int:
    return sum(len(use["counters"]) for use in device.get("consumesCounters", []))


def _within_slice_limits(devices: Sequence[JsonObject]) -> list[list[JsonObject]]:
    """Devices in order, cut into runs a slice may hold: at most 64 devices (128 when
    none has taints or counters) and 1,024 consumed counters in all."""
    chunks: list[list[JsonObject]] = []
    current: list[JsonObject] = []
    entries = 0
    for device in devices:
        advanced = any(d.get("taints") or d.get("consumesCounters") for d in [*current, device])
        limit = DEVICES_PER_SLICE_ADVANCED if advanced else DEVICES_PER_SLICE
        more = _counter_entries(device)
        if current and (len(current) + 1 > limit or entries + more > COUNTERS_PER_SLICE):
            chunks.append(current)
            current, entries = [], 0
        current.append(device)
        entries += more
    if current:
        chunks.append(current)
    return chunks


def slice_specs(
    discovery: Discovery,
    node: str,
    *,
    pcie_roots: Mapping[str, str] | None = None,
    generation: int = 0,
) -> list[JsonObject]:
    """The specs of the pool's slices, in order (the counters first); [] when there is
    nothing to publish (no NVML, no GPU). `pcie_roots`: PCI bus id -> root complex."""
    if not discovery.found or not discovery.devices:
        return []
    roots = pcie_roots or {}
    domains = nvlink_domains(discovery)
    counter_sets = [
        {
            "name": counter_set_name(report.index),
            "counters": _quantities(_full_counters(report.mig_profiles)),
        }
        for report in discovery.devices
        if _has_partitions(report)
    ]
    bodies: list[JsonObject] = [
        {"sharedCounters": counter_sets[start : start + COUNTER_SETS_PER_SLICE]}
        for start in range(0, len(counter_sets), COUNTER_SETS_PER_SLICE)
    ]
    for report in discovery.devices:
        devices = [_gpu_device(report, roots, domains)]
        if _has_partitions(report):
            devices += _partition_devices(report, roots, domains)
        bodies += [{"devices": chunk} for chunk in _within_slice_limits(devices)]
    count = len(bodies)
    return [
        {
            "driver": DRIVER,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            "nodeName": node,
            **body,
        }
        for body in bodies
    ]


def slice_objects(
    discovery: Discovery,
    node: str,
    *,
    pcie_roots: Mapping[str, str] | None = None,
    generation: int = 0,
) -> list[JsonObject]:
    """The whole objects, named per node (what `--dry-run` prints)."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": slice_name(node, number)},
            "spec": spec,
        }
        for number, spec in enumerate(
            slice_specs(discovery, node, pcie_roots=pcie_roots, generation=generation)
        )
    ]
