"""The HTTP server, over real HTTP on 127.0.0.1: metrics, health, readiness, gangs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from cache.cluster import EventType
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.process.http import bound_port, gang_report, make_app, make_debug_app, serve
from scheduler.process.metrics import METRIC_LABELS, SchedulerMetrics
from scheduler.process.startup import StartupError
from tests.factories import node_obj, pod_obj

NOW = 1_790_000_000.0  # 2026-09-21T14:13:20Z, after every pod's creation
pytestmark = pytest.mark.asyncio


def cluster() -> SchedulingCore:
    """One 8-GPU node. Gang "waits" has 3 of its 4 members; "huge" and "nosize" ask for
    16 GPUs per member (no node has them); "fits" is placed and in flight."""
    core = SchedulingCore(build_profile())
    core.apply_node(EventType.ADDED, node_obj("a100-1", gpus=8, model="A100"), NOW)
    pods = [pod_obj(f"waits-{i}", gang="waits", min_member=4, gpus=1) for i in range(3)]
    pods += [pod_obj(f"huge-{i}", gang="huge", min_member=2, gpus=16) for i in range(2)]
    pods += [pod_obj(f"nosize-{i}", gang="nosize", gpus=16) for i in range(2)]
    pods += [
        pod_obj(f"fits-{i}", namespace="team-b", gang="fits", min_member=2, gpus=1)
        for i in range(2)
    ]
    return settled(core, pods)


def settled(core: SchedulingCore, pods: list[dict[str, Any]]) -> SchedulingCore:
    """`core` once it has seen `pods` at NOW and scheduled all it could."""
    for pod in pods:
        core.apply_pod(EventType.ADDED, pod, NOW)
    while core.schedule_next(NOW) is not None:
        pass
    core.refresh(NOW)
    return core


@dataclass
class FakeStatus:
    """What the Kubernetes adapter will provide, with switches for the tests."""

    core: SchedulingCore = field(default_factory=cluster)
    metrics: SchedulerMetrics = field(default_factory=SchedulerMetrics)
    alive: bool = True
    ready: tuple[bool, str] = (False, "waiting for caches to sync: pods, nodes")
    clock: float = NOW + 0.25
    replica: str = "leader"

    def is_alive(self) -> bool:
        return self.alive

    def role(self) -> str:
        return self.replica

    def is_ready(self) -> tuple[bool, str]:
        return self.ready

    def now(self) -> float:
        return self.clock


@dataclass
class Server:
    status: FakeStatus
    url: str  # the public listener: metrics and probes
    session: aiohttp.ClientSession
    debug_url: str = ""  # the loopback listener: /debug/gangs

    async def get(self, path: str, **headers: str) -> tuple[int, str, str]:
        async with self.session.get(self.url + path, headers=headers) as response:
            return response.status, response.headers["Content-Type"], await response.text()

    async def json(self, path: str) -> Any:
        async with self.session.get(self.debug_url + path) as response:
            assert response.status == 200
            assert response.content_type == "application/json"
            return await response.json()


class Listeners(NamedTuple):
    public: str  # the public listener's URL: metrics and probes
    debug: str  # the loopback listener's URL: /debug/...
    session: aiohttp.ClientSession


@asynccontextmanager
async def listening(status: FakeStatus) -> AsyncIterator[Listeners]:
    """Both listeners serving `status` on free ports, and a client session."""
    public = await serve(make_app(status), "127.0.0.1", 0)
    debug = await serve(make_debug_app(status), "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            yield Listeners(
                f"http://127.0.0.1:{bound_port(public)}",
                f"http://127.0.0.1:{bound_port(debug)}",
                session,
            )
    finally:
        await debug.cleanup()
        await public.cleanup()


@pytest_asyncio.fixture
async def server() -> AsyncIterator[Server]:
    status = FakeStatus()
    async with listening(status) as (public, debug, session):
        yield Server(status, public, session, debug)


# --- health and readiness -----------------------------------------------------------------------
async def test_healthz_follows_the_loop(server: Server) -> None:
    assert await server.get("/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
    server.status.alive = False
    status, _, body = await server.get("/healthz")
    assert (status, body) == (503, "scheduling loop is not running\n")


async def test_readyz_is_503_with_the_reason_until_caches_sync(server: Server) -> None:
    status, content_type, body = await server.get("/readyz")
    assert (status, body) == (503, "waiting for caches to sync: pods, nodes\n")
    assert content_type.startswith("text/plain")
    server.status.ready = (True, "")
    assert await server.get("/readyz") == (200, "text/plain; charset=utf-8", "ok\n")
    server.status.ready = (False, "")
    assert (await server.get("/readyz"))[::2] == (503, "not ready\n")


# --- metrics ------------------------------------------------------------------------------------
async def test_metrics_are_fresh_on_each_scrape(server: Server) -> None:
    server.status.metrics.attempt("scheduled", 0.01)
    status, content_type, body = await server.get("/metrics")
    assert status == 200
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert 'gang_scheduler_schedule_attempts_total{result="scheduled"} 1.0' in body
    # Gauges read from the core at scrape time: "waits" (3), "huge" (2), "nosize" (2).
    assert "\ngang_scheduler_pending_pods 7.0\n" in body
    assert 'gang_scheduler_cache_size{type="assumed_pods"} 2.0' in body
    assert 'gang_scheduler_gpu_allocated_gpus{model="A100"} 2.0' in body
    server.status.core.apply_pod(
        EventType.ADDED, pod_obj("waits-3", gang="waits", min_member=4, gpus=1), NOW
    )
    server.status.core.refresh(NOW)
    assert "\ngang_scheduler_pending_pods 8.0\n" in (await server.get("/metrics"))[2]


async def test_metrics_speak_openmetrics_when_asked(server: Server) -> None:
    accept = "application/openmetrics-text; version=1.0.0"
    status, content_type, body = await server.get("/metrics", Accept=accept)
    assert status == 200
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith("# EOF\n")


# --- /debug/gangs -------------------------------------------------------------------------------
async def test_debug_gangs_shows_waiting_and_unschedulable_gangs(server: Server) -> None:
    report = await server.json("/debug/gangs")
    assert report["now"] == "2026-09-21T14:13:20.250000Z"
    gangs = {gang["key"]: gang for gang in report["gangs"]}
    assert report["count"] == len(gangs) == 3  # "fits" is being bound: no longer assembled
    waits = gangs["default/waits"]
    assert waits == {
        "key": "default/waits",
        "namespace": "default",
        "name": "waits",
        "state": "waiting",
        "minMember": 4,
        "sizeSource": "annotation",
        "pending": 3,
        "bound": 0,
        "priority": 0,
        "created": "2026-01-01T00:00:00Z",
        "message": "waiting for 1 more member: 3/4 exist",
        "attempts": 0,
        "backoffUntil": None,
        "nextRetry": None,
        "nextRetryInSeconds": None,
        "problems": [],
        "topology": None,
    }
    huge = gangs["default/huge"]
    assert huge["state"] == "unschedulable" and huge["attempts"] == 1
    assert (huge["minMember"], huge["pending"]) == (2, 2)
    assert "Insufficient nvidia.com/gpu" in huge["message"]
    assert "gang default/huge: 0/2 members placeable" in huge["message"]
    # Backoff 1 s after the failure; retried anyway after 300 s if nothing changes.
    assert huge["backoffUntil"] == "2026-09-21T14:13:21Z"
    assert huge["nextRetry"] == "2026-09-21T14:18:20Z"
    assert huge["nextRetryInSeconds"] == 299.75
    # A gang-wide problem sits on every member; it is listed once.
    nosize = gangs["default/nosize"]
    assert [p["reason"] for p in nosize["problems"]] == ["GangSizeUnknown"]
    assert nosize["sizeSource"] == "default"


async def test_debug_gangs_filters_by_state_and_namespace(server: Server) -> None:
    waiting = await server.json("/debug/gangs?state=waiting")
    assert [gang["key"] for gang in waiting["gangs"]] == ["default/waits"]
    assert (await server.json("/debug/gangs?namespace=team-b"))["gangs"] == []
    unschedulable = await server.json("/debug/gangs?state=unschedulable&namespace=default")
    assert {gang["key"] for gang in unschedulable["gangs"]} == {"default/huge", "default/nosize"}


async def test_gang_in_flight_shows_its_queue_state() -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(EventType.ADDED, node_obj("n", gpus=2), NOW)
    for i in range(2):
        core.apply_pod(EventType.ADDED, pod_obj(f"g-{i}", gang="g", min_member=2, gpus=1), NOW)
    core.refresh(NOW)
    assert [gang["state"] for gang in gang_report(core, NOW)] == ["active"]
    assert core.queue.pop(NOW) == "default/g"  # as the loop does before planning
    (entry,) = gang_report(core, NOW)
    assert (entry["state"], entry["nextRetry"], entry["pending"]) == ("in_flight", None, 2)


# --- serving ------------------------------------------------------------------------------------
async def test_serve_on_a_taken_port_raises_and_leaves_nothing_running(server: Server) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    with pytest.raises(StartupError, match=rf"^cannot listen on 127.0.0.1:{port}: "):
        await serve(make_app(FakeStatus()), "127.0.0.1", port)
    assert (await server.get("/healthz"))[0] == 200
    status, _, _ = await server.get("/nowhere")
    assert status == 404


# --- what each listener serves (docs/security.md, "Endpoints") ----------------------------------
async def test_the_public_listener_serves_no_gang_names(server: Server) -> None:
    # /debug/gangs lists every tenant's namespaces and gangs: only on the loopback one.
    assert (await server.get("/debug/gangs"))[0] == 404
    async with server.session.get(server.debug_url + "/metrics") as response:
        assert response.status == 404
    tenants = {"default", "team-b", "waits", "huge", "nosize", "fits", "a100-1"}
    tenants |= {pod.name for gang in server.status.core.gangs.values() for pod in gang.pending}
    server.status.metrics.attempt("unschedulable", 0.2)
    server.status.metrics.bind_failed("conflict")
    _, _, body = await server.get("/metrics")
    families = list(text_string_to_metric_families(body))
    assert families
    for family in families:
        for sample in family.samples:
            assert set(sample.labels) - {"le"} <= METRIC_LABELS, sample  # le: histogram bounds
            assert not tenants & set(sample.labels.values()), sample
