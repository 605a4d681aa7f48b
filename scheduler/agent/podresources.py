"""What the kubelet really allocated, reported on the agent's own Node.

Where NVIDIA's device plugin serves `nvidia.com/gpu`, the kubelet and that plugin pick
each pod's GPUs, whatever the scheduler assigned. Every `interval` seconds this reads
the kubelet's pod-resources API (`List`, podresources_api.py), maps each pod's device
IDs to the NVML indices of this node's GPUs, and writes pod uid -> indices in the Node
annotation `gang-scheduler.io/gpu-kubelet-devices` (cache.kubelet_devices), only when
it changed. The scheduler's cache charges those GPUs for those pods (docs/node-agent.md,
"What the kubelet allocated").

Left out of the report: pods this agent's own device plugin served (their
`gang-scheduler.io/gpu-allocated` mark): they got what the scheduler assigned, whatever
IDs the kubelet recorded; finished pods; pods whose device IDs name no GPU of this node
(a MIG device, another plugin's naming), said once in the log.

Device IDs as NVIDIA's plugin names them: the GPU's UUID (its default), `<uuid>::<n>`
(time-slicing replicas), or the GPU's index (`deviceIDStrategy: index`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
import grpc.aio

from cache.jsonobj import mapping
from cache.kubelet_devices import KUBELET_DEVICES_ANNOTATION, format_kubelet_devices
from cache.resources import WHOLE_GPU
from scheduler.agent import podresources_api as api
from scheduler.agent.allocation import ALLOCATED_ANNOTATION, FINISHED_PHASES, ID_SEPARATOR
from scheduler.agent.discovery import Discovery
from scheduler.agent.publisher import MERGE_PATCH, AgentOptions, is_transient
from scheduler.kube.client import ApiError, KubeClient

log = logging.getLogger("gang_scheduler.pod_resources")

DEFAULT_INTERVAL = 10.0
CALL_TIMEOUT = 10.0

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class PodResourcesConfig:
    node_name: str
    socket: Path = Path(api.DEFAULT_SOCKET)
    interval: float = DEFAULT_INTERVAL
    # The resources NVIDIA's plugin serves here whose devices are reported.
    resources: tuple[str, ...] = (WHOLE_GPU,)


# --- the report (pure) -------------------------------------------------------------------------
def gpu_index(device_id: str, indices: Mapping[str, int], count: int) -> int | None:
    """The NVML index of the GPU a device ID names (None when it names none here)."""
    uuid = device_id.split(ID_SEPARATOR, 1)[0]
    if uuid in indices:
        return indices[uuid]
    if device_id.isascii() and device_id.isdigit() and len(device_id) <= 3:
        index = int(device_id)
        return index if index < count else None
    return None


@dataclass(frozen=True)
class Report:
    devices: dict[str, tuple[int, ...]]  # pod uid -> GPU indices
    unknown: tuple[str, ...] = ()  # "<ns>/<pod>: <id>" for IDs naming no GPU here


def kubelet_devices(
    listed: Iterable[api.PodResources],
    pods: Iterable[Mapping[str, object]],
    node: str,
    indices: Mapping[str, int],
    resources: Sequence[str] = (WHOLE_GPU,),
) -> Report:
    """Pod uid -> the GPUs the kubelet gave the pod's containers (module docstring says
    which pods are left out). `pods`: the API's pods of the node (the pod-resources API
    names pods by namespace and name, the scheduler's cache knows them by uid);
    `indices`: GPU uuid -> NVML index."""
    uids: dict[tuple[str, str], str] = {}
    for obj in pods:
        meta = mapping(obj.get("metadata"))
        spec = mapping(obj.get("spec"))
        status = mapping(obj.get("status"))
        annotations = mapping(meta.get("annotations"))
        if (
            str(spec.get("nodeName") or "") != node
            or str(status.get("phase") or "") in FINISHED_PHASES
            or ALLOCATED_ANNOTATION in annotations
        ):
            continue
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        uids[key] = str(meta.get("uid") or "")
    wanted = frozenset(resources)
    count = len(indices)
    found: dict[str, tuple[int, ...]] = {}
    unknown: list[str] = []
    for pod in listed:
        uid = uids.get((pod.namespace, pod.name))
        if not uid:
            continue
        held: set[int] = set()
        strange = [
            device_id
            for container in pod.containers
            for devices in container.devices
            if devices.resource in wanted
            for device_id in devices.ids
            if not _held(held, gpu_index(device_id, indices, count))
        ]
        if strange:
            unknown.append(f"{pod.namespace}/{pod.name}: {strange[0]}")
        elif held:
            found[uid] = tuple(sorted(held))
    return Report(found, tuple(unknown))


def _held(held: set[int], index: int | None) -> bool:
    if index is None:
        return False
    held.add(index)
    return True


# (namespace, pod) -> container -> the GPU indices the kubelet gave it.
ContainerGpus = dict[tuple[str, str], dict[str, tuple[int, ...]]]


def container_gpus(
    listed: Iterable[api.PodResources],
    indices: Mapping[str, int],
    resources: Sequence[str] = (WHOLE_GPU,),
) -> ContainerGpus:
    """What the kubelet's answer says each container holds, as GPU indices of this
    node (IDs that name no GPU here are left out): the metrics' attribution of pods
    NVIDIA's plugin served (metrics.holdings)."""
    wanted = frozenset(resources)
    count = len(indices)
    found: ContainerGpus = {}
    for pod in listed:
        for container in pod.containers:
            held = {
                index
                for devices in container.devices
                if devices.resource in wanted
                for device_id in devices.ids
                if (index := gpu_index(device_id, indices, count)) is not None
            }
            if held:
                found.setdefault((pod.namespace, pod.name), {})[container.name] = tuple(
                    sorted(held)
                )
    return found


# --- the kubelet's side ------------------------------------------------------------------------
class PodResourcesLister(Protocol):
    async def list(self) -> list[api.PodResources]: ...


class KubeletPodResources:
    """The kubelet's `v1.PodResourcesLister` over its unix socket. A call that finds
    no kubelet there (UNAVAILABLE) drops the channel, so that the next pass connects
    afresh instead of waiting out gRPC's reconnect backoff (up to two minutes) after a
    kubelet restart."""

    # gRPC shares subchannels between channels to the same target by default: a fresh
    # channel would inherit the old one's failed connection and its backoff. A pool of
    # its own per channel makes "connect afresh" mean it.
    OPTIONS = (("grpc.use_local_subchannel_pool", 1),)

    def __init__(self, socket: Path) -> None:
        self.target = f"unix://{socket}"
        self.channel = grpc.aio.insecure_channel(self.target, options=self.OPTIONS)

    async def close(self) -> None:
        await self.channel.close()

    async def list(self) -> list[api.PodResources]:
        call = self.channel.unary_unary(
            api.LIST_METHOD,
            request_serializer=api.encode_list_request,
            response_deserializer=api.decode_list_response,
        )
        try:
            result: list[api.PodResources] = await call(None, timeout=CALL_TIMEOUT)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                await self.channel.close()
                self.channel = grpc.aio.insecure_channel(self.target, options=self.OPTIONS)
            raise
        return result

    async def get(self, namespace: str, name: str) -> api.PodResources:
        call = self.channel.unary_unary(
            api.GET_METHOD,
            request_serializer=api.encode_get_request,
            response_deserializer=api.decode_get_response,
        )
        result: api.PodResources = await call(api.GetRequest(namespace, name), timeout=CALL_TIMEOUT)
        return result


# --- the reporter ------------------------------------------------------------------------------
class KubeApi(Protocol):
    """The API calls it makes, all allowed to the agent already: list the node's pods,
    get and patch its own Node."""

    async def list_pods(self, node: str) -> list[JsonObject]: ...

    async def get_node(self, name: str) -> JsonObject: ...

    async def patch_node(self, name: str, patch: JsonObject) -> JsonObject: ...


class KubeReporterApi:
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def list_pods(self, node: str) -> list[JsonObject]:
        # resourceVersion=0: from the API server's watch cache; a pod bound a moment ago
        # that the cache has not seen yet is reported at the next pass.
        listed = await self.client.list_json(
            "/api/v1/pods",
            query=[("fieldSelector", f"spec.nodeName={node}"), ("resourceVersion", "0")],
        )
        return listed.items

    async def get_node(self, name: str) -> JsonObject:
        return await self.client.request_json("GET", f"/api/v1/nodes/{name}")

    async def patch_node(self, name: str, patch: JsonObject) -> JsonObject:
        return await self.client.request_json(
            "PATCH", f"/api/v1/nodes/{name}", body=patch, content_type=MERGE_PATCH
        )


@dataclass
class KubeletDeviceReporter:
    config: PodResourcesConfig
    kubelet: PodResourcesLister
    kube: KubeApi
    # GPU uuid -> NVML index, as the publisher last discovered them ({} until then).
    gpus: Callable[[], Mapping[str, int]]
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    written: str | None = None  # the annotation's value on the Node, once known
    reports: int = 0  # passes that reached the kubelet, for the tests
    # The last answer, per container (a new object at every pass that reached the
    # kubelet): the metrics attribute NVIDIA's plugin's pods from it.
    containers: ContainerGpus = field(default_factory=dict)
    _last_note: str = field(default="", init=False)

    def stop(self) -> None:
        self.stopping.set()

    async def run(self) -> None:
        while not self.stopping.is_set():
            await self.report()
            with suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.config.interval)

    def _note(self, message: str) -> None:
        if message != self._last_note:
            self._last_note = message
            log.warning("%s", message)

    async def report(self) -> bool:
        """One pass; True when the Node carries the current report afterwards."""
        indices = self.gpus()
        if not indices:
            return False  # no GPU discovered (yet): nothing to map device IDs to
        node = self.config.node_name
        try:
            listed = await self.kubelet.list()
        except grpc.aio.AioRpcError as error:
            self._note(
                f"cannot read the kubelet's pod-resources API at {self.config.socket}: "
                f"{error.code().name}: {error.details()} (is /var/lib/kubelet/pod-resources "
                "mounted?); trying again"
            )
            return False
        self.reports += 1
        self.containers = container_gpus(listed, indices, self.config.resources)
        try:
            pods = await self.kube.list_pods(node)
            report = kubelet_devices(listed, pods, node, indices, self.config.resources)
            text = format_kubelet_devices(report.devices)
            if self.written is None:
                current = await self.kube.get_node(node)
                annotations = mapping(mapping(current.get("metadata")).get("annotations"))
                value = annotations.get(KUBELET_DEVICES_ANNOTATION)
                self.written = value if isinstance(value, str) else ""
            if text != self.written:
                patch = {"metadata": {"annotations": {KUBELET_DEVICES_ANNOTATION: text}}}
                await self.kube.patch_node(node, patch)
                log.info("the kubelet's GPU allocations on %s: %s", node, text)
                self.written = text
        except Exception as error:
            if not (isinstance(error, ApiError) or is_transient(error)):
                raise
            self._note(f"cannot report the kubelet's GPU allocations on {node}: {error}")
            return False
        if report.unknown:
            self._note(
                "device IDs that name no GPU of this node, pods left out of the report: "
                + "; ".join(report.unknown[:5])
            )
        else:
            self._last_note = ""
        return True


class Discovered(Protocol):
    """The publisher (NodeAgent): its last discovery names the GPUs."""

    @property
    def last_discovery(self) -> Discovery | None: ...


def start_reporter(
    options: AgentOptions, node: str, client: KubeClient, agent: Discovered
) -> tuple[KubeletDeviceReporter, asyncio.Task[None]]:
    """The reporter of `gang-scheduler node-agent`, running; its kubelet channel is
    closed when it ends."""

    def gpus() -> dict[str, int]:
        found = agent.last_discovery
        return {d.uuid: d.index for d in found.devices if d.uuid} if found is not None else {}

    socket = Path(options.pod_resources_socket)
    kubelet = KubeletPodResources(socket)
    reporter = KubeletDeviceReporter(
        PodResourcesConfig(node, socket, options.pod_resources_interval),
        kubelet,
        KubeReporterApi(client),
        gpus,
    )

    async def run() -> None:
        try:
            await reporter.run()
        finally:
            await kubelet.close()

    return reporter, asyncio.create_task(run())
