"""Writing the node's ResourceSlices (dra_slices.py) through the API, in DRA mode.

At each pass of the agent: LIST the slices of this driver on this node (field selectors
`spec.nodeName` and `spec.driver`, as the API server offers them for slices); when
they already say what the discovery says (same names, same specs but the generation,
one generation, the right count), nothing is written. Otherwise the pool's generation
goes up by one and every slice is written with it: the existing ones replaced (PUT,
under their resourceVersion, so a concurrent writer gets 409, not a silent overwrite),
the missing ones created, and only then the ones no longer wanted deleted. Between the
first and the last write the pool is incomplete (slices of two generations, or fewer
than resourceSliceCount of the new one): a scheduler then leaves the pool alone until
it is whole, as kube-scheduler does, so no claim is allocated from half a pool.

Nothing is deleted when there is nothing to publish (no NVML, no GPU for a pass): as
for the Node annotation, a driver that hiccups does not take the devices away.
`withdraw` deletes the pool: `gang-scheduler node-agent --dra-withdraw` (opting out),
besides the kubelet, which removes a driver's slices when its plugin goes away.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from scheduler.agent.discovery import Discovery
from scheduler.agent.dra_slices import DRIVER, slice_name, slice_objects, slice_specs
from scheduler.agent.pcie import DEFAULT_SYSFS, pcie_root
from scheduler.kube.client import KubeClient

log = logging.getLogger("gang_scheduler.dra_publisher")

SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"

JsonObject = dict[str, Any]


class SliceApi(Protocol):
    async def list_slices(self, node: str, driver: str) -> list[JsonObject]: ...

    async def create_slice(self, body: JsonObject) -> JsonObject: ...

    async def replace_slice(self, name: str, body: JsonObject) -> JsonObject: ...

    async def delete_slice(self, name: str) -> None: ...


class KubeSliceApi:
    """SliceApi over the raw-JSON client (RBAC: list, create, update, delete on
    resourceslices; the admission policy keeps each to the agent's own node)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def list_slices(self, node: str, driver: str) -> list[JsonObject]:
        listed = await self.client.list_json(
            SLICES_PATH,
            query=[("fieldSelector", f"spec.nodeName={node},spec.driver={driver}")],
        )
        return listed.items

    async def create_slice(self, body: JsonObject) -> JsonObject:
        return await self.client.request_json("POST", SLICES_PATH, body=body)

    async def replace_slice(self, name: str, body: JsonObject) -> JsonObject:
        return await self.client.request_json("PUT", f"{SLICES_PATH}/{name}", body=body)

    async def delete_slice(self, name: str) -> None:
        await self.client.request_json("DELETE", f"{SLICES_PATH}/{name}")


def _comparable(spec: Mapping[str, Any]) -> str:
    """A spec as the agent compares it: without the pool's generation and the taints'
    timeAdded, which the API server fills in."""
    copy = json.loads(json.dumps(spec))
    copy.get("pool", {}).pop("generation", None)
    for device in copy.get("devices") or []:
        for taint in device.get("taints") or []:
            taint.pop("timeAdded", None)
    return json.dumps(copy, sort_keys=True)


def _generation(item: Mapping[str, Any]) -> int:
    value = ((item.get("spec") or {}).get("pool") or {}).get("generation", 0)
    return value if isinstance(value, int) else 0


def pcie_roots(discovery: Discovery, sysfs: Path = DEFAULT_SYSFS) -> dict[str, str]:
    """PCI bus id -> root complex, for the GPUs whose root sysfs names."""
    roots = {}
    for report in discovery.devices:
        root = pcie_root(report.pci_bus_id, sysfs)
        if root is not None:
            roots[report.pci_bus_id] = root
    return roots


@dataclass
class SlicePublisher:
    """The node's pool of `gpu.gang-scheduler.io` slices, kept equal to the discovery."""

    api: SliceApi
    node: str
    sysfs: Path = DEFAULT_SYSFS
    writes: int = field(default=0, init=False)

    def wanted(self, discovery: Discovery, generation: int = 0) -> list[JsonObject]:
        return slice_specs(
            discovery,
            self.node,
            pcie_roots=pcie_roots(discovery, self.sysfs),
            generation=generation,
        )

    async def publish(self, discovery: Discovery) -> bool:
        """Bring the pool in line with the discovery; True when something was written.
        API errors propagate (the agent logs them and tries again at the next pass)."""
        wanted = self.wanted(discovery)
        if not wanted:
            return False
        existing = [
            item
            for item in await self.api.list_slices(self.node, DRIVER)
            if ((item.get("spec") or {}).get("pool") or {}).get("name") == self.node
        ]
        by_name = {item["metadata"]["name"]: item for item in existing}
        names = [slice_name(self.node, number) for number in range(len(wanted))]
        if self._up_to_date(wanted, names, by_name):
            return False
        generation = max((_generation(item) for item in existing), default=0) + 1
        for name, spec in zip(names, wanted, strict=True):
            spec["pool"]["generation"] = generation
            body: JsonObject = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": spec,
            }
            current = by_name.get(name)
            if current is None:
                await self.api.create_slice(body)
            else:
                body["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
                await self.api.replace_slice(name, body)
            self.writes += 1
        for name in sorted(set(by_name) - set(names)):
            await self.api.delete_slice(name)
            self.writes += 1
        log.info(
            "published %d ResourceSlice(s) of %s for node %s, pool generation %d",
            len(wanted),
            DRIVER,
            self.node,
            generation,
        )
        return True

    @staticmethod
    def _up_to_date(
        wanted: Sequence[JsonObject], names: Sequence[str], by_name: Mapping[str, JsonObject]
    ) -> bool:
        if set(by_name) != set(names):
            return False
        generations = {_generation(item) for item in by_name.values()}
        if len(generations) != 1:
            return False
        return all(
            _comparable(by_name[name].get("spec") or {}) == _comparable(spec)
            for name, spec in zip(names, wanted, strict=True)
        )

    async def withdraw(self) -> int:
        """Delete every slice of this driver on this node; how many were deleted."""
        existing = await self.api.list_slices(self.node, DRIVER)
        for item in existing:
            await self.api.delete_slice(item["metadata"]["name"])
        if existing:
            log.info("withdrew %d ResourceSlice(s) of %s from %s", len(existing), DRIVER, self.node)
        return len(existing)


def printable_slices(discovery: Discovery, node: str, sysfs: Path = DEFAULT_SYSFS) -> JsonObject:
    """What `--print-resourceslices` prints: the slices as a List of whole objects."""
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": slice_objects(discovery, node, pcie_roots=pcie_roots(discovery, sysfs)),
    }
