"""The device plugin: `nvidia.com/vgpu` for the kubelet, and `nvidia.com/gpu` on nodes
that opt in (a second instance, `DevicePluginConfig.whole_gpus_config`), honouring the
scheduler's GPU assignment (docs/device-plugin.md).

- Serves `v1beta1.DevicePlugin` (grpc.aio, on the agent's event loop) on a unix socket
  in the kubelet's device-plugin directory and registers it on `kubelet.sock`.
- ListAndWatch: `1000 / unit` share-devices per GPU (`<uuid>::<k>`), Unhealthy while
  NVML reports the GPU unhealthy, the GPU's NUMA node as its topology; a new list is
  sent when health changes (NVML is asked every `health_interval` seconds).
- Allocate: finds the pod (allocation.choose: the rule and its race are in
  docs/device-plugin.md), answers with NVIDIA_VISIBLE_DEVICES and the share, and
  marks the container allocated on the pod; no match is a FAILED_PRECONDITION error
  with the reason, never a device picked at random.
- Restarts: every `watch_interval` seconds it checks that its socket still exists
  and that kubelet.sock is the one it registered with (inode and ctime); otherwise it
  starts a fresh server and registers again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import grpc
import grpc.aio

from cache.resources import MILLI_PER_GPU, SHARED_GPU, WHOLE_GPU
from cache.signing import SigningKeys
from scheduler.agent import kubelet_api as api
from scheduler.agent.allocation import (
    DEFAULT_SCHEDULER_NAMES,
    DEVICES_ENV,
    VISIBLE_DEVICES_ENV,
    GpuState,
    Match,
    NoMatch,
    allocated_patch,
    choose,
    container_env,
    device_ids,
    gpu_of,
    preferred_ids,
    valid_unit,
)
from scheduler.agent.assignment_keys import DEFAULT_KEY_SECRET, KeySource, secret_problem
from scheduler.agent.discovery import Discovery, discover
from scheduler.agent.health import HealthBook
from scheduler.agent.isolation import DEFAULT_MODES, container_answer, mode_problems
from scheduler.agent.nvml import NvmlBackend
from scheduler.agent.publisher import is_transient
from scheduler.kube.client import ApiError, KubeClient

log = logging.getLogger("gang_scheduler.device_plugin")

DEFAULT_DIRECTORY = Path("/var/lib/kubelet/device-plugins")
SOCKET_NAME = "gang-scheduler-vgpu.sock"
# Whole GPUs (`nvidia.com/gpu`) on a node that opted in: a second plugin, its own socket.
WHOLE_SOCKET_NAME = "gang-scheduler-gpu.sock"
# The node label that opts a node in (with `--whole-gpus label`, the default): the same
# label keeps NVIDIA's plugin off the node through its DaemonSet's affinity.
WHOLE_GPUS_LABEL = "gang-scheduler.io/whole-gpus"
DEFAULT_HEALTH_INTERVAL = 10.0
DEFAULT_WATCH_INTERVAL = 1.0
REGISTER_TIMEOUT = 5.0
MERGE_PATCH = "application/merge-patch+json"
# Allocate: attempts when the pod changed under the patch (409) or the API failed
# transiently, and the pause between them.
ALLOCATE_ATTEMPTS = 3
ALLOCATE_RETRY_PAUSE = 0.2

JsonObject = dict[str, Any]


# --- the pods ----------------------------------------------------------------------------------
class PodApi(Protocol):
    """The two calls Allocate makes (RBAC: list and patch on pods)."""

    async def list_pods(self, node: str) -> list[JsonObject]: ...

    async def patch_pod(self, namespace: str, name: str, patch: JsonObject) -> JsonObject: ...


class KubePodApi:
    """PodApi over the scheduler's raw-JSON client: a LIST of the node's pods
    (field selector spec.nodeName, read from etcd, so a pod bound a moment ago is in
    it) and a JSON merge patch."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def list_pods(self, node: str) -> list[JsonObject]:
        listed = await self.client.list_json(
            "/api/v1/pods", query=[("fieldSelector", f"spec.nodeName={node}")]
        )
        return listed.items

    async def patch_pod(self, namespace: str, name: str, patch: JsonObject) -> JsonObject:
        return await self.client.request_json(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            body=patch,
            content_type=MERGE_PATCH,
        )


# --- configuration -----------------------------------------------------------------------------
@dataclass(frozen=True)
class DevicePluginConfig:
    node_name: str
    directory: Path = DEFAULT_DIRECTORY
    socket_name: str = SOCKET_NAME
    resource: str = SHARED_GPU
    unit: int = 1  # milli per share-device; 1000 / unit share-devices per GPU
    health_interval: float = DEFAULT_HEALTH_INTERVAL
    watch_interval: float = DEFAULT_WATCH_INTERVAL
    schedulers: tuple[str, ...] = DEFAULT_SCHEDULER_NAMES
    # How a container is handed its GPUs (isolation.py, docs/device-plugin.md).
    isolation: tuple[str, ...] = DEFAULT_MODES
    # Set the CUDA MPS client's limits for shares (an MPS daemon runs on the node).
    mps: bool = False
    # Serve whole GPUs (`nvidia.com/gpu`, one device per GPU named by its UUID) instead
    # of shares; made with whole_gpus(), never set by hand.
    whole: bool = False
    # Whether the agent serves whole GPUs beside the shares: "on", "off", or "label"
    # (when the node carries WHOLE_GPUS_LABEL=true at start-up).
    whole_gpus: str = "label"
    # The Secret (namespace/name) of the node agents' keys: an assignment is served only
    # with a node signature they verify (assignment_keys.py). Empty: not checked (the
    # admission policy alone guards the assignment; logged at start).
    key_secret: str = DEFAULT_KEY_SECRET

    def whole_gpus_config(self) -> DevicePluginConfig:
        """The configuration of the whole-GPU plugin that runs beside this one."""
        return replace(
            self,
            socket_name=WHOLE_SOCKET_NAME,
            resource=WHOLE_GPU,
            unit=MILLI_PER_GPU,
            whole=True,
        )

    def problems(self) -> list[str]:
        """Deployment mistakes, one line each."""
        found = mode_problems(self.isolation)
        key_problem = secret_problem(self.key_secret)
        if key_problem is not None:
            found.append(key_problem)
        if self.whole_gpus not in ("on", "off", "label"):
            found.append(f"--whole-gpus must be on, off or label, got {self.whole_gpus!r}")
        if not valid_unit(self.unit):
            found.append(f"--vgpu-unit must divide 1000 (1, 2, 4, 5, 8, 10, ...), got {self.unit}")
        if not self.health_interval > 0 or not self.watch_interval > 0:
            found.append("--health-interval and --socket-check-interval must be > 0")
        if not self.schedulers:
            found.append("at least one --trusted-scheduler is needed")
        return found


class NodeReader(Protocol):
    async def get_node(self, name: str) -> JsonObject: ...


async def serves_whole_gpus(nodes: NodeReader, node: str, mode: str) -> bool:
    """Whether the agent serves `nvidia.com/gpu` on this node: `--whole-gpus on`, or
    `label` and the node carries WHOLE_GPUS_LABEL=true when the agent starts (a label
    changed later is followed by WholeGpuSwitch: docs/device-plugin.md, the hand-over).
    A node that cannot be read is taken as not opted in, said once: serving
    nvidia.com/gpu beside NVIDIA's plugin would have two plugins for it."""
    if mode != "label":
        return mode == "on"
    for attempt in range(ALLOCATE_ATTEMPTS):
        if attempt:
            await asyncio.sleep(ALLOCATE_RETRY_PAUSE * attempt)
        try:
            obj = await nodes.get_node(node)
        except Exception as error:
            if not (isinstance(error, ApiError) or is_transient(error)):
                raise
            if isinstance(error, ApiError) and not is_transient(error):
                break
            continue
        opted = opted_in(obj)
        if opted:
            log.info("node %s has %s=true: serving %s too", node, WHOLE_GPUS_LABEL, WHOLE_GPU)
        return opted
    log.warning(
        "cannot read node %s to see whether it opted in to %s (%s): not serving whole GPUs",
        node,
        WHOLE_GPU,
        WHOLE_GPUS_LABEL,
    )
    return False


def opted_in(node: JsonObject) -> bool:
    """Whether the Node carries WHOLE_GPUS_LABEL=true."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return str(labels.get(WHOLE_GPUS_LABEL, "")).lower() == "true"


@dataclass
class WholeGpuSwitch:
    """`--whole-gpus label`: the whole-GPU plugin runs while the Node carries
    WHOLE_GPUS_LABEL=true, following the label at run time (docs/device-plugin.md, the
    hand-over). `follow` is given the Node at every publisher pass (it reads it anyway).

    Stopping the plugin is what the kubelet is built for: its socket goes and its
    ListAndWatch streams end, so the kubelet marks `nvidia.com/gpu` devices unhealthy
    (allocatable 0, the resource dropped after its grace period), running containers
    keep their devices, and a plugin that registers the resource later (NVIDIA's, back
    on the node) takes over with the same device IDs (GPU UUIDs)."""

    make: Callable[[], DevicePlugin]
    wanted: bool
    plugin: DevicePlugin | None = None
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)

    def follow(self, node: JsonObject) -> None:
        wanted = opted_in(node)
        if wanted != self.wanted:
            log.info(
                "node %s: %s %s: %s %s",
                (node.get("metadata") or {}).get("name"),
                WHOLE_GPUS_LABEL,
                "set" if wanted else "removed",
                "serving" if wanted else "no longer serving",
                WHOLE_GPU,
            )
            self.wanted = wanted
            self._changed.set()

    def stop(self) -> None:
        self.stopping.set()
        self._changed.set()

    def running(self) -> list[DevicePlugin]:
        return [self.plugin] if self.plugin is not None else []

    async def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self._changed.clear()
                if self.wanted and self.plugin is None:
                    self.plugin = self.make()
                    self._task = asyncio.create_task(self.plugin.run())
                elif not self.wanted and self.plugin is not None:
                    await self._end_plugin()
                await self._changed.wait()
        finally:
            await self._end_plugin()

    async def _end_plugin(self) -> None:
        plugin, task, self.plugin, self._task = self.plugin, self._task, None, None
        if plugin is None or task is None:
            return
        plugin.stop()
        await task
        with suppress(FileNotFoundError):
            plugin.socket_path.unlink()  # gone at once, whatever gRPC leaves behind


class Refusal(Exception):
    """An Allocate that cannot be served: the gRPC status and the message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _socket_identity(path: Path) -> tuple[int, int] | None:
    """What changes when the file is recreated: its inode and its ctime."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_ctime_ns)


# --- the plugin --------------------------------------------------------------------------------
@dataclass
class DevicePlugin:
    backend: NvmlBackend
    config: DevicePluginConfig
    pods: PodApi
    gpus: dict[int, GpuState] = field(default_factory=dict)
    devices: tuple[api.Device, ...] = ()
    registrations: int = 0  # successful Register calls, for the log and the tests
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # Faults from NVML events (health.py): a new one refreshes the list at once.
    health: HealthBook | None = None
    # The node agents' keys (assignment_keys.py); None: assignments are not verified.
    keys: KeySource | None = None
    _fault: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _server: grpc.aio.Server | None = field(default=None, init=False)
    _generation: int = field(default=0, init=False)  # bumped when a server goes away
    _version: int = field(default=0, init=False)  # bumped when the device list changes
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition, init=False)
    _allocate_lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    _registered_with: tuple[int, int] | None = field(default=None, init=False)
    _last_note: str = field(default="", init=False)
    _pending_notify: asyncio.Task[None] | None = field(default=None, init=False)
    # pod uid -> containers served since the plugin started: they stay allocated even if
    # the pod's gpu-allocated mark is removed (docs/security.md). Pruned to the pods
    # that still exist at every list.
    _served: dict[str, frozenset[str]] = field(default_factory=dict, init=False)

    @property
    def socket_path(self) -> Path:
        return self.config.directory / self.config.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.config.directory / api.KUBELET_SOCKET

    # --- the loop ---
    async def run(self) -> None:
        """Serve until stopped: health checks and the socket watch side by side."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._health_loop())
                group.create_task(self._watch_loop())
        finally:
            await self._stop_server()

    def stop(self) -> None:
        self.stopping.set()

    async def _pause(self, seconds: float) -> None:
        with suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def _health_loop(self) -> None:
        if self.health is not None:
            loop = asyncio.get_running_loop()
            self.health.subscribe(lambda: loop.call_soon_threadsafe(self._fault.set))
        while not self.stopping.is_set():
            await self.refresh()
            waits = [
                asyncio.ensure_future(self.stopping.wait()),
                asyncio.ensure_future(self._fault.wait()),
            ]
            try:
                await asyncio.wait(
                    waits,
                    timeout=self.config.health_interval,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                for waiter in waits:
                    waiter.cancel()
            self._fault.clear()

    async def _watch_loop(self) -> None:
        while not self.stopping.is_set():
            await self.check_sockets()
            await self._pause(self.config.watch_interval)

    # --- health ---
    async def refresh(self) -> None:
        """Ask NVML again; a changed device list goes to every ListAndWatch stream."""
        discovery = await asyncio.to_thread(discover, self.backend)
        if self.health is not None:
            discovery = discovery.with_faults(self.health.faults())
        self.apply_discovery(discovery)

    def apply_discovery(self, discovery: Discovery) -> None:
        if discovery.found:
            gpus = {
                report.index: GpuState(
                    report.index,
                    report.uuid,
                    report.healthy,
                    report.numa,
                    report.minor,
                    report.memory_mib,
                )
                for report in discovery.devices
            }
        else:
            # NVML gone (driver unloaded, library missing): GPUs seen before stay
            # listed, unhealthy, so that nothing new starts on them.
            gpus = {
                i: GpuState(g.index, g.uuid, False, g.numa, g.minor, g.memory_mib)
                for i, g in self.gpus.items()
            }
            self._note(f"{discovery.summary()}; no {self.config.resource} devices to advertise")
        devices = tuple(
            api.Device(device_id, api.HEALTHY if gpu.healthy else api.UNHEALTHY, gpu.numa)
            for gpu in sorted(gpus.values(), key=lambda g: g.index)
            if gpu.uuid
            for device_id in device_ids(gpu.uuid, self.config.unit, self.config.whole)
        )
        self.gpus = gpus
        if devices != self.devices:
            self.devices = devices
            self._version += 1
            unhealthy = [str(gpu.index) for gpu in gpus.values() if not gpu.healthy]
            log.info(
                "%s: %d devices on %d GPUs%s",
                self.config.resource,
                len(devices),
                len(gpus),
                f"; GPUs {', '.join(unhealthy)} unhealthy, their devices Unhealthy"
                if unhealthy
                else ", all healthy",
            )
            self._pending_notify = asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # --- sockets and registration ---
    async def check_sockets(self) -> None:
        """Start the server when there is none or its socket was deleted; register when
        kubelet.sock is new (the kubelet restarted) or never registered with."""
        if not self.devices:
            return  # nothing to advertise yet; refresh() says why
        if self._server is None or not self.socket_path.exists():
            if self._server is not None:
                log.warning("%s was deleted (kubelet restart?); serving again", self.socket_path)
            try:
                await self._start_server()
            except (OSError, RuntimeError) as error:  # grpc says RuntimeError for a bad port
                await self._stop_server()
                self._note(
                    f"cannot serve on {self.socket_path}: {error} (is the kubelet's "
                    "device-plugin directory mounted read-write?); trying again"
                )
                return
        kubelet = _socket_identity(self.kubelet_socket)
        if kubelet is None:
            self._note(f"waiting for the kubelet: {self.kubelet_socket} does not exist")
            return
        if kubelet != self._registered_with:
            await self._register(kubelet)

    async def _start_server(self) -> None:
        await self._stop_server()
        self.config.directory.mkdir(parents=True, exist_ok=True)
        with suppress(FileNotFoundError):
            self.socket_path.unlink()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((self._handlers(),))
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server
        self._registered_with = None  # a new socket must be announced again
        log.info("serving %s on %s", self.config.resource, self.socket_path)

    async def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._generation += 1
        await self._notify()  # the server's ListAndWatch streams end
        await server.stop(0.5)

    async def _register(self, kubelet: tuple[int, int]) -> None:
        request = api.RegisterRequest(
            version=api.VERSION,
            endpoint=self.config.socket_name,
            resource_name=self.config.resource,
            options=self.options(),
        )
        try:
            async with grpc.aio.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
                register = channel.unary_unary(
                    api.REGISTER_METHOD,
                    request_serializer=api.encode_register_request,
                    response_deserializer=api.decode_empty,
                )
                await register(request, timeout=REGISTER_TIMEOUT)
        except grpc.aio.AioRpcError as error:
            self._note(
                f"registering {self.config.resource} with the kubelet failed: "
                f"{error.code().name}: {error.details()}; trying again"
            )
            return
        self._registered_with = kubelet
        self.registrations += 1
        self._last_note = ""
        log.info(
            "registered %s with the kubelet (%s, endpoint %s)",
            self.config.resource,
            self.kubelet_socket,
            self.config.socket_name,
        )

    def _note(self, message: str) -> None:
        """A warning logged when it differs from the last one, not every second."""
        if message != self._last_note:
            self._last_note = message
            log.warning("%s", message)

    # --- the service ---
    def options(self) -> api.PluginOptions:
        return api.PluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def _handlers(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            api.DEVICE_PLUGIN_SERVICE,
            {
                "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(
                    self._get_options,
                    request_deserializer=api.decode_empty,
                    response_serializer=api.encode_options,
                ),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    self._list_and_watch,
                    request_deserializer=api.decode_empty,
                    response_serializer=api.encode_devices,
                ),
                "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(
                    self._get_preferred_allocation,
                    request_deserializer=api.decode_preferred_request,
                    response_serializer=api.encode_preferred_response,
                ),
                "Allocate": grpc.unary_unary_rpc_method_handler(
                    self._allocate,
                    request_deserializer=api.decode_allocate_request,
                    response_serializer=api.encode_allocate_response,
                ),
                "PreStartContainer": grpc.unary_unary_rpc_method_handler(
                    self._pre_start,
                    request_deserializer=api.decode_prestart_request,
                    response_serializer=api.encode_prestart_response,
                ),
            },
        )

    async def _get_options(self, _: None, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return self.options()

    async def _pre_start(self, _: list[str], context: grpc.aio.ServicerContext[Any, Any]) -> None:
        return None

    async def _list_and_watch(
        self, _: None, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[tuple[api.Device, ...]]:
        generation = self._generation
        seen = -1
        while True:
            async with self._changed:
                await self._changed.wait_for(partial(self._stream_wakes, seen, generation))
                if self._generation != generation or self.stopping.is_set():
                    return
                seen, devices = self._version, self.devices
            yield devices

    def _stream_wakes(self, seen: int, generation: int) -> bool:
        changed = self._version != seen or self._generation != generation
        return changed or self.stopping.is_set()

    async def _get_preferred_allocation(
        self,
        requests: list[api.ContainerPreferredRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> list[list[str]]:
        answers = []
        for request in requests:
            fallback = [*request.must_include]
            fallback += [i for i in request.available if i not in fallback]
            try:
                pods = await self.pods.list_pods(self.config.node_name)
            except Exception as error:  # a preference is optional: fall back, never fail
                if not (isinstance(error, ApiError) or is_transient(error)):
                    raise
                answers.append(fallback[: request.size])
                continue
            match = choose(
                pods,
                self.config.node_name,
                request.size,
                self.config.unit,
                self.config.schedulers,
                self._served,
                self.config.resource,
            )
            if isinstance(match, Match):
                answers.append(
                    preferred_ids(
                        match,
                        self.gpus,
                        request.available,
                        request.must_include,
                        request.size,
                        self.config.unit,
                        self.config.whole,
                    )
                )
            else:
                answers.append(fallback[: request.size])
        return answers

    async def _allocate(
        self, requests: list[list[str]], context: grpc.aio.ServicerContext[Any, Any]
    ) -> list[api.ContainerAllocation]:
        answers = []
        async with self._allocate_lock:  # one match-and-mark at a time
            for ids in requests:
                try:
                    answers.append(await self.allocate_container(ids))
                except Refusal as refusal:
                    log.warning(
                        "Allocate of %d %s devices refused: %s",
                        len(ids),
                        self.config.resource,
                        refusal,
                    )
                    await context.abort(refusal.code, refusal.message)
        return answers

    def _named(self, ids: Sequence[str]) -> frozenset[int]:
        """The GPUs the kubelet's IDs name (whole GPUs only: a share-device ID says
        nothing about which GPU the pod was assigned)."""
        if not self.config.whole:
            return frozenset()
        by_uuid = {gpu.uuid: gpu.index for gpu in self.gpus.values()}
        named = {by_uuid.get(gpu_of(device_id, True)) for device_id in ids}
        return frozenset(index for index in named if index is not None)

    async def _keys(self) -> SigningKeys | None:
        """The keys to verify with (None: no check configured). Refusal when a check
        is configured and no key can be had: nothing is served unverified."""
        if self.keys is None:
            return None
        try:
            ring = await self.keys.current()
        except Exception as error:
            if not (isinstance(error, ApiError) or is_transient(error)):
                raise
            raise Refusal(
                grpc.StatusCode.UNAVAILABLE,
                f"cannot read the assignment keys {self.config.key_secret}: {error} (the "
                "agent needs get on that Secret)",
            ) from None
        if ring is None:
            raise Refusal(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"no assignment key in Secret {self.config.key_secret}: the scheduler "
                "writes it when it starts; no GPU is served without it",
            )
        return ring

    def _forget_gone(self, pods: Sequence[JsonObject]) -> None:
        present = {str((pod.get("metadata") or {}).get("uid") or "") for pod in pods}
        for uid in [uid for uid in self._served if uid not in present]:
            del self._served[uid]

    async def allocate_container(self, ids: Sequence[str]) -> api.ContainerAllocation:
        """One container's Allocate: match, answer, mark (with retries on 409 and on
        transient API errors). Refusal when it cannot be served."""
        if not ids:
            raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, "Allocate named no device")
        known = {device.id for device in self.devices}
        unknown = [device_id for device_id in ids if device_id not in known]
        if unknown:
            raise Refusal(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown devices {', '.join(unknown[:3])}: not advertised by this plugin",
            )
        last_error = ""
        for attempt in range(ALLOCATE_ATTEMPTS):
            if attempt:
                await asyncio.sleep(ALLOCATE_RETRY_PAUSE * attempt)
            try:
                pods = await self.pods.list_pods(self.config.node_name)
            except Exception as error:
                if not (isinstance(error, ApiError) or is_transient(error)):
                    raise
                last_error = f"cannot list the pods of node {self.config.node_name}: {error}"
                continue
            self._forget_gone(pods)
            ring = await self._keys()
            match = choose(
                pods,
                self.config.node_name,
                len(ids),
                self.config.unit,
                self.config.schedulers,
                self._served,
                self.config.resource,
                self._named(ids),
                ring,
            )
            if isinstance(match, NoMatch):
                raise Refusal(grpc.StatusCode.FAILED_PRECONDITION, match.message)
            try:
                env = container_env(match, self.gpus)
                answer = container_answer(
                    env,
                    [self.gpus[index] for index, _ in match.container.shares],
                    self.config.isolation,
                    milli=match.container.shares[0][1],
                    mps=self.config.mps,
                )
            except ValueError as error:
                raise Refusal(grpc.StatusCode.FAILED_PRECONDITION, str(error)) from None
            try:
                await self.pods.patch_pod(
                    match.pod.namespace, match.pod.name, allocated_patch(match)
                )
            except Exception as error:
                if not (isinstance(error, ApiError) or is_transient(error)):
                    raise
                if isinstance(error, ApiError) and error.status == 404:
                    last_error = f"{match.pod.key} was deleted meanwhile"
                    continue
                if isinstance(error, ApiError) and not (error.status == 409 or is_transient(error)):
                    raise Refusal(
                        grpc.StatusCode.UNAVAILABLE,
                        f"cannot mark {match.pod.key} allocated: {error} (the agent needs "
                        "patch on pods)",
                    ) from None
                last_error = f"marking {match.pod.key} allocated failed: {error}"
                continue
            uid = match.pod.uid
            self._served[uid] = self._served.get(uid, frozenset()) | {match.container.name}
            if self.config.whole and self._named(ids) != match.container.indices():
                # The kubelet did not take the preference (its topology manager kept it
                # to another NUMA node, or it thinks the GPUs are held): the container
                # still gets the assigned GPUs; only the kubelet's record differs.
                log.warning(
                    "the kubelet allocated %s to %s/%s; answering its assigned GPUs %s "
                    "(the kubelet's record and pod-resources name the former)",
                    ",".join(ids),
                    match.pod.key,
                    match.container.name,
                    env[DEVICES_ENV],
                )
            log.info(
                "allocated %s to %s/%s (%s)",
                env[DEVICES_ENV],
                match.pod.key,
                match.container.name,
                env[VISIBLE_DEVICES_ENV],
            )
            return answer
        raise Refusal(
            grpc.StatusCode.UNAVAILABLE, f"{last_error} (after {ALLOCATE_ATTEMPTS} tries)"
        )
