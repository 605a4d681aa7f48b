"""The node agent's loop: discover the GPUs, read the Node, patch it when something
changed, sleep, again.

What is written (docs/node-agent.md): a JSON merge patch of
`metadata.annotations["gang-scheduler.io/gpu-topology"]` (docs/conventions.md) and of
the GFD-style labels the node lacks, when GPU feature discovery is not running there
(its `nvidia.com/gfd.timestamp` label is absent). "Changed" compares the inventory
the scheduler would read (cache.gpu.parse_topology of both values), not the raw text,
so a reformatted but equal annotation is left alone.

It never crash-loops over the GPUs: no NVML or no GPU is one log line, the node left
as it is, and the next check an interval later. API errors that may pass (429, 5xx,
connection failures) are retried with backoff (tenacity); the others are logged, and
the loop goes on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeVar, cast

import aiohttp
from aiohttp import web
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from cache.gpu import TOPOLOGY_ANNOTATION, GpuInventory, parse_topology
from scheduler.agent.allocation import DEFAULT_SCHEDULER_NAMES
from scheduler.agent.assignment_keys import SecretKeySource
from scheduler.agent.discovery import Discovery, discover
from scheduler.agent.dra_publisher import KubeSliceApi, SlicePublisher, printable_slices
from scheduler.agent.health import EventWatcher, HealthBook
from scheduler.agent.metrics import GpuCollector, agent_registry
from scheduler.agent.nvml import NvmlBackend, PynvmlBackend
from scheduler.agent.server import (
    AgentStatus,
    Attribution,
    KubeletView,
    bound_port,
    make_app,
    start_server,
)
from scheduler.kube.client import ApiError, KubeClient, create_client

if TYPE_CHECKING:
    from scheduler.agent.deviceplugin import DevicePluginConfig
    from scheduler.agent.podresources import KubeletDeviceReporter

log = logging.getLogger("gang_scheduler.node_agent")

DEFAULT_INTERVAL = 60.0
NODE_NAME_ENV = "NODE_NAME"
MERGE_PATCH = "application/merge-patch+json"
# Set by NVIDIA GPU feature discovery on every node it labels; while it is there, GFD
# owns the nvidia.com/gpu.* labels and the agent leaves them alone.
GFD_TIMESTAMP_LABEL = "nvidia.com/gfd.timestamp"
# Statuses worth another try: throttled, timed out, or the server (or a proxy) failing.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

JsonObject = dict[str, Any]
_T = TypeVar("_T")


# --- what to write ---------------------------------------------------------------------------
def _metadata(node: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    meta = node.get("metadata")
    value = meta.get(key) if isinstance(meta, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _same_inventory(current: object, wanted: GpuInventory) -> bool:
    if not isinstance(current, str):
        return False
    try:
        return parse_topology(current) == wanted
    except ValueError:
        return False  # malformed: ours replaces it


def node_patch(node: Mapping[str, Any], discovery: Discovery) -> JsonObject:
    """The JSON merge patch that brings `node` (its API JSON) up to date with
    `discovery`; {} when nothing needs writing. Nothing is ever removed: with no GPU
    or no NVML the node is left as it is."""
    annotation = discovery.annotation()
    inventory = discovery.inventory()
    if annotation is None or inventory is None:
        return {}
    metadata: JsonObject = {}
    current = _metadata(node, "annotations").get(TOPOLOGY_ANNOTATION)
    if not _same_inventory(current, inventory):
        metadata["annotations"] = {TOPOLOGY_ANNOTATION: annotation}
    labels = _metadata(node, "labels")
    if GFD_TIMESTAMP_LABEL not in labels:
        missing = {k: v for k, v in discovery.gfd_labels().items() if k not in labels}
        if missing:
            metadata["labels"] = missing
    return {"metadata": metadata} if metadata else {}


# --- the API -----------------------------------------------------------------------------------
class NodeApi(Protocol):
    """The two calls the agent makes (RBAC: get and patch on nodes)."""

    async def get_node(self, name: str) -> JsonObject: ...

    async def patch_node(self, name: str, patch: JsonObject) -> JsonObject: ...


class KubeNodeApi:
    """NodeApi over the scheduler's raw-JSON client (kubernetes_asyncio underneath)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def get_node(self, name: str) -> JsonObject:
        return await self.client.request_json("GET", f"/api/v1/nodes/{name}")

    async def patch_node(self, name: str, patch: JsonObject) -> JsonObject:
        return await self.client.request_json(
            "PATCH", f"/api/v1/nodes/{name}", body=patch, content_type=MERGE_PATCH
        )


def is_transient(error: BaseException) -> bool:
    """Whether an API call that failed this way may succeed when tried again."""
    if isinstance(error, ApiError):
        return error.status in TRANSIENT_STATUSES
    return isinstance(error, aiohttp.ClientError | TimeoutError | ConnectionError)


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for transient API errors: exponential with jitter, `attempts` in all."""

    attempts: int = 5
    first_wait: float = 0.5
    max_wait: float = 10.0


def _describe_api_error(error: BaseException) -> str:
    if isinstance(error, ApiError) and error.status == 403:
        return (
            f"{error}: the agent's ServiceAccount needs get and patch on nodes (docs/node-agent.md)"
        )
    if isinstance(error, ApiError) and error.status == 404:
        return f"{error}: no such node (is --node-name / {NODE_NAME_ENV} right?)"
    return f"{type(error).__name__}: {error}" if not isinstance(error, ApiError) else str(error)


# --- the loop ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgentOptions:
    node_name: str | None = None
    kubeconfig: str | None = None
    interval: float = DEFAULT_INTERVAL
    once: bool = False
    dry_run: bool = False
    # /metrics, /healthz, /readyz (server.py); None: not served.
    metrics_port: int | None = None
    metrics_address: str = "0.0.0.0"
    attribution_interval: float = 30.0
    # The kubelet's pod-resources API (podresources.py): what it really allocated,
    # reported on the Node every so many seconds; 0: not read.
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    pod_resources_interval: float = 10.0
    # DRA mode (docs/node-agent.md, "DRA mode"): the node's ResourceSlices published at
    # each pass; the PCIe roots read under this sysfs.
    dra: bool = False
    sysfs: str = "/sys"
    # Print the ResourceSlices the DRA mode would publish, from one discovery, and exit:
    # no API server needed (scripts/gpu-check/run.sh).
    print_resource_slices: bool = False
    # Delete this node's ResourceSlices of the driver and exit (opting out of DRA mode).
    dra_withdraw: bool = False
    # The kubelet's DRA plugin (dra_plugin.py): where it registers, serves, and writes
    # the claims' CDI specs.
    kubelet_registry_dir: str = "/var/lib/kubelet/plugins_registry"
    kubelet_plugins_dir: str = "/var/lib/kubelet/plugins"
    cdi_dir: str = "/var/run/cdi"


@dataclass
class NodeAgent:
    """Discovery and publishing, one pass at a time. `api` None: no node to compare
    with (a dry run without a node name), every pass shows the full patch."""

    backend: NvmlBackend
    options: AgentOptions
    api: NodeApi | None
    out: TextIO = field(default_factory=lambda: sys.stdout)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # Faults from NVML events (health.py): a new one starts a pass at once.
    health: HealthBook | None = None
    # The probes' view (server.py); told when each pass ends.
    status: AgentStatus | None = None
    last_discovery: Discovery | None = None
    _last_state: tuple[str, ...] = field(default=(), init=False)
    _fault: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    metrics_port: int | None = None  # the port /metrics is served on, once bound
    # Given the Node read at each pass (the whole-GPU switch follows its label).
    node_seen: Callable[[JsonObject], None] | None = None
    # DRA mode: the node's ResourceSlices, written after the Node at each pass.
    slices: SlicePublisher | None = None

    async def run(self) -> int:
        """Pass after pass until stopped (or one pass with `once`); with `once`, 0 when
        the pass did what it had to (nothing to do included), 1 when the API failed."""
        if self.health is not None:
            loop = asyncio.get_running_loop()
            self.health.subscribe(lambda: loop.call_soon_threadsafe(self._fault.set))
        while True:
            ok = await self.run_pass()
            if self.status is not None:
                self.status.pass_done()
            if self.options.once:
                return 0 if ok else 1
            await self._wait_next()
            if self.stopping.is_set():
                return 0

    async def _wait_next(self) -> None:
        """Until the interval is over, a GPU fault arrives, or the agent stops."""
        waits = [
            asyncio.ensure_future(self.stopping.wait()),
            asyncio.ensure_future(self._fault.wait()),
        ]
        try:
            await asyncio.wait(
                waits, timeout=self.options.interval, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in waits:
                waiter.cancel()
        self._fault.clear()

    def stop(self) -> None:
        self.stopping.set()

    def wake(self) -> None:
        """Run the next pass now (on the agent's loop): the DRA plugin was registered
        again, after a kubelet that starts deletes its node's ResourceSlices."""
        self._fault.set()

    async def run_pass(self) -> bool:
        discovery = await asyncio.to_thread(discover, self.backend)
        if self.health is not None:
            discovery = discovery.with_faults(self.health.faults())
        self.last_discovery = discovery
        self._log_state(discovery)
        if not discovery.found:
            if self.options.dry_run:
                self._print_patch({})
            return True
        try:
            node = await self._call(self._read_node)
            if self.node_seen is not None and node:
                self.node_seen(node)
            patch = node_patch(node, discovery)
            if self.options.dry_run:
                self._print_patch(patch)
            elif patch:
                await self._call(partial(self._write, patch))
                log.info("node %s patched: %s", self.options.node_name, _patch_summary(patch))
            else:
                log.debug("node %s is up to date", self.options.node_name)
        except Exception as error:  # every API failure is one log line, no crash
            if not (isinstance(error, ApiError) or is_transient(error)):
                raise
            log.warning(
                "node %s: %s; trying again in %gs",
                self.options.node_name,
                _describe_api_error(error),
                self.options.interval,
            )
            return False
        if self.slices is not None and not self.options.dry_run:
            return await self._publish_slices(discovery)
        return True

    async def _publish_slices(self, discovery: Discovery) -> bool:
        """DRA mode: the node's ResourceSlices, after the Node; a failure is one line."""
        assert self.slices is not None
        try:
            await self._call(partial(self.slices.publish, discovery))
        except Exception as error:
            if not (isinstance(error, ApiError) or is_transient(error)):
                raise
            hint = (
                " (DRA mode needs the rights of deploy/components/dra-driver)"
                if isinstance(error, ApiError) and error.status == 403
                else ""
            )
            log.warning(
                "ResourceSlices of node %s: %s%s; trying again in %gs",
                self.options.node_name,
                error if isinstance(error, ApiError) else f"{type(error).__name__}: {error}",
                hint,
                self.options.interval,
            )
            return False
        return True

    async def _read_node(self) -> JsonObject:
        if self.api is None or not self.options.node_name:
            return {}
        return await self.api.get_node(self.options.node_name)

    async def _write(self, patch: JsonObject) -> JsonObject:
        assert self.api is not None and self.options.node_name
        return await self.api.patch_node(self.options.node_name, patch)

    async def _call(self, call: Callable[[], Awaitable[_T]]) -> _T:
        def before_sleep(state: RetryCallState) -> None:
            outcome = state.outcome
            error = outcome.exception() if outcome is not None else None
            log.info(
                "API call failed (%s), attempt %d of %d; retrying",
                _describe_api_error(error) if error else "unknown error",
                state.attempt_number,
                self.retry.attempts,
            )

        async def attempt() -> _T:
            # tenacity awaits only what it recognises as a coroutine function.
            return await call()

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retry.attempts),
            # Exponential, capped, plus jitter so that a DaemonSet's agents restarted
            # together do not retry in step.
            wait=wait_exponential(multiplier=self.retry.first_wait, max=self.retry.max_wait)
            + wait_random(0, self.retry.first_wait),
            retry=retry_if_exception(is_transient),
            before_sleep=before_sleep,
            reraise=True,
        )
        return cast(_T, await retrying(attempt))

    def _log_state(self, discovery: Discovery) -> None:
        """What was found, logged when it differs from the pass before: one line for no
        GPU / no NVML, not one a minute."""
        state = (discovery.summary(), *discovery.problems(), *discovery.warnings)
        if state == self._last_state:
            return
        self._last_state = state
        if not discovery.found:
            log.warning(
                "%s; nothing to publish, the node is left as it is; checking again every %gs",
                discovery.summary(),
                self.options.interval,
            )
            return
        log.info("found %s", discovery.summary())
        for line in (*discovery.problems(), *discovery.warnings):
            log.warning("%s", line)

    def _print_patch(self, patch: JsonObject) -> None:
        print(json.dumps(patch, indent=2, sort_keys=True), file=self.out, flush=True)


def _patch_summary(patch: JsonObject) -> str:
    metadata = patch.get("metadata", {})
    parts = [f"annotation {key}" for key in metadata.get("annotations", {})]
    parts += [f"label {key}={value}" for key, value in metadata.get("labels", {}).items()]
    return ", ".join(parts)


# --- the command -------------------------------------------------------------------------------
def _configure_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=logging.INFO,
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )


async def serve(
    options: AgentOptions,
    backend: NvmlBackend | None = None,
    device_plugin: DevicePluginConfig | None = None,
) -> int:
    """`gang-scheduler node-agent`: returns the exit code. With `device_plugin`, the
    vGPU device plugin (docs/device-plugin.md) runs beside the publisher, except in a
    single pass or a dry run; its node name, when empty, is the agent's."""
    node_name = options.node_name or os.environ.get(NODE_NAME_ENV) or None
    options = dataclass_replace(options, node_name=node_name)
    if options.print_resource_slices:
        return await print_resource_slices(options, backend)
    if not options.interval > 0:
        print(f"node-agent: --interval must be > 0, got {options.interval}", file=sys.stderr)
        return 2
    if node_name is None and not options.dry_run:
        print(
            f"node-agent: no node name: give --node-name or set {NODE_NAME_ENV} "
            "(the DaemonSet sets it from spec.nodeName)",
            file=sys.stderr,
        )
        return 2
    if device_plugin is not None and (options.once or options.dry_run):
        device_plugin = None  # a single pass or a dry run serves no kubelet
    if options.dra and device_plugin is not None:
        # The device plugin hands out the node's GPUs by the scheduler's annotations, the
        # DRA driver by claims: both at once would give one GPU to two pods.
        print(
            "node-agent: --dra serves the node's GPUs through DRA claims; the device plugin "
            "would hand out the same GPUs again: add --no-device-plugin (docs/node-agent.md, "
            "'DRA mode')",
            file=sys.stderr,
        )
        return 2
    if device_plugin is not None:
        problems = device_plugin.problems()
        if problems:
            for problem in problems:
                print(f"node-agent: {problem}", file=sys.stderr)
            return 2
    client: KubeClient | None = None
    if node_name is not None:
        try:
            client = await create_client(options.kubeconfig)
        except Exception as error:  # kubernetes_asyncio raises several kinds
            print(f"node-agent: cannot load the Kubernetes configuration: {error}", file=sys.stderr)
            return 2
    else:
        log.info("no node name: showing the patch for a node without annotation or labels")
    if options.dra_withdraw and client is not None and node_name is not None:
        return await withdraw_slices(client, node_name)
    nvml = backend if backend is not None else PynvmlBackend()
    # One pass or a dry run reads the GPUs once: no events to wait for.
    book = None if options.once or options.dry_run else HealthBook()
    agent = NodeAgent(
        nvml, options, KubeNodeApi(client) if client is not None else None, health=book
    )
    if options.dra and client is not None and node_name is not None:
        agent.slices = SlicePublisher(KubeSliceApi(client), node_name, Path(options.sysfs))
    watcher = EventWatcher(nvml, book) if book is not None else None
    if watcher is not None:
        watcher.start()
    plugin_tasks: list[asyncio.Task[None]] = []
    stoppers = [agent.stop]
    plugins: list[Any] = []
    switched: list[Any] = []  # WholeGpuSwitch: the whole-GPU plugin while the label says so
    if device_plugin is not None and client is not None and node_name is not None:
        # Imported here: gRPC is needed by the device plugin only.
        from dataclasses import replace

        from scheduler.agent.deviceplugin import (
            DevicePlugin,
            KubePodApi,
            WholeGpuSwitch,
            serves_whole_gpus,
        )

        config = replace(device_plugin, node_name=device_plugin.node_name or node_name)
        configs = [config]
        keys = SecretKeySource(client, config.key_secret) if config.key_secret else None
        if keys is None:
            log.warning(
                "--assignment-key-secret is empty: GPU assignments are served without "
                "checking the scheduler's signature; only the admission policy guards them "
                "(docs/security.md)"
            )
        opted = await serves_whole_gpus(KubeNodeApi(client), node_name, config.whole_gpus)
        if config.whole_gpus == "label":
            # The whole-GPU plugin follows the node's label at every pass.
            whole = config.whole_gpus_config()
            switch = WholeGpuSwitch(
                partial(DevicePlugin, nvml, whole, KubePodApi(client), health=book, keys=keys),
                opted,
            )
            agent.node_seen = switch.follow
            switched.append(switch)
            plugin_tasks.append(asyncio.create_task(switch.run()))
            stoppers.append(switch.stop)
        elif opted:
            configs.append(config.whole_gpus_config())
        for each in configs:
            plugin = DevicePlugin(nvml, each, KubePodApi(client), health=book, keys=keys)
            plugins.append(plugin)
            plugin_tasks.append(asyncio.create_task(plugin.run()))
            stoppers.append(plugin.stop)
    dra_plugins: list[Any] = []
    serves_kubelet = not (options.once or options.dry_run)
    if options.dra and serves_kubelet and client is not None and node_name is not None:
        from scheduler.agent.dra_plugin import DraPlugin, DraPluginConfig, KubeClaimApi

        dra_config = DraPluginConfig(
            node_name,
            registry_dir=Path(options.kubelet_registry_dir),
            plugins_dir=Path(options.kubelet_plugins_dir),
            cdi_dir=Path(options.cdi_dir),
        )
        dra_plugin = DraPlugin(
            dra_config,
            KubeClaimApi(client),
            lambda: agent.last_discovery,
            on_registered=agent.wake,
        )
        dra_plugins.append(dra_plugin)
        plugin_tasks.append(asyncio.create_task(dra_plugin.run()))
        stoppers.append(dra_plugin.stop)
    reporter: KubeletDeviceReporter | None = None

    def kubelet_view() -> KubeletView:
        """What the kubelet says each container holds, for the metrics (nothing without
        the pod-resources report)."""
        return reporter.containers if reporter is not None else {}

    if (
        client is not None
        and node_name is not None
        and options.pod_resources_interval > 0
        and not (options.once or options.dry_run)
    ):
        from scheduler.agent.podresources import start_reporter

        reporter, reporter_task = start_reporter(options, node_name, client, agent)
        plugin_tasks.append(reporter_task)
        stoppers.append(reporter.stop)
    http: web.AppRunner | None = None
    attribution_task: asyncio.Task[None] | None = None
    if options.metrics_port is not None and not (options.once or options.dry_run):
        registry = agent_registry()
        status = AgentStatus(
            options.interval,
            plugin_ready=lambda: (
                all(
                    not p.devices or p.registrations > 0
                    for p in [*plugins, *(p for s in switched for p in s.running())]
                )
                and all(p.registrations > 0 for p in dra_plugins)
            ),
        )
        agent.status = status
        attribution: Attribution | None = None
        if client is not None and node_name is not None and options.attribution_interval > 0:
            attribution = Attribution(
                client,
                node_name,
                device_plugin.unit if device_plugin is not None else 1,
                device_plugin.schedulers if device_plugin is not None else DEFAULT_SCHEDULER_NAMES,
                options.attribution_interval,
                kubelet=kubelet_view,
            )
            attribution_task = asyncio.create_task(attribution.run())
            stoppers.append(attribution.stop)

        def published() -> dict[str, bool]:
            found = agent.last_discovery
            return {r.uuid: r.healthy for r in found.devices} if found is not None else {}

        registry.register(
            GpuCollector(
                nvml,
                node_name or "",
                holders=attribution.holders if attribution is not None else lambda: (),
                book=book,
                healthy=published,
            )
        )
        try:
            http = await start_server(
                make_app(registry, status), options.metrics_address, options.metrics_port
            )
        except OSError as error:
            print(f"node-agent: cannot serve metrics: {error}", file=sys.stderr)
            for stopper in stoppers:
                stopper()
            for task in (*plugin_tasks, attribution_task):
                if task is not None:
                    with suppress(Exception):  # ending: their own failures are logged
                        await task
            if watcher is not None:
                await asyncio.to_thread(watcher.stop)
            if client is not None:
                await client.close()
            return 2
        agent.metrics_port = bound_port(http)
        log.info("serving /metrics, /healthz, /readyz on port %d", agent.metrics_port)

    def stop() -> None:
        for stopper in stoppers:
            stopper()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop)
    try:
        code = await agent.run()
        stop()
        for plugin_task in plugin_tasks:
            await plugin_task
        return code
    finally:
        stop()
        for plugin_task in plugin_tasks:
            if not plugin_task.done():
                plugin_task.cancel()
                with suppress(asyncio.CancelledError):
                    await plugin_task
        for signum in (signal.SIGTERM, signal.SIGINT):
            with suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signum)
        for task in (*plugin_tasks, attribution_task):
            if task is not None and not task.done():
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
        if http is not None:
            await http.cleanup()
        if watcher is not None:
            # Within one event wait (a second); off the loop, which must not block.
            await asyncio.to_thread(watcher.stop)
        if client is not None:
            await client.close()


async def print_resource_slices(
    options: AgentOptions, backend: NvmlBackend | None = None, out: TextIO | None = None
) -> int:
    """`node-agent --print-resourceslices`: one discovery, the slices printed as a List
    (for the node `--node-name`, else this host's name); 0 when there were GPUs to
    describe, 1 when not (the reason on stderr)."""
    node = options.node_name or socket.gethostname().lower()
    discovery = await asyncio.to_thread(discover, backend or PynvmlBackend())
    if not discovery.found:
        print(f"node-agent: {discovery.summary()}", file=sys.stderr)
    for line in (*discovery.problems(), *discovery.warnings):
        print(f"node-agent: {line}", file=sys.stderr)
    listed = printable_slices(discovery, node, Path(options.sysfs))
    print(json.dumps(listed, indent=2, sort_keys=True), file=out or sys.stdout, flush=True)
    return 0 if discovery.found else 1


async def withdraw_slices(client: KubeClient, node: str) -> int:
    """`node-agent --dra-withdraw`: the node's slices of the driver deleted; 0 when
    done, 1 when the API refused or failed."""
    try:
        await SlicePublisher(KubeSliceApi(client), node).withdraw()
    except Exception as error:
        if not (isinstance(error, ApiError) or is_transient(error)):
            raise
        print(f"node-agent: cannot withdraw the ResourceSlices: {error}", file=sys.stderr)
        return 1
    finally:
        await client.close()
    return 0


def run_node_agent(
    options: AgentOptions,
    backend: NvmlBackend | None = None,
    device_plugin: DevicePluginConfig | None = None,
) -> int:
    """The CLI's entry point: logging to stderr, then `serve` on a fresh event loop."""
    _configure_logging()
    return asyncio.run(serve(options, backend, device_plugin))
