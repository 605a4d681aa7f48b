"""`run_scheduler` end to end against the API emulator under faults: watches dropped
mid-gang, an API server restart, a scheduler killed between binds, a leader failover, a
1,000-pod burst and malformed annotations. Every scenario is bounded by `TEST_TIMEOUT`
and checks the invariant that matters most to a gang scheduler: no pod gets two binding
requests, and a gang ends whole (or, when it cannot, with nothing held)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from cache.gpu import ASSIGNMENT_ANNOTATION, TOPOLOGY_ANNOTATION
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import (
    TEST_TIMEOUT,
    bound,
    fast_config,
    running,
    running_with,
    seed_gang,
    start_cli,
    unschedulable_message,
)
from tests.kubeapi import EVENTS, LEASES, KubeApiEmulator
from tests.signed import signed, with_key
from tests.waiting import HANG, cycles_pass, eventually, free_port, metric_reaches


def binding_requests(api: KubeApiEmulator) -> Counter[str]:
    """Binding requests per pod name, whatever their answer."""
    return Counter(r.name for r in api.request_log if r.subresource == "binding")


def assert_one_bind_per_pod(api: KubeApiEmulator) -> None:
    twice = {name: n for name, n in binding_requests(api).items() if n > 1}
    assert twice == {}, f"pods with more than one binding request: {twice}"
    landed = Counter(record.name for record in api.bind_log)
    assert all(n == 1 for n in landed.values()), landed


async def scheduler_watching(api: KubeApiEmulator) -> None:
    """The scheduler has listed and is watching pods (so what follows is seen as events)."""
    await eventually(lambda: api.open_watches("pods") > 0, "the pod watch open")


def warning_reasons(api: KubeApiEmulator, pod_name: str) -> set[str]:
    return {
        str(event.get("reason"))
        for event in api.objects(EVENTS)
        if event.get("type") == "Warning"
        and event.get("involvedObject", {}).get("name") == pod_name
    }


def lease_holder(api: KubeApiEmulator) -> str:
    holders = [
        str(lease.get("spec", {}).get("holderIdentity") or "") for lease in api.objects(LEASES)
    ]
    return holders[0] if holders else ""


class SteppedClock:
    """Monotonic time plus an offset a test can jump forward (the grace period of the
    crash-safety rule is 60 s and not configurable; the runner takes a clock)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


async def run_past_the_grace(
    api: KubeApiEmulator, tmp_path: Path, deleted: Callable[[], bool], what: str
) -> None:
    """Run the scheduler (signing key under tmp_path) on a stepped clock: nothing is
    deleted within the partial-gang grace; once the clock is past it, wait until
    `deleted`, then for more scheduling cycles (each reviews the partial gangs), so that
    a deletion too many would be counted."""
    clock = SteppedClock()
    port = free_port()
    config = with_key(fast_config(port), tmp_path)
    async with running_with(api, tmp_path, config, clock=clock):
        # The jump must come after the scheduler took stock of the partial gangs (their
        # grace runs from then, on its clock); on a slow machine that is not soon.
        await taken_stock(port)
        assert api.request_count("delete", "pods") == 0  # within the grace
        clock.offset += 61.0
        await eventually(deleted, what)
        await cycles_pass(port)


async def taken_stock(port: int) -> None:
    """Until the scheduler on `port` reports itself the leader: it does so in the same
    step as it looks for gangs found partial at start (runner.py, `_schedule`)."""
    await metric_reaches(port, "gang_scheduler_leader", 1, "the scheduler scheduling")


@pytest.mark.asyncio
async def test_a_watch_dropped_while_a_gang_is_created_still_binds_it_whole(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            async with running(api, tmp_path) as port:
                await scheduler_watching(api)
                for i in range(4):
                    api.put_pod(pod_obj(f"train-{i}", gang="train", min_member=4, gpus=1))
                    if i in (1, 2):
                        # Cut between two members: the rest arrive after the watch resumes
                        # (train-2 on the resumed watch, train-3 while it is down).
                        assert api.drop_watches() > 0
                        if i == 1:
                            await scheduler_watching(api)  # cut the resumed watch too
                await eventually(lambda: len(bound(api)) == 4, "the gang bound whole")
                await cycles_pass(port)  # no late duplicate bind
                assert api.open_watches("pods") > 0  # it watches again
            assert_one_bind_per_pod(api)
            assert api.request_count("create", "pods", "binding") == 4
            assert len({p["spec"]["nodeName"] for p in bound(api).values()}) == 4

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_after_an_api_server_restart_later_gangs_still_bind(tmp_path: Path) -> None:
    async def scenario() -> None:
        # Without the watch-list stream, so that the relist is a LIST to count
        # (tests/kube/test_watch_list.py: the same with the stream).
        async with KubeApiEmulator(watch_list=False) as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            seed_gang(api, "before", 2)
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "before")) == 2, "first gang bound")
                lists_before = api.request_count("list", "pods")
                # New watch-cache history: resuming from the old resourceVersion gets 410.
                api.restart()
                seed_gang(api, "after", 2)
                await eventually(lambda: len(bound(api, "after")) == 2, "second gang bound")
                # It relisted (the resume was refused) rather than trusting a stale cache.
                assert api.request_count("list", "pods") > lists_before
                # And it still fits around what the first gang holds.
                nodes = [p["spec"]["nodeName"] for p in bound(api).values()]
                assert sorted(nodes) == ["n0", "n1", "n2", "n3"]
            assert_one_bind_per_pod(api)
            assert api.request_count("create", "pods", "binding") == 4

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_after_an_api_server_outage_later_gangs_still_bind(tmp_path: Path) -> None:
    """The server stops listening for a while (connections refused), then serves again."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            seed_gang(api, "before", 2)
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "before")) == 2, "first gang bound")
                await api.outage(0.5)
                seed_gang(api, "after", 2)
                await eventually(lambda: len(bound(api, "after")) == 2, "second gang bound")
            assert_one_bind_per_pod(api)
            assert api.request_count("create", "pods", "binding") == 4

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_scheduler_killed_between_binds_is_completed_by_the_next(
    tmp_path: Path,
) -> None:
    """A real SIGKILL of `gang-scheduler run` while it binds a gang one member at a time
    (concurrency 1, slow binds): the next scheduler finds the gang partial and binds
    only the rest, since it fits."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            # Two binds land; the next one is held in flight until the kill is done.
            api.hold_binds(after=2)
            seed_gang(api, "train", 4)
            process = await start_cli(
                api, tmp_path, "binding: {concurrency: 1}\n", stderr=asyncio.subprocess.DEVNULL
            )
            try:
                await eventually(lambda: api.binds_held == 1, "two members bound, a third held")
                process.send_signal(signal.SIGKILL)
                await asyncio.wait_for(process.wait(), HANG)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            # The bind that was in flight lands (the server finishes it without a client).
            api.release_binds()
            await eventually(lambda: api.binds_held == 0, "the held bind processed")
            left_bound = len(bound(api))
            assert 2 <= left_bound < 4, f"not a partial gang: {left_bound} bound"
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api)) == 4, "the gang completed")
            assert_one_bind_per_pod(api)
            assert api.request_count("delete", "pods") == 0
            assert len({p["spec"]["nodeName"] for p in bound(api).values()}) == 4

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_partial_gang_that_cannot_complete_is_deleted_after_the_grace(
    tmp_path: Path,
) -> None:
    """Two of four members bound on the only two GPUs: the rest can never fit, so past
    the grace period the bound members are deleted (their controller recreates them)."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(2):
                api.put_node(node_obj(f"n{i}", gpus=1))
            for i in range(4):
                node = f"n{i}" if i < 2 else ""
                member = pod_obj(f"train-{i}", gang="train", min_member=4, gpus=1, node_name=node)
                # The bound two were bound by this scheduler (signed) before a restart.
                api.put_pod(signed(member) if node else member)
            clock = SteppedClock()
            port = free_port()
            config = with_key(fast_config(port), tmp_path)
            async with running_with(api, tmp_path, config, clock=clock):
                # Tried and found no room: it said so on the pending members.
                await eventually(
                    lambda: all(
                        unschedulable_message(api.get_pod("default", f"train-{i}") or {})
                        for i in (2, 3)
                    ),
                    "the pending members told why",
                )
                # Within the grace period nothing is deleted, however many reviews run.
                await cycles_pass(port)
                assert api.request_count("delete", "pods") == 0
                assert len(bound(api)) == 2
                clock.offset += 61.0
                await eventually(
                    lambda: (
                        api.get_pod("default", "train-0") is None
                        and api.get_pod("default", "train-1") is None
                    ),
                    "the bound members deleted",
                )
                await cycles_pass(port)  # later reviews delete nothing more
            assert api.request_count("delete", "pods") == 2
            assert api.request_count("create", "pods", "binding") == 0
            names = sorted(p["metadata"]["name"] for p in api.pods())
            assert names == ["train-2", "train-3"]  # the pending ones are left alone

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_two_replicas_one_leader_and_a_failover_without_a_double_bind(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            first = running(api, tmp_path, leader=True)
            second = running(api, tmp_path, leader=True)
            first_port = await first.__aenter__()
            first_open, second_open = True, False
            try:
                await eventually(lambda: lease_holder(api) != "", "a leader elected")
                leader = lease_holder(api)
                # The leader renews without reading; a read of the Lease is the standby's.
                reads = api.request_count("get", "leases")
                second_port = await second.__aenter__()
                second_open = True
                await scheduler_watching(api)
                await eventually(
                    lambda: api.request_count("get", "leases") > reads, "the standby tried"
                )
                seed_gang(api, "one", 2)
                await eventually(lambda: len(bound(api, "one")) == 2, "first gang bound")
                # The standby tried for the lease twice more (the second try began after
                # the first had ended) and the leader ran cycles with the gang bound.
                reads = api.request_count("get", "leases")
                await eventually(
                    lambda: api.request_count("get", "leases") >= reads + 2,
                    "the standby tried again",
                )
                await cycles_pass(first_port)
                assert lease_holder(api) == leader  # the first replica kept leading
                assert_one_bind_per_pod(api)
                # The leader stops (releasing the lease); the standby takes over.
                first_open = False
                await first.__aexit__(None, None, None)
                seed_gang(api, "two", 2)
                await eventually(lambda: len(bound(api, "two")) == 2, "second gang bound")
                assert lease_holder(api) not in ("", leader)
                await cycles_pass(second_port)  # no late duplicate bind
            finally:
                if second_open:
                    await second.__aexit__(None, None, None)
                if first_open:
                    await first.__aexit__(None, None, None)
            assert_one_bind_per_pod(api)
            assert api.request_count("create", "pods", "binding") == 4

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_burst_of_a_thousand_pods_binds_with_one_request_each(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator(request_log_size=100_000) as api:
            for i in range(125):
                api.put_node(node_obj(f"n{i:03d}", gpus=8))
            async with running(api, tmp_path):
                await scheduler_watching(api)
                for g in range(125):
                    for m in range(8):
                        api.put_pod(
                            pod_obj(f"g{g:03d}-{m}", gang=f"g{g:03d}", min_member=8, gpus=1)
                        )
                await eventually(lambda: len(bound(api)) == 1000, "all 1,000 bound")
            assert_one_bind_per_pod(api)
            assert api.request_count("create", "pods", "binding") == 1000
            per_node = Counter(p["spec"]["nodeName"] for p in bound(api).values())
            assert len(per_node) == 125 and set(per_node.values()) == {8}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_malformed_annotations_are_reported_and_the_good_gang_binds(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            broken = node_obj("odd", gpus=3)
            broken["metadata"].setdefault("annotations", {})[TOPOLOGY_ANNOTATION] = "{not json"
            api.put_node(broken)
            # min-member that is not a number, on a pod in no gang that cannot fit
            # anywhere (8 GPUs): it stays pending and is told about both.
            api.put_pod(pod_obj("sized", min_member="abc", gpus=8))
            # A device assignment written by a user before binding: never trusted.
            api.put_pod(
                pod_obj("forged", gpus=1, annotations={ASSIGNMENT_ANNOTATION: "0,1,2,3,oops"})
            )
            seed_gang(api, "good", 4)
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "good")) == 4, "the good gang bound")
                await eventually(
                    lambda: (
                        {"InvalidMinMember", "FailedScheduling"} <= warning_reasons(api, "sized")
                    ),
                    "warning events on the malformed min-member",
                )
                await eventually(lambda: "forged" in bound(api), "the forged pod bound")
                forged = bound(api)["forged"]
                # The bind replaced the user's value with the scheduler's assignment.
                assigned = forged["metadata"]["annotations"][ASSIGNMENT_ANNOTATION]
                assert assigned != "0,1,2,3,oops"
                # A broken topology annotation only costs the node its links: its GPUs
                # (from allocatable) still count, and the loop is still running.
                seed_gang(api, "late", 2)
                await eventually(lambda: len(bound(api, "late")) == 2, "a later gang bound")
            assert "sized" not in bound(api)
            assert_one_bind_per_pod(api)

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_malformed_min_member_on_a_pod_bound_at_once_still_gets_a_warning(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", gpus=1))
            api.put_pod(pod_obj("sized", min_member="abc", gpus=1))
            async with running(api, tmp_path):
                await eventually(lambda: "sized" in bound(api), "the pod bound")
                await eventually(
                    lambda: "InvalidMinMember" in warning_reasons(api, "sized"),
                    "a warning event on the malformed min-member",
                )

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
