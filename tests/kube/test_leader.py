"""Leader election on a Lease in the API emulator, with short timings: one leader among
candidates, takeover after the leader stops renewing, a leader that cannot renew stops
within its renew deadline, and a clean release."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.kube.client import KubeClient
from scheduler.kube.leader import LeaderElector, LeaseRecord
from tests.kubeapi import LEASES, KubeApiEmulator

LEASE, RENEW, RETRY = 1.0, 0.6, 0.1


class Candidate:
    """An elector with its callbacks recorded and its loop running as a task."""

    def __init__(self, client: KubeClient, identity: str) -> None:
        self.events: list[tuple[str, float]] = []
        self.elector = LeaderElector(
            client,
            namespace="kube-system",
            name="gang-scheduler",
            identity=identity,
            lease_duration=LEASE,
            renew_deadline=RENEW,
            retry_period=RETRY,
            on_started_leading=lambda: self.events.append(("started", time.monotonic())),
            on_stopped_leading=lambda: self.events.append(("stopped", time.monotonic())),
        )
        self.task = asyncio.create_task(self.elector.run())

    async def crash(self) -> None:
        """Stop at once, without releasing the lease (a killed process)."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def until(predicate: Callable[[], bool], timeout: float) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)
    return time.monotonic() - started


def holder(api: KubeApiEmulator) -> str:
    lease = api.get(LEASES, "kube-system", "gang-scheduler")
    assert lease is not None
    return LeaseRecord.from_lease(lease).holder


@pytest.mark.asyncio
async def test_two_candidates_one_leader_and_a_takeover_after_the_leader_stops(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    a, b = Candidate(client, "a"), Candidate(client, "b")
    try:
        await until(lambda: a.elector.is_leader or b.elector.is_leader, 2.0)
        leader, standby = (a, b) if a.elector.is_leader else (b, a)
        # Over several lease durations the leader renews and the standby never leads.
        for _ in range(25):
            await asyncio.sleep(0.06)
            assert leader.elector.is_leader and not standby.elector.is_leader
        assert holder(api) == leader.elector.identity
        assert [e for e, _ in leader.events] == ["started"]
        assert standby.events == []
        await leader.crash()
        stopped = time.monotonic()
        # The standby takes over once the record has not changed for the lease duration:
        # at most lease + retry (with jitter) after it last saw the record change,
        # which it reads every retry period.
        took = await until(lambda: standby.elector.is_leader, LEASE + 4 * RETRY + 0.5)
        assert took >= LEASE - 2 * RETRY  # never before the lease could have expired
        assert took <= LEASE + 3 * RETRY + 0.2, took
        assert holder(api) == standby.elector.identity
        assert standby.events[0][0] == "started" and standby.events[0][1] > stopped
        lease = api.get(LEASES, "kube-system", "gang-scheduler")
        assert lease is not None and lease["spec"]["leaseTransitions"] == 1
    finally:
        await a.crash()
        await b.crash()


@pytest.mark.asyncio
async def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    a = Candidate(client, "a")
    try:
        await until(lambda: a.elector.is_leader, 2.0)
        await asyncio.sleep(0.3)
        api.fail_requests("update", "leases", count=10_000, status=500)
        api.fail_requests("get", "leases", count=10_000, status=500)
        broken = time.monotonic()
        elapsed = await until(lambda: a.elector.lost.is_set(), RENEW + 0.5)
        assert elapsed <= RENEW + 0.1, elapsed
        assert not a.elector.is_leader
        assert [e for e, _ in a.events] == ["started", "stopped"]
        assert a.events[1][1] - broken <= RENEW + 0.1
        await asyncio.wait_for(a.task, 1.0)  # run() returns: the process is to exit
    finally:
        await a.crash()


@pytest.mark.asyncio
async def test_is_leader_is_fenced_by_time_even_before_the_loop_notices(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    now = [0.0]
    elector = LeaderElector(
        client,
        identity="a",
        lease_duration=LEASE,
        renew_deadline=RENEW,
        retry_period=RETRY,
        on_stopped_leading=None,
        clock=lambda: now[0],
    )
    task = asyncio.create_task(elector.run())
    try:
        await until(lambda: elector.is_leader, 2.0)
        now[0] += RENEW  # the renewing task starved for the whole deadline
        assert not elector.is_leader
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.asyncio
async def test_a_leader_that_loses_the_lease_to_another_stops_at_once(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    a = Candidate(client, "a")
    try:
        await until(lambda: a.elector.is_leader, 2.0)
        lease = api.get(LEASES, "kube-system", "gang-scheduler")
        assert lease is not None
        lease["spec"]["holderIdentity"] = "intruder"
        api.put(LEASES, lease)
        elapsed = await until(lambda: a.elector.lost.is_set(), RENEW)
        assert elapsed <= 2 * RETRY + 0.1
        assert [e for e, _ in a.events] == ["started", "stopped"]
    finally:
        await a.crash()


@pytest.mark.asyncio
async def test_release_hands_over_without_waiting_out_the_lease(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    a = Candidate(client, "a")
    await until(lambda: a.elector.is_leader, 2.0)
    b = Candidate(client, "b")
    try:
        await asyncio.sleep(0.2)
        assert not b.elector.is_leader
        assert await a.elector.release()
        assert not a.elector.is_leader
        took = await until(lambda: b.elector.is_leader, LEASE)
        assert took <= 3 * RETRY + 0.1
    finally:
        await a.crash()
        await b.crash()


@pytest.mark.asyncio
async def test_renewal_costs_one_request(api: KubeApiEmulator, client: KubeClient) -> None:
    a = Candidate(client, "a")
    try:
        await until(lambda: a.elector.is_leader, 2.0)
        api.reset_request_counts()
        await asyncio.sleep(10 * RETRY + 0.05)
        counts: Any = api.request_counts()
        assert counts[("get", "leases", "")] == 0
        assert 8 <= counts[("update", "leases", "")] <= 11
    finally:
        await a.crash()


def test_timings_must_be_ordered() -> None:
    with pytest.raises(ValueError):
        LeaderElector(None, lease_duration=10, renew_deadline=10, retry_period=2)  # type: ignore[arg-type]
