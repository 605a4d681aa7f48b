"""Node records: what the node offers (static, from the API object) and what is taken.

The accounting part (`requested`, `gpu_free`) is changed only by `charge`/`discharge`,
so that removing a pod restores exactly the numbers that were there before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cache import resources as res
from cache.gpu import (
    TOPOLOGY_ANNOTATION,
    DeviceShares,
    GpuDevice,
    GpuInventory,
    inventory_from_capacity,
    parse_topology,
)
from cache.jsonobj import MALFORMED, mapping, metadata
from cache.kubelet_devices import (
    KUBELET_DEVICES_ANNOTATION,
    KubeletDevices,
    parse_kubelet_devices,
)
from cache.ports import HostPort, UsedPorts, copy_ports, release_ports, take_ports
from cache.terms import Taint, parse_taints

MILLI = res.MILLI_PER_GPU


@dataclass(slots=True)
class NodeInfo:
    name: str
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: Mapping[str, int] = field(default_factory=dict)
    devices: tuple[GpuDevice, ...] = ()
    # pair_scores[i][j]: link score between devices i and j (cache.gpu.LEVEL_SCORE);
    # None when the node publishes no topology.
    pair_scores: tuple[tuple[int, ...], ...] | None = None
    problems: tuple[str, ...] = ()
    # Accounting: requests of the pods on the node (plus "pods": their count) and the
    # free milli of each device (negative when pods we did not place over-commit it).
    requested: res.Resources = field(default_factory=dict)
    gpu_free: list[int] = field(default_factory=list)
    generation: int = 0
    # Host ports the pods on the node hold (cache.ports); empty on most nodes, so a
    # copy costs nothing there.
    used_ports: UsedPorts = field(default_factory=dict)
    # pod uid -> the GPUs the kubelet really gave it, as the node agent reports them
    # (cache.kubelet_devices); the cache charges those for the pod.
    kubelet_devices: KubeletDevices = field(default_factory=dict)
    # Whether every device of `_health_of` (the devices tuple last looked at) is
    # healthy: usable_free runs ~10^6 times in a trace replay and is a plain copy then.
    _all_healthy: bool = field(default=True, init=False, repr=False, compare=False)
    _health_of: tuple[GpuDevice, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if len(self.gpu_free) != len(self.devices):
            self.gpu_free = [MILLI] * len(self.devices)

    def clone(self) -> NodeInfo:
        """A copy whose accounting can change without touching this one."""
        return NodeInfo(
            name=self.name,
            resource_version=self.resource_version,
            labels=self.labels,
            taints=self.taints,
            unschedulable=self.unschedulable,
            allocatable=self.allocatable,
            devices=self.devices,
            pair_scores=self.pair_scores,
            problems=self.problems,
            requested=dict(self.requested),
            gpu_free=list(self.gpu_free),
            generation=self.generation,
            used_ports=copy_ports(self.used_ports) if self.used_ports else {},
            kubelet_devices=self.kubelet_devices,
        )

    def with_accounting_of(self, other: NodeInfo) -> None:
        """Carry the accounting of the previous record of this node over to this one."""
        self.requested = dict(other.requested)
        self.used_ports = copy_ports(other.used_ports)
        if len(other.gpu_free) == len(self.devices):
            self.gpu_free = list(other.gpu_free)

    # --- accounting -----------------------------------------------------------------
    def charge(
        self, requests: Mapping[str, int], shares: DeviceShares, ports: tuple[HostPort, ...] = ()
    ) -> None:
        if ports:
            take_ports(self.used_ports, ports)
        res.add(self.requested, requests)
        self.requested[res.PODS] = self.requested.get(res.PODS, 0) + 1
        for index, milli in shares:
            if index < len(self.gpu_free):
                self.gpu_free[index] -= milli

    def discharge(
        self, requests: Mapping[str, int], shares: DeviceShares, ports: tuple[HostPort, ...] = ()
    ) -> None:
        if ports:
            release_ports(self.used_ports, ports)
        res.subtract(self.requested, requests)
        res.subtract(self.requested, {res.PODS: 1})
        for index, milli in shares:
            if index < len(self.gpu_free):
                self.gpu_free[index] += milli

    # --- reading --------------------------------------------------------------------
    def free(self, name: str) -> int:
        return self.allocatable.get(name, 0) - self.requested.get(name, 0)

    def usable_free(self) -> list[int]:
        """Free milli per device, 0 for unhealthy devices (they take no new work)."""
        if self._health_of is not self.devices:
            self._health_of = self.devices
            self._all_healthy = all(device.healthy for device in self.devices)
        if self._all_healthy:
            return list(self.gpu_free)
        return [
            free if device.healthy else 0
            for device, free in zip(self.devices, self.gpu_free, strict=True)
        ]

    @property
    def free_whole_gpus(self) -> int:
        return sum(
            1
            for device, free in zip(self.devices, self.gpu_free, strict=True)
            if device.healthy and free >= MILLI
        )

    @property
    def max_free_milli(self) -> int:
        return max(self.usable_free(), default=0)

    @property
    def free_gpu_milli(self) -> int:
        return sum(max(0, free) for free in self.usable_free())

    @property
    def gpu_model(self) -> str:
        return self.devices[0].model if self.devices else ""


def inferred_shares(node: NodeInfo, count: int, milli: int) -> DeviceShares:
    """Devices to charge for a pod bound without a readable assignment (placed by another
    scheduler, or by hand). Whole GPUs take the freest devices, a share the tightest one
    that fits, so that what remains looks like what a device plugin would leave. When no
    device has room the charge still lands (the pod is running there), on the freest."""
    if not count or not node.devices:
        return ()
    order = sorted(range(len(node.devices)), key=lambda i: (-node.gpu_free[i], i))
    if milli >= MILLI:
        chosen = sorted(order[:count])
        return tuple((i, MILLI) for i in chosen)
    fitting = [i for i in order if node.gpu_free[i] >= milli]
    index = min(fitting, key=lambda i: (node.gpu_free[i], i)) if fitting else order[0]
    return ((index, milli),)


def node_from_api(obj: Mapping[str, Any], share_milli: int = 1) -> NodeInfo:
    """Build a NodeInfo (with empty accounting) from a node's JSON; never raises on a
    malformed value: it becomes a problem message and the field falls back (a node
    whose very structure is broken offers nothing until it is fixed). `nvidia.com/vgpu`
    is counted in milli of a GPU, `share_milli` a unit (resources.shares_in_milli)."""
    try:
        return _parse_node(obj, share_milli)
    except MALFORMED as error:
        meta = metadata(obj)
        return NodeInfo(
            name=str(meta.get("name") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            unschedulable=True,
            problems=(f"the node object is malformed ({type(error).__name__}: {error})",),
        )


def _parse_node(obj: Mapping[str, Any], share_milli: int) -> NodeInfo:
    meta = metadata(obj)
    spec = mapping(obj.get("spec"))
    status = mapping(obj.get("status"))
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = meta.get("annotations") or {}
    problems: list[str] = []

    allocatable: res.Resources = {}
    try:
        allocatable = res.shares_in_milli(
            res.parse_resource_list(status.get("allocatable") or status.get("capacity")),
            share_milli,
        )
    except ValueError as error:
        problems.append(f"allocatable: {error}")

    inventory: GpuInventory | None = None
    if TOPOLOGY_ANNOTATION in annotations:
        try:
            inventory = parse_topology(str(annotations[TOPOLOGY_ANNOTATION]))
        except ValueError as error:
            problems.append(f"{error}; using the GPU count from allocatable, links unknown")
    if inventory is None:
        try:
            inventory = inventory_from_capacity(
                allocatable.get(res.WHOLE_GPU, 0), allocatable.get(res.SHARED_GPU, 0), labels
            )
        except ValueError as error:
            problems.append(str(error))
            inventory = GpuInventory((), None)
    kubelet_devices: KubeletDevices = {}
    if KUBELET_DEVICES_ANNOTATION in annotations:
        try:
            kubelet_devices = parse_kubelet_devices(str(annotations[KUBELET_DEVICES_ANNOTATION]))
        except ValueError as error:
            problems.append(str(error))
    return NodeInfo(
        name=str(meta.get("name") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        labels=labels,
        taints=parse_taints(spec.get("taints")),
        unschedulable=bool(spec.get("unschedulable")),
        allocatable=allocatable,
        devices=inventory.devices,
        pair_scores=inventory.pair_scores,
        problems=tuple(problems),
        kubelet_devices=kubelet_devices,
    )
