"""The node agent's HTTP endpoints: `/metrics` (metrics.py), `/healthz` and `/readyz`
(docs/node-agent.md, "Metrics and probes"), and the loop that keeps the GPU
attribution current.

- `/healthz` (liveness): 200 while the publisher's loop goes round: its last pass ended
  less than `3 * interval + 60` seconds ago (a pass is bounded: NVML queries and API
  calls with a capped retry), 500 otherwise, so that a wedged agent is restarted.
- `/readyz` (readiness): 200 once the first pass is done and, when the device plugin
  runs and has GPUs to advertise, once it is registered with the kubelet.
- `/metrics`: the Prometheus text of the agent's registry, produced on a worker thread
  (NVML calls block) so that the event loop keeps serving the device plugin.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler.agent.metrics import Holding, holdings
from scheduler.kube.client import ApiError, KubeClient

log = logging.getLogger("gang_scheduler.node_agent.server")

LIVENESS_SLACK = 60.0


@dataclass
class AgentStatus:
    """What the probes read; updated by the publisher and the device plugin."""

    interval: float
    clock: Callable[[], float] = time.monotonic
    last_pass_end: float | None = None
    plugin_ready: Callable[[], bool] = lambda: True

    def pass_done(self) -> None:
        self.last_pass_end = self.clock()

    def alive(self) -> tuple[bool, str]:
        if self.last_pass_end is None:
            return True, "starting"  # the first pass may wait on the API; not wedged yet
        age = self.clock() - self.last_pass_end
        limit = 3 * self.interval + LIVENESS_SLACK
        if age > limit:
            return False, f"no pass for {age:.0f}s (limit {limit:.0f}s)"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if self.last_pass_end is None:
            return False, "the first discovery pass is not done"
        if not self.plugin_ready():
            return False, "the device plugin is not registered with the kubelet yet"
        return True, "ok"


def make_app(registry: CollectorRegistry, status: AgentStatus) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, registry)
        response = web.Response(body=body)
        response.content_type = CONTENT_TYPE_LATEST.split(";")[0]
        return response

    def probe(check: Callable[[], tuple[bool, str]]) -> Any:
        async def handler(request: web.Request) -> web.Response:
            ok, why = check()
            return web.Response(status=200 if ok else 500, text=why + "\n")

        return handler

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", probe(status.alive))
    app.router.add_get("/readyz", probe(status.ready))
    return app


async def start_server(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    for site in runner.sites:
        server = getattr(site, "_server", None)
        for sock in getattr(server, "sockets", None) or ():
            return int(sock.getsockname()[1])
    raise RuntimeError("the metrics server is not listening")


# What the kubelet says each container holds: (namespace, pod) -> container -> GPUs.
KubeletView = Mapping[tuple[str, str], Mapping[str, Sequence[int]]]


@dataclass
class Attribution:
    """Who holds which GPU (metrics.holdings), from a LIST of the node's pods every
    `interval` seconds (served from the API server's watch cache: resourceVersion=0)
    and the latest answer of the kubelet's pod-resources API (`kubelet`: the reporter's,
    podresources.py, every --pod-resources-interval), so that a 1 s scrape costs the
    API server and the kubelet nothing."""

    client: KubeClient
    node: str
    unit: int
    schedulers: tuple[str, ...]
    interval: float
    current: Sequence[Holding] = ()
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    kubelet: Callable[[], KubeletView] = lambda: {}
    _last_error: str = field(default="", init=False)
    _pods: list[dict[str, Any]] = field(default_factory=list, init=False)
    _kubelet_seen: KubeletView | None = field(default=None, init=False)

    def holders(self) -> Sequence[Holding]:
        """The latest attribution; recomputed (no I/O) when the kubelet's report is a
        new one, so that it follows the report without waiting for the next LIST."""
        view = self.kubelet()
        if view is not self._kubelet_seen:
            self._kubelet_seen = view
            self.current = holdings(self._pods, self.node, self.unit, self.schedulers, view)
        return self.current

    async def refresh(self) -> None:
        try:
            listed = await self.client.list_json(
                "/api/v1/pods",
                query=[("fieldSelector", f"spec.nodeName={self.node}"), ("resourceVersion", "0")],
            )
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as error:
            message = f"GPU attribution not refreshed: {error}"
            if message != self._last_error:
                self._last_error = message
                log.warning("%s (the metrics keep the previous attribution)", message)
            return
        self._last_error = ""
        self._pods = listed.items
        view = self._kubelet_seen = self.kubelet()
        self.current = holdings(listed.items, self.node, self.unit, self.schedulers, view)

    async def run(self) -> None:
        while not self.stopping.is_set():
            await self.refresh()
            with suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.interval)

    def stop(self) -> None:
        self.stopping.set()
