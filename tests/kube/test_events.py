"""Feedback to users against the API emulator: PodScheduled conditions, FailedScheduling
aggregated per gang and window, Scheduled events, problems once each, PodGroup status,
and the write queue that keeps all of it off the scheduling loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from cache.cluster import Placement
from cache.pod import pod_from_api
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import Gang, build_gang
from scheduler.kube.client import KubeClient
from scheduler.kube.events import (
    FeedbackRecorder,
    GroupCondition,
    PodGroupStatus,
    Why,
    WriteQueue,
    podgroup_status,
)
from scheduler.planner.result import Plan, Unschedulable
from tests.factories import node_obj, pod_obj, podgroup_obj
from tests.kubeapi import EVENTS, PODGROUPS, KubeApiEmulator
from tests.waiting import eventually

SCHEDULER = "gang-scheduler"


@pytest_asyncio.fixture
async def queue(client: KubeClient) -> AsyncIterator[WriteQueue]:
    async with WriteQueue(client) as writes:
        yield writes


def seed_gang(api: KubeApiEmulator, size: int, name: str = "train", **kwargs: Any) -> Gang:
    """Pods of one gang on the server, and the Gang the core would assemble from them."""
    pods = [
        pod_from_api(api.put_pod(pod_obj(f"{name}-{i:04d}", gang=name, **kwargs)))
        for i in range(size)
    ]
    gang = build_gang(f"default/{name}", pods, None, SCHEDULER)
    assert gang is not None
    return gang


def unschedulable(gang: Gang, text: str = "0/2 nodes are available: 2 Insufficient gpu.") -> Any:
    message = f"{text} (gang {gang.key}: 0/{gang.min_member} members placeable)"
    return Unschedulable(
        gang.key, gang.min_member, 0, message, {p.uid: message for p in gang.pending}
    )


def events(api: KubeApiEmulator, reason: str | None = None) -> list[dict[str, Any]]:
    return [e for e in api.objects(EVENTS) if reason is None or e["reason"] == reason]


def condition(api: KubeApiEmulator, name: str) -> dict[str, Any] | None:
    pod = api.get_pod("default", name)
    assert pod is not None
    conditions = pod.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "PodScheduled"), None)


@pytest.mark.asyncio
async def test_every_member_gets_the_unschedulable_condition(
    api: KubeApiEmulator, queue: WriteQueue
) -> None:
    api.put_node(node_obj("n0", gpus=1))
    for i in range(3):
        api.put_pod(pod_obj(f"w-{i}", gang="w", min_member=3, gpus=1))
    core = SchedulingCore(build_profile())
    core.replace_nodes(api.nodes(), 0.0)
    core.replace_pods(api.pods(), 0.0)
    attempt = core.schedule_next(0.0)
    assert attempt is not None and isinstance(attempt.result, Unschedulable)
    recorder = FeedbackRecorder(queue)
    recorder.unschedulable(attempt.gang, attempt.result, 0.0)
    await queue.drain()
    for pod in attempt.gang.pending:
        found = condition(api, pod.name)
        assert found is not None
        assert found["status"] == "False" and found["reason"] == "Unschedulable"
        assert found["message"] == attempt.result.reasons[pod.uid]
        assert "gang default/w" in found["message"]
        assert found["lastTransitionTime"]
    # Every pending member shows why in `kubectl describe pod`: an event of its own.
    written = {e["involvedObject"]["uid"]: e for e in events(api, "FailedScheduling")}
    assert set(written) == {pod.uid for pod in attempt.gang.pending}
    for pod in attempt.gang.pending:
        event = written[pod.uid]
        assert event["type"] == "Warning" and event["count"] == 1
        assert event["message"] == attempt.result.reasons[pod.uid]


@pytest.mark.asyncio
async def test_failed_scheduling_is_one_event_per_pod_bumped_once_per_window(
    api: KubeApiEmulator, queue: WriteQueue
) -> None:
    gang = seed_gang(api, 1000, gpus=1)
    result = unschedulable(gang)
    recorder = FeedbackRecorder(queue, window=60.0)
    api.reset_request_counts()
    for attempt in range(10):  # ten attempts inside one window
        recorder.unschedulable(gang, result, float(attempt))
        await queue.drain()
    written = events(api, "FailedScheduling")
    assert len(written) == 1000 and {e["count"] for e in written} == {1}
    assert api.request_count("create", "events") == 1000
    assert api.request_count("patch", "events") == 0
    # Conditions: one write per pod, not one per pod per attempt.
    assert api.request_count("patch", "pods", "status") == 1000
    # The next window carries the count of the attempts held back, on the same events:
    # one patch per pod, not 11,000 events.
    recorder.unschedulable(gang, result, 61.0)
    await queue.drain()
    written = events(api, "FailedScheduling")
    assert len(written) == 1000 and {e["count"] for e in written} == {11}
    assert api.request_count("create", "events") == 1000
    assert api.request_count("patch", "events") == 1000
    assert api.request_count("patch", "pods", "status") == 1000


@pytest.mark.asyncio
async def test_held_back_attempts_are_written_by_tick(
    api: KubeApiEmulator, queue: WriteQueue
) -> None:
    gang = seed_gang(api, 4)
    result = unschedulable(gang)
    recorder = FeedbackRecorder(queue, window=60.0)
    for attempt in range(3):
        recorder.unschedulable(gang, result, float(attempt))
        await queue.drain()
    recorder.tick(30.0)  # still inside the window: nothing
    await queue.drain()
    assert [e["count"] for e in events(api, "FailedScheduling")] == [1] * 4
    recorder.tick(60.0)
    await queue.drain()
    assert [e["count"] for e in events(api, "FailedScheduling")] == [3] * 4


@pytest.mark.asyncio
async def test_a_new_message_makes_a_new_event_in_the_next_window_and_conditions_follow(
    api: KubeApiEmulator, queue: WriteQueue
) -> None:
    gang = seed_gang(api, 3)
    recorder = FeedbackRecorder(queue, window=60.0)
    recorder.unschedulable(gang, unschedulable(gang, "first"), 0.0)
    await queue.drain()
    recorder.unschedulable(gang, unschedulable(gang, "second"), 10.0)
    await queue.drain()
    # Inside the window: neither new events nor rewritten conditions.
    assert [e["message"][:5] for e in events(api, "FailedScheduling")] == ["first"] * 3
    assert condition(api, "train-0000")["message"].startswith("first")  # type: ignore[index]
    recorder.unschedulable(gang, unschedulable(gang, "second"), 70.0)
    await queue.drain()
    messages = sorted(e["message"][:6] for e in events(api, "FailedScheduling"))
    assert messages == ["first "] * 3 + ["second"] * 3  # a new message: a new event per pod
    for second in events(api, "FailedScheduling"):
        if second["message"].startswith("second"):
            assert second["count"] == 2  # the attempt at 10 s and the one at 70 s
    for pod in gang.pending:
        found = condition(api, pod.name)
        assert found is not None and found["message"].startswith("second")


@pytest.mark.asyncio
async def test_waiting_gangs_say_why_on_their_pods(api: KubeApiEmulator, queue: WriteQueue) -> None:
    gang = seed_gang(api, 3, min_member=4)
    assert gang.waiting_message == "waiting for 1 more member: 3/4 exist"
    recorder = FeedbackRecorder(queue)
    recorder.waiting(gang, gang.waiting_message, 0.0)
    recorder.waiting(gang, gang.waiting_message, 1.0)
    await queue.drain()
    for pod in gang.pending:
        found = condition(api, pod.name)
        assert found is not None and found["message"] == gang.waiting_message
    # Its controller may still be creating members: no Warning inside the grace...
    assert events(api) == []
    recorder.tick(29.0)
    await queue.drain()
    assert events(api) == []
    # ...then one per member, counting every attempt.
    recorder.tick(30.0)
    await queue.drain()
    written = events(api, "FailedScheduling")
    assert {e["involvedObject"]["uid"] for e in written} == {p.uid for p in gang.pending}
    assert {(e["message"], e["count"]) for e in written} == {(gang.waiting_message, 2)}


@pytest.mark.asyncio
async def test_scheduled_events_per_pod_or_per_gang(
    api: KubeApiEmulator, queue: WriteQueue
) -> None:
    gang = seed_gang(api, 4, gpus=1)
    plan = Plan(
        gang.key,
        tuple(Placement(p.uid, f"n{i % 2}", ((i // 2, 1000),)) for i, p in enumerate(gang.pending)),
    )
    FeedbackRecorder(queue).scheduled(gang, plan, 0.0)
    await queue.drain()
    scheduled = events(api, "Scheduled")
    assert len(scheduled) == 4 and all(e["type"] == "Normal" for e in scheduled)
    by_pod = {e["involvedObject"]["name"]: e["message"] for e in scheduled}
    assert by_pod["train-0000"] == (
        "Successfully assigned default/train-0000 to n0 (GPU devices 0:1000)"
    )
    FeedbackRecorder(queue, scheduled_events="gang").scheduled(gang, plan, 0.0)
    await queue.drain()
    assert len(events(api, "Scheduled")) == 5
    assert any(
        "gang default/train: 4 pods to 2 nodes" in e["message"] for e in events(api, "Scheduled")
    )
    FeedbackRecorder(queue, scheduled_events="off").scheduled(gang, plan, 0.0)
    await queue.drain()
    assert len(events(api, "Scheduled")) == 5


@pytest.mark.asyncio
async def test_problems_are_published_once_each(api: KubeApiEmulator, queue: WriteQueue) -> None:
    # No size anywhere: every pending member carries the same GangSizeUnknown problem.
    pods = [pod_from_api(api.put_pod(pod_obj(f"u-{i}", gang="u"))) for i in range(50)]
    bad = pod_from_api(api.put_pod(pod_obj("u-bad", gang="u", gpus=1, vgpu=500)))
    gang = build_gang("default/u", [*pods, bad], None, SCHEDULER)
    assert gang is not None
    reasons = {p.reason for p in gang.problems}
    assert reasons == {"GangSizeUnknown", "InvalidPodSpec"}
    recorder = FeedbackRecorder(queue)
    for now in (0.0, 1.0, 2.0):
        recorder.problems([gang], now)
        await queue.drain()
    unknown = events(api, "GangSizeUnknown")
    assert len(unknown) == 1  # shared by all 51 members: once, on the representative
    assert unknown[0]["involvedObject"]["uid"] == gang.pending[0].uid
    [invalid] = events(api, "InvalidPodSpec")
    assert invalid["involvedObject"]["name"] == "u-bad"
    assert invalid["involvedObject"]["uid"] == bad.uid


@pytest.mark.asyncio
async def test_gang_warnings_are_capped_per_window(api: KubeApiEmulator, queue: WriteQueue) -> None:
    pods = [
        pod_from_api(api.put_pod(pod_obj(f"b-{i}", gang="b", min_member=30, gpus=1, vgpu=500)))
        for i in range(30)
    ]
    gang = build_gang("default/b", pods, None, SCHEDULER)
    assert gang is not None and len(gang.problems) == 30  # one per pod, each its own
    recorder = FeedbackRecorder(queue, max_per_gang_per_window=10)
    recorder.problems([gang], 0.0)
    await queue.drain()
    assert len(events(api, "InvalidPodSpec")) == 10
    recorder.problems([gang], 30.0)
    await queue.drain()
    assert len(events(api, "InvalidPodSpec")) == 10
    recorder.problems([gang], 60.0)
    await queue.drain()
    assert len(events(api, "InvalidPodSpec")) == 20


@pytest.mark.asyncio
async def test_podgroup_status_follows_the_gang(api: KubeApiEmulator, queue: WriteQueue) -> None:
    api.put(PODGROUPS, podgroup_obj("train", 2))
    gang = seed_gang(api, 2)
    recorder = FeedbackRecorder(queue, has_podgroup=lambda key: key == "default/train")
    recorder.unschedulable(gang, unschedulable(gang), 0.0)
    await queue.drain()
    group = api.get(PODGROUPS, "default", "train")
    assert group is not None and group["status"]["phase"] == "Pending"
    assert group["status"]["scheduled"] == 0
    api.reset_request_counts()
    recorder.unschedulable(gang, unschedulable(gang), 1.0)
    await queue.drain()
    assert api.request_count("patch", "podgroups", "status") == 0  # unchanged: not written
    plan = Plan(gang.key, tuple(Placement(p.uid, "n0") for p in gang.pending))
    recorder.scheduled(gang, plan, 2.0)
    await queue.drain()
    group = api.get(PODGROUPS, "default", "train")
    assert group is not None
    assert group["status"]["phase"] == "Scheduled" and group["status"]["scheduled"] == 2
    running = [
        pod_from_api(pod_obj(f"train-{i:04d}", gang="train", node_name="n0", phase="Running"))
        for i in range(2)
    ]
    recorder.refresh_podgroup("default/train", 2, running)
    await queue.drain()
    group = api.get(PODGROUPS, "default", "train")
    assert group is not None and group["status"]["phase"] == "Running"


@pytest.mark.asyncio
async def test_podgroup_status_is_skipped_silently_without_the_crd(
    api: KubeApiEmulator, queue: WriteQueue
) -> None:
    api.crd_present(False)
    gang = seed_gang(api, 2)
    recorder = FeedbackRecorder(queue, has_podgroup=lambda key: True)
    recorder.unschedulable(gang, unschedulable(gang), 0.0)
    await queue.drain()
    assert queue.stats.failed == 0  # the 404 was skipped, not counted as a failure
    assert queue.stats.written == 5  # two conditions, two events, the status attempt
    assert len(events(api, "FailedScheduling")) == 2


def test_podgroup_phase_from_members() -> None:
    def pod(name: str, node: str = "", phase: str = "Pending") -> Any:
        return pod_from_api(pod_obj(name, gang="g", node_name=node, phase=phase))

    assert podgroup_status(2, [pod("a"), pod("b", "n")]) == PodGroupStatus("Pending", 1)
    why = Why("Unschedulable", "0/2 nodes are available")
    waiting = podgroup_status(2, [pod("a"), pod("b", "n")], why=why)
    assert waiting.condition == GroupCondition("True", "Unschedulable", why.message)
    assert podgroup_status(2, [pod("a")], newly_bound=2).phase == "Scheduled"
    assert podgroup_status(2, [pod("a", "n", "Running"), pod("b", "n")]).phase == "Scheduled"
    running = podgroup_status(2, [pod("a", "n", "Running"), pod("b", "n", "Succeeded")])
    scheduled = GroupCondition("False", "Scheduled", "2/2 members scheduled")
    assert running == PodGroupStatus("Running", 2, 1, 1, 0, scheduled)
    assert podgroup_status(2, [pod("a", "n", "Running"), pod("b", "n", "Failed")]).phase == "Failed"


class SlowClient:
    """Stands in for KubeClient in queue tests: records writes; a write takes as long as
    the test keeps `gate` closed (open at first), so it is still running when the test
    looks, whatever the machine's speed."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.active: set[str] = set()
        self.overlap = False
        self.gate = asyncio.Event()
        self.gate.set()


@pytest.mark.asyncio
async def test_write_queue_coalesces_drops_and_never_runs_a_key_twice_at_once() -> None:
    fake = SlowClient()
    writes = WriteQueue(fake, max_pending=3, workers=4)  # type: ignore[arg-type]

    def write(key: str, label: str) -> Any:
        async def run(client: Any) -> None:
            if key in fake.active:
                fake.overlap = True
            fake.active.add(key)
            await fake.gate.wait()
            fake.active.discard(key)
            fake.calls.append(label)

        return run

    # Nothing runs before start: submissions return at once, without waiting.
    assert writes.submit("a", write("a", "a1"))
    assert writes.submit("a", write("a", "a2"))  # replaces a1 while queued
    assert writes.submit("b", write("b", "b1"))
    assert writes.submit("c", write("c", "c1"))
    assert not writes.submit("d", write("d", "d1"))  # full: dropped, not awaited
    assert writes.stats.coalesced == 1 and writes.stats.dropped == 1
    async with writes:
        await writes.drain()
        assert sorted(fake.calls) == ["a2", "b1", "c1"]
        # A key submitted while its write runs runs after it, never beside it.
        fake.gate.clear()  # a3 runs until the gate opens
        writes.submit("a", write("a", "a3"))
        await eventually(lambda: "a" in fake.active, "a3 running")
        writes.submit("a", write("a", "a4"))
        # Idle workers are free to take a4 now: a few turns of the loop (no I/O here, so
        # a count of turns, not of time) wake every one; one that took a4 would overlap
        # a3, which the gate keeps running.
        for _ in range(10):
            await asyncio.sleep(0)
        assert not fake.overlap
        fake.gate.set()
        await writes.drain()
    assert fake.calls[-2:] == ["a3", "a4"] and not fake.overlap


@pytest.mark.asyncio
async def test_a_failing_write_is_counted_not_raised() -> None:
    writes = WriteQueue(SlowClient(), workers=1)  # type: ignore[arg-type]

    async def broken(client: Any) -> None:
        raise RuntimeError("boom")

    async with writes:
        writes.submit("x", broken)
        await writes.drain()
    assert writes.stats.failed == 1 and writes.stats.written == 0


@pytest.mark.asyncio
async def test_a_podgroup_recreated_under_its_name_gets_its_status_again(
    api: KubeApiEmulator, queue: WriteQueue
) -> None:
    uids = {"default/train": api.put(PODGROUPS, podgroup_obj("train", 2))["metadata"]["uid"]}
    gang = seed_gang(api, 2)
    recorder = FeedbackRecorder(queue, has_podgroup=lambda key: key in uids, podgroup_uid=uids.get)
    recorder.unschedulable(gang, unschedulable(gang), 0.0)
    await queue.drain()
    # Deleted and created again (kubectl replace --force) between two cycles.
    api.delete(PODGROUPS, "default", "train")
    uids["default/train"] = api.put(PODGROUPS, podgroup_obj("train", 2))["metadata"]["uid"]
    recorder.unschedulable(gang, unschedulable(gang), 1.0)
    await queue.drain()
    group = api.get(PODGROUPS, "default", "train")
    assert group is not None and group["status"]["phase"] == "Pending"
    # Once it is gone for good, nothing about it is kept.
    del uids["default/train"]
    recorder.prune({})
    assert recorder._podgroup_status == {} and recorder._podgroup_uids == {}
