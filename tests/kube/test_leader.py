"""Leader election on a Lease in the API emulator, on virtual time: one leader among
candidates, takeover after the leader stops renewing, a leader that cannot renew stops
within its renew deadline, and a clean release.

The electors take a VirtualClock for their deadlines and their sleeps: time moves only
when a test advances it, after every elector is asleep again, so each outcome depends on
the order of events and never on how fast the machine runs them (the requests still go
over real HTTP). The timings are the defaults, so the HTTP timeouts derived from them
(seconds of real time) are generous.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from scheduler.kube.client import KubeClient
from scheduler.kube.leader import LeaderElector, LeaseRecord
from tests.kubeapi import LEASES, KubeApiEmulator
from tests.waiting import HANG, VirtualClock, eventually

LEASE, RENEW, RETRY = 15.0, 10.0, 2.0


class Candidate:
    """An elector on `clock`, with its callbacks recorded (at virtual times) and its loop
    running as a task."""

    def __init__(self, client: KubeClient, identity: str, clock: VirtualClock) -> None:
        self.events: list[tuple[str, float]] = []
        self.elector = LeaderElector(
            client,
            namespace="kube-system",
            name="gang-scheduler",
            identity=identity,
            lease_duration=LEASE,
            renew_deadline=RENEW,
            retry_period=RETRY,
            jitter=0.0,
            on_started_leading=lambda: self.events.append(("started", clock())),
            on_stopped_leading=lambda: self.events.append(("stopped", clock())),
            clock=clock,
            sleep=clock.sleep,
        )
        self.task = asyncio.create_task(self.elector.run())

    async def crash(self) -> None:
        """Stop at once, without releasing the lease (a killed process)."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def holder(api: KubeApiEmulator) -> str:
    lease = api.get(LEASES, "kube-system", "gang-scheduler")
    assert lease is not None
    return LeaseRecord.from_lease(lease).holder


def asleep(clock: VirtualClock, count: int) -> Any:
    return lambda: clock.sleeping == count


@pytest.mark.asyncio
async def test_two_candidates_one_leader_and_a_takeover_after_the_leader_stops(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    clock = VirtualClock()
    a, b = Candidate(client, "a", clock), Candidate(client, "b", clock)
    try:
        await eventually(asleep(clock, 2), "both candidates waiting")
        assert a.elector.is_leader != b.elector.is_leader
        leader, standby = (a, b) if a.elector.is_leader else (b, a)
        # Over several lease durations the leader renews and the standby never leads.
        for _ in range(int(3 * LEASE / RETRY)):
            await clock.step(RETRY, asleep(clock, 2), "a renewal and a standby's read")
            assert leader.elector.is_leader and not standby.elector.is_leader
        assert holder(api) == leader.elector.identity
        assert [e for e, _ in leader.events] == ["started"]
        assert standby.events == []
        await leader.crash()
        crashed = clock()
        # The standby takes over once the record has not changed for the lease duration
        # by its own clock: it saw the last renewal (at most one retry before the crash)
        # at its next read, and reads every retry period.
        while not standby.elector.is_leader:
            assert clock() - crashed <= LEASE + 2 * RETRY, "no takeover"
            await clock.step(1.0, asleep(clock, 1), "the standby's next read")
        took = clock() - crashed
        assert LEASE - RETRY <= took <= LEASE + 2 * RETRY, took
        assert holder(api) == standby.elector.identity
        assert standby.events[0] == ("started", clock())
        lease = api.get(LEASES, "kube-system", "gang-scheduler")
        assert lease is not None and lease["spec"]["leaseTransitions"] == 1
    finally:
        await a.crash()
        await b.crash()


@pytest.mark.asyncio
async def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    clock = VirtualClock()
    a = Candidate(client, "a", clock)
    try:
        await eventually(asleep(clock, 1), "the leader renewing")
        await clock.step(RETRY, asleep(clock, 1), "a renewal")
        assert a.elector.is_leader
        api.fail_requests("update", "leases", count=10_000, status=500)
        api.fail_requests("get", "leases", count=10_000, status=500)
        broken = clock()

        def settled() -> bool:
            return clock.sleeping == 1 or a.elector.lost.is_set()

        while not a.elector.lost.is_set():
            assert clock() - broken < RENEW, "still leading past the renew deadline"
            await clock.step(1.0, settled, "a failed renewal")
        # It renewed last at most one retry period before the failures began.
        assert RENEW - RETRY <= clock() - broken <= RENEW
        assert not a.elector.is_leader
        assert a.events == [("started", a.events[0][1]), ("stopped", clock())]
        await asyncio.wait_for(a.task, HANG)  # run() returns: the process is to exit
    finally:
        await a.crash()


@pytest.mark.asyncio
async def test_is_leader_is_fenced_by_time_even_before_the_loop_notices(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    clock = VirtualClock()
    a = Candidate(client, "a", clock)
    try:
        await eventually(asleep(clock, 1), "the leader renewing")
        assert a.elector.is_leader
        clock.time += RENEW  # the renewing task starved for the whole deadline
        assert not a.elector.is_leader
    finally:
        await a.crash()


@pytest.mark.asyncio
async def test_a_leader_that_loses_the_lease_to_another_stops_at_once(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    clock = VirtualClock()
    a = Candidate(client, "a", clock)
    try:
        await eventually(asleep(clock, 1), "the leader renewing")
        lease = api.get(LEASES, "kube-system", "gang-scheduler")
        assert lease is not None
        lease["spec"]["holderIdentity"] = "intruder"
        api.put(LEASES, lease)
        # Its next renewal (one retry period on) finds the intruder: it stops there.
        await clock.step(RETRY, a.elector.lost.is_set, "the lease found taken")
        assert [e for e, _ in a.events] == ["started", "stopped"]
        assert a.events[1][1] == clock()
    finally:
        await a.crash()


@pytest.mark.asyncio
async def test_release_hands_over_without_waiting_out_the_lease(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    clock = VirtualClock()
    a = Candidate(client, "a", clock)
    await eventually(asleep(clock, 1), "a leading")
    b = Candidate(client, "b", clock)
    try:
        await eventually(asleep(clock, 2), "b waiting")
        assert a.elector.is_leader and not b.elector.is_leader
        assert await a.elector.release()
        assert not a.elector.is_leader
        # b's next read (one retry period on, far within the lease) finds it free.
        await clock.step(RETRY, lambda: a.task.done() and clock.sleeping == 1, "b's read")
        assert b.elector.is_leader and holder(api) == "b"
        assert a.events == [("started", a.events[0][1])]  # a release is no loss
    finally:
        await a.crash()
        await b.crash()


@pytest.mark.asyncio
async def test_a_release_after_a_renewal_whose_answer_was_lost_still_hands_over(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """A renewal cancelled in flight (the shutdown cancels the elector, then releases)
    can land without the elector learning the new resourceVersion: the release's write
    then meets a 409. The Lease still names it, so it reads the Lease and clears it, and
    a standby does not wait out the lease (seen on a loaded machine: the failover test
    of tests/kube/test_runner_faults.py waited for a 600 s lease)."""
    clock = VirtualClock()
    a = Candidate(client, "a", clock)
    try:
        await eventually(asleep(clock, 1), "a leading")
        lease = api.get(LEASES, "kube-system", "gang-scheduler")
        assert lease is not None
        lease["spec"]["renewTime"] = "2030-01-01T00:00:00.000000Z"  # a's renewal, landed
        api.put(LEASES, lease)
        assert await a.elector.release()
        assert holder(api) == ""
    finally:
        await a.crash()


@pytest.mark.asyncio
async def test_a_release_clears_nothing_of_another_holder(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """The Lease was taken over before the leader noticed: its release meets a 409, reads
    the Lease, finds another holder and leaves it as it is."""
    clock = VirtualClock()
    a = Candidate(client, "a", clock)
    try:
        await eventually(asleep(clock, 1), "a leading")
        lease = api.get(LEASES, "kube-system", "gang-scheduler")
        assert lease is not None
        lease["spec"]["holderIdentity"] = "intruder"
        api.put(LEASES, lease)
        assert not await a.elector.release()
        assert holder(api) == "intruder"
    finally:
        await a.crash()


@pytest.mark.asyncio
async def test_renewal_costs_one_request(api: KubeApiEmulator, client: KubeClient) -> None:
    clock = VirtualClock()
    a = Candidate(client, "a", clock)
    try:
        await eventually(asleep(clock, 1), "a leading")
        api.reset_request_counts()
        for _ in range(10):
            await clock.step(RETRY, asleep(clock, 1), "a renewal")
        counts: Any = api.request_counts()
        assert counts[("get", "leases", "")] == 0
        assert counts[("update", "leases", "")] == 10
    finally:
        await a.crash()


LOSES_ITS_LEASE = textwrap.dedent(
    """
    import asyncio

    from scheduler.kube.client import KubeClient
    from scheduler.kube.leader import LeaderElector
    from tests.kubeapi import LEASES, KubeApiEmulator, api_client


    async def main() -> None:
        async with KubeApiEmulator() as api:
            async with KubeClient(await api_client(api.base_url)) as client:
                elector = LeaderElector(
                    client, identity="a", lease_duration=600, renew_deadline=400,
                    retry_period=0.05, jitter=0,
                )
                task = asyncio.create_task(elector.run())
                await elector.started.wait()
                lease = api.get(LEASES, "kube-system", "gang-scheduler")
                lease["spec"]["holderIdentity"] = "intruder"
                api.put(LEASES, lease)
                await task
        print("still running after the lease was lost")


    asyncio.run(main())
    """
)


def test_by_default_a_lost_lease_exits_the_process() -> None:
    """The production default, outside the tests' replacement (tests/conftest.py): a
    process whose elector loses its lease to another holder exits with status 1, at
    once, without running anything after."""
    done = subprocess.run(
        [sys.executable, "-c", LOSES_ITS_LEASE],
        capture_output=True,
        text=True,
        timeout=HANG * 2,
        check=False,
        cwd=Path(__file__).resolve().parents[2],  # the repository: `tests` importable
    )
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "still running" not in done.stdout
    assert "leader election lost: exiting" in done.stderr


def test_timings_must_be_ordered() -> None:
    with pytest.raises(ValueError):
        LeaderElector(None, lease_duration=10, renew_deadline=10, retry_period=2)  # type: ignore[arg-type]
