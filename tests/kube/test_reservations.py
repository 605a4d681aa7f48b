"""Reservations are never booked twice: `run_scheduler` against the API emulator with
slow binds queued behind one binder slot, and with the pod list/watch failing while
writes still work. A reservation lives until the watch or a relist shows the bind, the
pod is deleted, or the bind definitely failed; never until a clock runs out
(docs/kubernetes.md, "Reservations")."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from scheduler.process.config import config_from_mapping
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import (
    SCHEDULED,
    TEST_TIMEOUT,
    UNSCHEDULABLE,
    bound,
    running_with,
    unschedulable_message,
)
from tests.kube.test_runner_faults import (
    SteppedClock,
    assert_one_bind_per_pod,
    scheduler_watching,
)
from tests.kubeapi import KubeApiEmulator
from tests.waiting import HANG, cycles_pass, eventually, free_port, metric, metric_reaches


@asynccontextmanager
async def scheduler(
    api: KubeApiEmulator,
    tmp_path: Path,
    *,
    bind_timeout: float,
    assume_ttl: float,
    clock: SteppedClock,
    concurrency: int = 64,
) -> AsyncIterator[int]:
    """The scheduler on `clock`, with the (obsolete) reservation TTL set short: on a
    scheduler that expires reservations, they expire once the test moves the clock past
    it. Yields the metrics port."""
    port = free_port()
    config = config_from_mapping(
        {
            "http": {"address": "127.0.0.1", "port": port},
            "leaderElection": {"enabled": False},
            "timeouts": {
                "initialBackoffSeconds": 0.1,
                "maxBackoffSeconds": 0.3,
                "bindTimeoutSeconds": bind_timeout,
                "assumeTTLSeconds": assume_ttl,
            },
            "binding": {"concurrency": concurrency},
            "client": {"qps": 1000, "burst": 1000},
        }
    )
    async with running_with(api, tmp_path, config, clock=clock):
        yield port


def gpus_per_node(api: KubeApiEmulator) -> Counter[str]:
    """Whole GPUs the API has bound on each node (every pod here takes one)."""
    return Counter(p["spec"]["nodeName"] for p in bound(api).values())


def put_gang(api: KubeApiEmulator, name: str, size: int, created: str) -> None:
    for i in range(size):
        api.put_pod(pod_obj(f"{name}-{i}", gang=name, min_member=size, gpus=1, created=created))


def assert_not_overbooked(api: KubeApiEmulator) -> None:
    """No node carries two pods (each node here has one GPU). A bound pod stays bound in
    these tests, so a check after the cycles that could have overbooked is enough."""
    twice = {node: n for node, n in gpus_per_node(api).items() if n > 1}
    assert twice == {}, f"one GPU given to two pods: {twice}"


async def past_the_ttl(clock: SteppedClock, port: int) -> None:
    """Move the scheduler's clock far past any reservation TTL, then let whole cycles run
    on the new time: one that expired reservations would have re-planned by then."""
    clock.offset += 60.0
    await cycles_pass(port)


@pytest.mark.asyncio
async def test_binds_queued_behind_one_slot_keep_their_reservation(tmp_path: Path) -> None:
    """Four binds of one gang through one binder slot: the first held by the server, the
    other three queued behind it, while the scheduler's clock passes the reservation TTL
    (1 s). The members still waiting for the slot keep their reservation: the gang is not
    re-planned (no second binding request, no 409) and the gang behind it gets none of
    its GPUs."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            put_gang(api, "first", 4, "2026-01-01T00:00:00Z")
            put_gang(api, "second", 2, "2026-01-01T00:01:00Z")
            api.hold_binds()
            clock = SteppedClock()
            # Each bind request's own timeout far above the hold, so that none times out.
            async with scheduler(
                api, tmp_path, bind_timeout=HANG, assume_ttl=1.0, clock=clock, concurrency=1
            ) as port:
                await eventually(lambda: api.binds_held == 1, "the first member's bind held")
                # The second gang was tried (and found no room) and keeps finding none.
                await metric_reaches(port, UNSCHEDULABLE, 1, "the second gang tried")
                await past_the_ttl(clock, port)
                assert await metric(port, SCHEDULED) == 1  # nothing re-planned
                api.release_binds()
                await eventually(lambda: len(bound(api, "first")) == 4, "the first gang bound")
                await cycles_pass(port)
                assert_not_overbooked(api)
            assert_one_bind_per_pod(api)
            assert api.request_count("create", "pods", "binding") == 4
            assert {r.status for r in api.request_log if r.subresource == "binding"} == {201}
            assert bound(api, "second") == {}
            assert all(gpus_per_node(api)[f"n{i}"] == 1 for i in range(4))

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def pending_told_why(api: KubeApiEmulator, name: str) -> bool:
    return bool(unschedulable_message(api.get_pod("default", name) or {}))


@pytest.mark.asyncio
async def test_a_bind_answered_201_stays_charged_while_the_watch_is_down(
    tmp_path: Path,
) -> None:
    """One GPU, two single-pod gangs. The older one's bind is in flight when the pod
    list and watch start failing (writes still work): the 201 comes back but no event
    shows the pod bound for longer than the reservation TTL. Its GPU is not given to the
    other gang, and it gets no second binding request; once listing works again the
    relist confirms the bind."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", gpus=1))
            clock = SteppedClock()
            async with scheduler(
                api, tmp_path, bind_timeout=HANG, assume_ttl=2.0, clock=clock
            ) as port:
                await scheduler_watching(api)
                api.hold_binds()
                api.put_pod(pod_obj("a", gpus=1, created="2026-01-01T00:00:00Z"))
                api.put_pod(pod_obj("b", gpus=1, created="2026-01-01T00:01:00Z"))
                # b is told it does not fit: a is planned and its bind is in flight.
                await eventually(lambda: pending_told_why(api, "b"), "b found no room")
                await eventually(lambda: api.binds_held == 1, "a's bind in flight")
                assert api.bind_log == []
                api.fail_requests("list", "pods", count=1_000, status=500)
                api.fail_requests("watch", "pods", count=1_000, status=500)
                assert api.drop_watches() > 0
                api.release_binds()
                await eventually(lambda: "a" in bound(api), "a's bind landed")
                # Past the TTL, with the watch still down.
                await past_the_ttl(clock, port)
                assert_not_overbooked(api)
                assert api.open_watches("pods") == 0
                assert "b" not in bound(api)
                api.clear_faults()
                await scheduler_watching(api)
                await cycles_pass(port)
                assert_not_overbooked(api)
            assert_one_bind_per_pod(api)
            assert api.request_count("create", "pods", "binding") == 1
            assert set(bound(api)) == {"a"}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_landed_bind_whose_answer_and_reads_fail_stays_charged_until_read(
    tmp_path: Path,
) -> None:
    """The bind lands but answers 500; reading the pod fails too, and so do list and
    watch: the outcome is unknown. The reservation holds (the other pod gets nothing)
    while the scheduler keeps trying to read the pod; once reads work it learns the bind
    landed, sends no second binding request, and the relist confirms it."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", gpus=1))
            clock = SteppedClock()
            async with scheduler(
                api, tmp_path, bind_timeout=HANG, assume_ttl=1.5, clock=clock
            ) as port:
                await scheduler_watching(api)
                api.fail_next_binds(1, status=500, committed=True)
                api.fail_requests("get", "pods", count=10_000, status=503)
                api.hold_binds()
                api.put_pod(pod_obj("a", gpus=1, created="2026-01-01T00:00:00Z"))
                api.put_pod(pod_obj("b", gpus=1, created="2026-01-01T00:01:00Z"))
                await eventually(lambda: pending_told_why(api, "b"), "b found no room")
                await eventually(lambda: api.binds_held == 1, "a's bind in flight")
                assert api.bind_log == []  # a's bind is in flight: now the watch fails
                api.fail_requests("list", "pods", count=10_000, status=503)
                api.fail_requests("watch", "pods", count=10_000, status=503)
                assert api.drop_watches() > 0
                api.release_binds()
                await eventually(lambda: "a" in bound(api), "a's bind landed")
                # Reads of the pod keep failing for longer than any TTL: still charged,
                # and it keeps asking (a read after the clock passed its interval).
                await eventually(lambda: api.request_count("get", "pods") >= 1, "a read")
                reads = api.request_count("get", "pods")
                await past_the_ttl(clock, port)
                await eventually(lambda: api.request_count("get", "pods") > reads, "read again")
                await cycles_pass(port)
                assert_not_overbooked(api)
                api.clear_faults()
                await scheduler_watching(api)
                await cycles_pass(port)
                assert_not_overbooked(api)
            assert_one_bind_per_pod(api)
            assert set(bound(api)) == {"a"}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
