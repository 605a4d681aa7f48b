"""What `kubectl` shows of a pending gang is true, and stays true: issue 33's operator
findings, each replayed through the API emulator with the clock the test sets
(tests/kube/stepped.py), asserting on what the API holds."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cache.pod import pod_from_api
from scheduler.gangs.gang import build_gang
from scheduler.kube.client import create_client, never
from scheduler.kube.event_correlator import COMBINED_PREFIX, SPAM_BURST, SPAM_REFILL_SECONDS
from scheduler.kube.events import FeedbackRecorder, WriteQueue
from scheduler.kube.runner import SchedulerRun
from scheduler.planner.result import Unschedulable
from scheduler.process.logs import record_fields
from tests.factories import node_obj, pod_obj, podgroup_obj
from tests.kube.stepped import stepped
from tests.kube.test_runner import fast_config
from tests.kubeapi import EVENTS, LEASES, PODGROUPS, KubeApiEmulator, write_kubeconfig
from tests.scrape import parse, series
from tests.waiting import eventually, free_port

pytestmark = pytest.mark.asyncio

WAITING = "waiting for 1 more member: 1/2 exist"


def condition(api: KubeApiEmulator, name: str) -> dict[str, Any]:
    pod = api.get_pod("default", name) or {}
    for found in pod.get("status", {}).get("conditions", []):
        if found["type"] == "PodScheduled":
            return dict(found)
    return {}


def warnings(api: KubeApiEmulator, name: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in api.objects(EVENTS)
        if e["type"] == "Warning" and (name is None or e["involvedObject"]["name"] == name)
    ]


def big_member(name: str, **kwargs: Any) -> dict[str, Any]:
    """A member of gang `big` (2 members) asking for more GPUs than any node has."""
    return pod_obj(name, gang="big", min_member=2, gpus=4, **kwargs)


async def test_a_changed_condition_is_rewritten_when_the_window_ends_without_a_retry(
    api: KubeApiEmulator, tmp_path: Path
) -> None:
    """The member that said "waiting for 1 more member" is told the gang does not fit
    within the window (60 s), though the gang is not tried again for 300 s."""
    api.put_node(node_obj("n0", gpus=2))
    async with stepped(api, tmp_path) as s:
        api.put_pod(big_member("big-0"))
        await s.seen(1)
        await s.cycle(0.0)
        assert condition(api, "big-0")["message"] == WAITING
        api.put_pod(big_member("big-1"))
        await s.seen(2)
        await s.cycle(40.0)  # ready now, and it does not fit
        told = condition(api, "big-1")["message"]
        assert "Insufficient" in told and "gang default/big" in told
        assert condition(api, "big-0")["message"] == WAITING  # held: inside the window
        await s.cycle(59.0)
        assert condition(api, "big-0")["message"] == WAITING
        await s.cycle(61.0)  # the window ends: written, with no new attempt
        assert s.run.core.queue.state("default/big") == "unschedulable"
        assert condition(api, "big-0")["message"] == told
        assert api.request_count("create", "pods", "binding") == 0


async def test_every_pending_member_shows_why_in_its_events(
    api: KubeApiEmulator, tmp_path: Path
) -> None:
    """Not only the oldest member: each gets its FailedScheduling, one Event object per
    pod whose count is patched, once per window."""
    api.put_node(node_obj("n0", gpus=2))
    async with stepped(api, tmp_path) as s:
        for i in range(3):
            api.put_pod(pod_obj(f"w-{i}", gang="w", min_member=3, gpus=4))
        await s.seen(3)
        await s.cycle(0.0)
        for i in range(3):
            [event] = warnings(api, f"w-{i}")
            assert event["reason"] == "FailedScheduling" and event["count"] == 1
            assert event["message"] == condition(api, f"w-{i}")["message"]
        # Tried again at the unschedulable cap, with the same outcome: each pod's own
        # event counts it (a patch, no new object).
        await s.cycle(301.0)
        assert len(warnings(api)) == 3 and {e["count"] for e in warnings(api)} == {2}
        assert api.request_count("create", "events") == 3
        # A node arrives: tried again, a new message, held inside the window...
        api.put_node(node_obj("n1", gpus=2))
        await s.seen(3, nodes=2)
        await s.cycle(310.0)
        assert s.run.core.queue.state("default/w") == "unschedulable"
        assert len(warnings(api)) == 3
        # ...and written when it ends, with no further attempt: a new Event per pod, as
        # client-go's correlator keys events by message.
        await s.cycle(361.0)
        for i in range(3):
            newest = [e for e in warnings(api, f"w-{i}") if "0/2 nodes" in e["message"]]
            assert len(newest) == 1 and newest[0]["count"] == 1
        assert api.request_count("create", "events") == 6


async def test_events_per_pod_are_bounded_as_client_go_bounds_them(
    api: KubeApiEmulator, client: Any
) -> None:
    """A member retried for hours: 25 writes, then one per 5 minutes (the spam filter);
    ten distinct messages in 10 minutes, then the newest is combined into one Event."""
    pods = [pod_from_api(api.put_pod(pod_obj(f"s-{i}", gang="s", min_member=2))) for i in range(2)]
    gang = build_gang("default/s", pods, None, "gang-scheduler")
    assert gang is not None

    def result(text: str) -> Unschedulable:
        return Unschedulable(gang.key, 2, 0, text, {p.uid: text for p in pods})

    async with WriteQueue(client) as queue:
        recorder = FeedbackRecorder(queue, window=1.0, max_per_gang_per_window=100)
        for second in range(100):  # one attempt per second, the same message
            recorder.unschedulable(gang, result("same"), float(second))
            await queue.drain()
        per_pod = api.request_count("create", "events") + api.request_count("patch", "events")
        assert per_pod == 2 * SPAM_BURST  # the burst, then nothing within 100 s
        assert {e["count"] for e in warnings(api)} == {SPAM_BURST}
        recorder.tick(100.0 + SPAM_REFILL_SECONDS)
        await queue.drain()
        # The attempts held back are not lost: the next write the filter allows counts them.
        assert {e["count"] for e in warnings(api)} == {100}

    api.reset_request_counts()
    async with WriteQueue(client) as queue:
        fresh = [
            pod_from_api(api.put_pod(pod_obj(f"m-{i}", gang="m", min_member=2))) for i in range(2)
        ]
        gang = build_gang("default/m", fresh, None, "gang-scheduler")
        assert gang is not None
        recorder = FeedbackRecorder(queue, window=1.0, max_per_gang_per_window=100)
        for second in range(15):  # a new message every second
            text = f"message {second}"
            recorder.unschedulable(
                gang, Unschedulable(gang.key, 2, 0, text, {p.uid: text for p in fresh}), second
            )
            await queue.drain()
        mine = [e for e in warnings(api) if e["involvedObject"]["name"] == "m-0"]
        assert len(mine) == 10  # ten Event objects, then the newest is bumped
        newest = max(mine, key=lambda e: e["count"])
        assert newest["message"] == COMBINED_PREFIX + "message 14"
        assert newest["count"] == 6


async def test_a_gang_whose_members_arrive_within_the_grace_gets_no_warning(
    api: KubeApiEmulator, tmp_path: Path
) -> None:
    api.put_node(node_obj("n0", gpus=2))
    async with stepped(api, tmp_path) as s:
        api.put_pod(pod_obj("job-0", gang="job", min_member=2, gpus=1))
        await s.seen(1)
        await s.cycle(0.0)
        assert condition(api, "job-0")["message"] == WAITING  # the truth, at once
        await s.cycle(5.0)
        api.put_pod(pod_obj("job-1", gang="job", min_member=2, gpus=1))
        await s.seen(2)
        await s.cycle(10.0)
        assert api.request_count("create", "pods", "binding") == 2
        assert warnings(api) == []


async def test_a_gang_that_stays_short_is_warned_once_the_grace_is_over(
    api: KubeApiEmulator, tmp_path: Path
) -> None:
    api.put_node(node_obj("n0", gpus=2))
    async with stepped(api, tmp_path) as s:
        api.put_pod(pod_obj("job-0", gang="job", min_member=2, gpus=1))
        await s.seen(1)
        await s.cycle(0.0)
        await s.cycle(29.0)
        assert warnings(api) == []
        await s.cycle(30.0)
        [event] = warnings(api, "job-0")
        assert event["reason"] == "FailedScheduling" and event["message"] == WAITING


async def test_the_podgroup_says_why_in_an_unschedulable_condition(
    api: KubeApiEmulator, tmp_path: Path
) -> None:
    api.put_node(node_obj("n0", gpus=2))
    api.put(PODGROUPS, podgroup_obj("big", 2))
    async with stepped(api, tmp_path) as s:
        api.put_pod(pod_obj("big-0", gang="big", gpus=4))
        await s.seen(1)
        await eventually_podgroup_seen(s)
        await s.cycle(0.0)
        [waiting] = podgroup_conditions(api)
        assert (waiting["status"], waiting["reason"]) == ("True", "NotReady")
        assert waiting["message"] == WAITING and waiting["lastTransitionTime"]
        api.put_pod(pod_obj("big-1", gang="big", gpus=4))
        await s.seen(2)
        await s.cycle(61.0)
        [unschedulable] = podgroup_conditions(api)
        assert (unschedulable["status"], unschedulable["reason"]) == ("True", "Unschedulable")
        assert "Insufficient" in unschedulable["message"]
        assert "gang default/big: 0/2 members placeable" in unschedulable["message"]
        group = api.get(PODGROUPS, "default", "big") or {}
        assert group["status"]["phase"] == "Pending"


def podgroup_conditions(api: KubeApiEmulator) -> list[dict[str, Any]]:
    group = api.get(PODGROUPS, "default", "big") or {}
    return [
        c for c in group.get("status", {}).get("conditions", []) if c["type"] == "Unschedulable"
    ]


async def eventually_podgroup_seen(s: Any) -> None:
    await eventually(lambda: "default/big" in s.run.core.cache.podgroups(), "the PodGroup seen")


async def test_logs_say_when_a_gang_waits_once_per_change(
    api: KubeApiEmulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api.put_node(node_obj("n0", gpus=2))
    caplog.set_level(logging.INFO)
    async with stepped(api, tmp_path) as s:
        api.put_pod(pod_obj("job-0", gang="job", min_member=3, gpus=1))
        await s.seen(1)
        for second in range(5):
            await s.cycle(float(second))
        api.put_pod(pod_obj("job-1", gang="job", min_member=3, gpus=1))
        await s.seen(2)
        for second in range(5, 10):
            await s.cycle(float(second))
        api.put_pod(pod_obj("bad", gang="bad", min_member=1, gpus=1, vgpu=500))
        await s.seen(3)
        for second in range(10, 15):
            await s.cycle(float(second))
    waits = [
        record_fields(r)["reason"]
        for r in caplog.records
        if r.getMessage() == "gang waiting" and record_fields(r)["gang"] == "default/job"
    ]
    # 2 then 1 members missing: one line per change, not one per cycle.
    assert waits == [
        "waiting for 2 more members: 1/3 exist",
        "waiting for 1 more member: 2/3 exist",
    ]
    refused = [r for r in caplog.records if r.getMessage() == "object refused"]
    assert len(refused) == 1 and refused[0].levelno == logging.WARNING
    assert record_fields(refused[0])["object"] == "default/bad"


async def test_a_podgroup_status_field_the_crd_lacks_is_pruned(
    api: KubeApiEmulator, client: Any
) -> None:
    """The emulator keeps of a PodGroup's status what deploy/crd-podgroup.yaml declares,
    as the API server prunes a structural CRD: `conditions` stays, an unknown field goes."""
    api.put(PODGROUPS, podgroup_obj("big", 2))
    status = {
        "phase": "Pending",
        "madeUp": 1,
        "conditions": [{"type": "Unschedulable", "status": "True", "extra": "x"}],
    }
    await client.call(
        "PATCH",
        "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups/big/status",
        body={"status": status},
        content_type="application/merge-patch+json",
        retry_on=never,
    )
    group = api.get(PODGROUPS, "default", "big") or {}
    assert group["status"] == {
        "phase": "Pending",
        "conditions": [{"type": "Unschedulable", "status": "True"}],
    }


async def test_a_gang_that_never_fits_is_not_timed_out_by_schedule_timeout_seconds(
    api: KubeApiEmulator, tmp_path: Path
) -> None:
    """docs/operator-guide.md, "Migrating from coscheduling": nothing is reserved for a
    gang that does not fit, so its scheduleTimeoutSeconds releases nothing and rejects
    nothing; it keeps waiting, retried on cluster changes and every 300 s, its members
    and its PodGroup saying why."""
    api.put_node(node_obj("n0", gpus=2))
    group = podgroup_obj("big", 2)
    group["spec"]["scheduleTimeoutSeconds"] = 5
    api.put(PODGROUPS, group)
    async with stepped(api, tmp_path) as s:
        for i in range(2):
            api.put_pod(pod_obj(f"big-{i}", gang="big", gpus=4))
        await s.seen(2)
        await eventually_podgroup_seen(s)
        for at in (0.0, 6.0, 100.0, 301.0, 700.0):
            await s.cycle(at)
        assert api.request_count("delete", "pods") == 0
        assert api.request_count("create", "pods", "binding") == 0
        assert s.run.core.queue.state("default/big") == "unschedulable"
        assert "Insufficient" in condition(api, "big-1")["message"]
        [unschedulable] = podgroup_conditions(api)
        assert unschedulable["status"] == "True"


async def test_a_standby_counts_the_leaders_queue_and_says_it_is_a_standby(
    api: KubeApiEmulator, tmp_path: Path
) -> None:
    """The Lease is held by another replica: this one schedules nothing, yet its gauges
    count the pending pods and gangs the leader counts, and its debug answer says it is a
    standby (`port-forward deploy/gang-scheduler` may land on it)."""
    api.put_node(node_obj("n0", gpus=2))
    api.put(LEASES, held_lease("gang-scheduler-7d9f-other_0a1b2c3d"))
    for i in range(2):
        api.put_pod(pod_obj(f"big-{i}", gang="big", min_member=2, gpus=4))
    api.put_pod(pod_obj("short-0", gang="short", min_member=2, gpus=1))
    debug_port = free_port()
    config = fast_config(free_port(), leader=True, debug_port=debug_port)
    kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
    kube = await create_client(str(kubeconfig), qps=1000, burst=1000)
    run = SchedulerRun(config, kube)
    stop = asyncio.Event()
    task = asyncio.create_task(run.run(stop))
    try:
        await eventually(lambda: len(run.core.gangs) == 2, "the standby's view of the gangs")
        assert run.role() == "standby"
        run.metrics.observe_core(run.core)
        scrape = parse(run.metrics.exposition().decode())
        assert series(scrape, "gang_scheduler_pending_pods")[0][2] == 3
        assert series(scrape, "gang_scheduler_pending_gangs")[0][2] == 2
        assert series(scrape, "gang_scheduler_leader")[0][2] == 0
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{debug_port}/debug/gangs") as reply,
        ):
            answer = await reply.json()
        assert answer["role"] == "standby" and answer["leader"] is False
        assert "standby" in answer["note"] and answer["count"] == 2
        assert api.request_count("create", "pods", "binding") == 0
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10.0) == 0
        await kube.close()


def held_lease(holder: str) -> dict[str, Any]:
    """The scheduler's Lease, renewed a moment ago by `holder` for an hour."""
    renewed = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "gang-scheduler", "namespace": "kube-system"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 3600,
            "acquireTime": renewed,
            "renewTime": renewed,
            "leaseTransitions": 0,
        },
    }
