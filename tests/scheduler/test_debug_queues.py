"""`/debug/queues` over real HTTP on 127.0.0.1 (scheduler/process/queue_report.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from cache.cluster import EventType
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from tests.cache.test_quota import quota_obj
from tests.dra_builders import DRIVER, allocated, claim_obj, class_obj, device, exactly, slice_obj
from tests.factories import node_obj, pod_obj
from tests.scheduler.dra_cores import add_pods, claiming, feed
from tests.scheduler.test_http import NOW, FakeStatus, listening, settled
from tests.signed import TEST_KEY, signed

pytestmark = pytest.mark.asyncio
WEIGHT = "gang-scheduler.io/quota-weight"


class GuardedCore(SchedulingCore):
    """A core whose starvation guard holds n0, n1 for team-a/urgent (the report looks
    the method up, so cores without it serve too)."""

    def starvation_reservations(self) -> Mapping[str, frozenset[str]]:
        return {"team-a/urgent": frozenset({"n1", "n0"})}


def cluster(core: SchedulingCore) -> SchedulingCore:
    """Two 8-GPU nodes, full: team-b borrows 8 GPUs beyond its min of 4 with gang "bulk"
    (priority 0) and runs "small" within it. Waiting: team-a/urgent (4 GPUs, priority
    10, within team-a's min: it preempts bulk), team-b/more (2 GPUs: borrowing),
    default/free (no quota, 16 GPUs a member: never fits)."""
    core.preempter.enabled = True
    core.cache.assignment_key = TEST_KEY  # the running gangs were bound (signed) with it
    for name in ("n0", "n1"):
        core.apply_node(EventType.ADDED, node_obj(name, gpus=8), NOW)
    team_b = quota_obj("team-b", {"nvidia.com/gpu": 16}, {"nvidia.com/gpu": 4})
    team_b["metadata"]["annotations"] = {WEIGHT: "2"}
    for quota in (quota_obj("team-a", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 8}), team_b):
        core.apply_elasticquota(EventType.ADDED, quota, NOW)
    running = [
        pod_obj(f"bulk-{i}", namespace="team-b", gang="bulk", min_member=2, gpus=6, node_name=n)
        for i, n in enumerate(("n0", "n1"))
    ]
    running += [
        pod_obj(f"small-{i}", namespace="team-b", gang="small", min_member=2, gpus=2, node_name=n)
        for i, n in enumerate(("n0", "n1"))
    ]
    waiting = [
        pod_obj("urgent-0", namespace="team-a", gang="urgent", min_member=1, gpus=4, priority=10),
        pod_obj("more-0", namespace="team-b", gang="more", min_member=1, gpus=2),
        pod_obj("free-0", gang="free", min_member=1, gpus=16),
    ]
    running = [signed(pod) for pod in running]  # ours: only such gangs are victims
    for pod in running + waiting:
        pod["status"]["phase"] = "Running" if pod["spec"].get("nodeName") else "Pending"
    return settled(core, running + waiting)


@dataclass
class Debug:
    status: FakeStatus
    public: str
    debug: str
    session: aiohttp.ClientSession

    async def get(self, path: str) -> tuple[int, Any]:
        async with self.session.get(self.debug + path) as response:
            if response.content_type == "application/json":
                return response.status, await response.json()
            return response.status, await response.text()


async def serving(core: SchedulingCore) -> AsyncIterator[Debug]:
    status = FakeStatus(core=core)
    async with listening(status) as (public, debug, session):
        yield Debug(status, public, debug, session)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[Debug]:
    async for debug in serving(cluster(SchedulingCore(build_profile()))):
        yield debug


@pytest_asyncio.fixture
async def guarded() -> AsyncIterator[Debug]:
    async for debug in serving(cluster(GuardedCore(build_profile()))):
        yield debug


async def test_gangs_in_queue_order_with_quota_admission_backoff_and_held_room(
    server: Debug,
) -> None:
    status, report = await server.get("/debug/queues")
    assert status == 200
    assert report["now"] == "2026-09-21T14:13:20.250000Z"
    assert (report["gangCount"], report["gangsLeftOut"]) == (3, 0)
    # Whether the core has a starvation guard (another helper adds it): shown as such.
    guard = hasattr(server.status.core, "starvation_reservations")
    assert report["starvationGuard"] is guard
    gangs = {gang["key"]: gang for gang in report["gangs"]}
    # Every one failed once at NOW: backing off for a second, in the queue since NOW.
    assert [g["state"] for g in report["gangs"]] == ["unschedulable"] * 3
    urgent = gangs["team-a/urgent"]
    assert urgent["namespace"] == "team-a" and urgent["name"] == "urgent"
    assert (urgent["size"], urgent["pending"], urgent["priority"]) == (1, 1, 10)
    assert (urgent["quota"], urgent["quotaNamespace"]) == ("team-a/quota", "team-a")
    assert urgent["admission"] == "guaranteed"
    assert urgent["inQueueSince"] == "2026-09-21T14:13:20Z"
    assert urgent["waitingSeconds"] == 0.25
    assert urgent["backoffUntil"] == "2026-09-21T14:13:21Z"
    assert urgent["attempts"] == 1
    assert "Insufficient nvidia.com/gpu" in urgent["lastReason"]
    assert urgent["preempting"] == ["team-b/bulk"]
    assert urgent["nominatedNodes"] == ["n0"]
    assert ("reservedNodes" in urgent) is guard
    more = gangs["team-b/more"]
    assert (more["admission"], more["quota"], more["preempting"]) == (
        "borrowing",
        "team-b/quota",
        [],
    )
    free = gangs["default/free"]
    assert (free["quota"], free["quotaNamespace"], free["admission"]) == (None, None, None)


async def test_quotas_show_usage_borrowing_pending_gangs_and_fair_share(server: Debug) -> None:
    _, report = await server.get("/debug/queues")
    assert (report["quotaCount"], report["quotasLeftOut"]) == (2, 0)
    team_a, team_b = report["quotas"]
    assert team_b == {
        "key": "team-b/quota",
        "namespace": "team-b",
        "weight": 2.0,
        "min": {"nvidia.com/gpu": "4"},
        "max": {"nvidia.com/gpu": "16"},
        # 2 x 6 + 2 x 2 GPUs run; cpu and memory as their pods request.
        "used": {"nvidia.com/gpu": "16", "cpu": "4", "memory": "4Gi"},
        "borrowed": {"nvidia.com/gpu": "12"},
        "pendingGangs": {"guaranteed": 0, "borrowing": 1},
        # team-a's min of 8 less the 4 GPUs held (nominated) for urgent, which count as
        # used: the pool; team-b is the only borrower, so all of it is its share.
        "fairShare": {
            "nvidia.com/gpu": {
                "idleInOthers": "4",
                "netOfBorrowed": "4",
                "share": "4",
                "mayBorrow": "4",
            }
        },
        "problems": [],
    }
    assert team_a["used"] == {"nvidia.com/gpu": "4", "cpu": "1", "memory": "1Gi"}
    assert team_a["borrowed"] == {}
    assert team_a["pendingGangs"] == {"guaranteed": 1, "borrowing": 0}
    # team-b uses beyond its min: nothing of it is idle for team-a to borrow.
    assert team_a["fairShare"]["nvidia.com/gpu"] == {
        "idleInOthers": "0",
        "netOfBorrowed": "0",
        "share": "0",
        "mayBorrow": "0",
    }


async def test_the_reply_is_capped_and_says_how_much_was_left_out(server: Debug) -> None:
    _, report = await server.get("/debug/queues?limit=1")
    assert len(report["gangs"]) == 1 and report["gangsLeftOut"] == 2
    assert len(report["quotas"]) == 1 and report["quotasLeftOut"] == 1
    assert report["gangCount"] == 3 and report["quotaCount"] == 2
    for bad in ("0", "-1", "x", "10001"):
        status, text = await server.get(f"/debug/queues?limit={bad}")
        assert status == 400
        assert text.startswith("limit must be a whole number from 1 to 10000")


async def test_a_namespace_filter_keeps_its_gangs_and_its_quota(server: Debug) -> None:
    _, report = await server.get("/debug/queues?namespace=team-b")
    assert [g["key"] for g in report["gangs"]] == ["team-b/more"]
    assert [q["key"] for q in report["quotas"]] == ["team-b/quota"]


async def test_starvation_reservations_are_shown_when_the_core_has_them(guarded: Debug) -> None:
    _, report = await guarded.get("/debug/queues")
    assert report["starvationGuard"] is True
    gangs = {gang["key"]: gang for gang in report["gangs"]}
    assert gangs["team-a/urgent"]["reservedNodes"] == ["n0", "n1"]
    assert gangs["team-b/more"]["reservedNodes"] == []


async def test_only_the_loopback_listener_serves_it(server: Debug) -> None:
    async with server.session.get(server.public + "/debug/queues") as response:
        assert response.status == 404


async def test_dra_gangs_and_devices_are_shown() -> None:
    """A gang whose members use ResourceClaims says how many do, and the devices taken
    per driver are reported (allocated by a claim's status, held by this scheduler)."""
    core = cluster(SchedulingCore(build_profile()))
    feed(
        core,
        slice_obj("s", [device("gpu-0"), device("gpu-1")], node="n0"),
        class_obj(),
        claim_obj(
            "running",
            [exactly()],
            namespace="team-a",
            allocation=allocated((DRIVER, "n0", "gpu-0")),
        ),
        claim_obj("wanted", [exactly()], namespace="team-a"),
    )
    add_pods(core, claiming("uses-dra", "wanted", gang="devices", namespace="team-a"))
    core.refresh(NOW)
    async for debug in serving(core):
        _, report = await debug.get("/debug/queues")
        gangs = {gang["key"]: gang for gang in report["gangs"]}
        assert gangs["team-a/devices"]["deviceClaims"] == 1
        assert gangs["team-b/more"]["deviceClaims"] == 0
        assert report["draDevices"] == {DRIVER: {"allocated": 1, "held": 0, "kept": 0}}
