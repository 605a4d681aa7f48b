"""`run_scheduler` end to end against the API emulator over real HTTP: informers, the
scheduling loop, the binder, feedback, the HTTP server and shutdown, with short timings.
Each test runs the scheduler as a task, acts on the emulator as a user (or a controller)
would, waits for what the API shows, then stops it with the `stop` event."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cache.cluster import Placement
from cache.gpu import ASSIGNMENT_ANNOTATION
from scheduler.cli.main import main
from scheduler.kube.binder import MemberOutcome
from scheduler.kube.runner import failure_reason, run_scheduler
from scheduler.process.config import SchedulerConfig, config_from_mapping
from scheduler.process.version import version
from tests.conftest import LostLeases
from tests.factories import node_obj, pod_obj
from tests.kubeapi import LEASES, KubeApiEmulator, write_kubeconfig
from tests.waiting import CYCLES, HANG, cycles_pass, eventually, free_port, metric, metric_reaches

# Every test ends within this, even when the scheduler misbehaves: a cap that turns a
# hang into a failure, never a measure of speed (a loaded machine is many times slower).
TEST_TIMEOUT = 4 * HANG
SCHEDULED = 'gang_scheduler_schedule_attempts_total{result="scheduled"}'
UNSCHEDULABLE = 'gang_scheduler_schedule_attempts_total{result="unschedulable"}'


def fast_config(port: int, *, leader: bool = False, debug_port: int = 0) -> SchedulerConfig:
    return config_from_mapping(
        {
            "http": {"address": "127.0.0.1", "port": port, "debugPort": debug_port},
            # A lease no slow machine outlasts (these tests are not about expiry: a
            # leader that stops releases it, and a standby takes it at its next retry).
            "leaderElection": {
                "enabled": leader,
                "leaseDurationSeconds": 600.0,
                "renewDeadlineSeconds": 400.0,
                "retryPeriodSeconds": 1.0,  # also the release's time limit
            },
            "timeouts": {
                "initialBackoffSeconds": 0.1,
                "maxBackoffSeconds": 0.5,
                "bindTimeoutSeconds": 2.0,
            },
            "client": {"qps": 1000, "burst": 1000},
        }
    )


async def start_cli(
    api: KubeApiEmulator, tmp_path: Path, extra_config: str = "", *, stderr: int
) -> asyncio.subprocess.Process:
    """`python -m scheduler.cli.main run` against `api` in a subprocess (leader election off,
    `extra_config` YAML lines appended to the config)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"http: {{address: 127.0.0.1, port: {free_port()}}}\n"
        "leaderElection: {enabled: false}\n" + extra_config
    )
    kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "scheduler.cli.main",
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--config",
        str(config),
        stderr=stderr,
    )


@asynccontextmanager
async def running(
    api: KubeApiEmulator,
    tmp_path: Path,
    *,
    leader: bool = False,
    clock: Callable[[], float] = time.monotonic,
    debug_port: int = 0,
) -> AsyncIterator[int]:
    """Run the scheduler against `api`; yields its HTTP port; stops it on exit and
    checks it ended cleanly (and within a bound: shutdown must not hang)."""
    port = free_port()
    config = fast_config(port, leader=leader, debug_port=debug_port)
    async with running_with(api, tmp_path, config, clock=clock):
        yield port


@asynccontextmanager
async def running_with(
    api: KubeApiEmulator,
    tmp_path: Path,
    config: SchedulerConfig,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[None]:
    """Run the scheduler with `config` against `api`; stops it on exit and checks it
    ended cleanly (and within a bound: shutdown must not hang)."""
    kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
    stop = asyncio.Event()
    task = asyncio.create_task(run_scheduler(config, str(kubeconfig), clock=clock, stop=stop))
    try:
        yield
    finally:
        stop.set()
        code = await asyncio.wait_for(task, HANG)
    assert code == 0


def bound(api: KubeApiEmulator, prefix: str = "") -> dict[str, dict[str, Any]]:
    return {
        p["metadata"]["name"]: p
        for p in api.pods()
        if p["spec"].get("nodeName") and p["metadata"]["name"].startswith(prefix)
    }


def seed_gang(api: KubeApiEmulator, name: str, size: int, created: str = "") -> None:
    for i in range(size):
        extra = {"created": created} if created else {}
        api.put_pod(pod_obj(f"{name}-{i}", gang=name, min_member=size, gpus=1, **extra))


def unschedulable_message(pod: dict[str, Any]) -> str:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message", ""))
    return ""


@pytest.mark.asyncio
async def test_a_gang_of_four_binds_with_one_request_per_pod(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            seed_gang(api, "train", 4)
            # With leader election on: the leader schedules.
            async with running(api, tmp_path, leader=True):
                await eventually(lambda: len(bound(api)) == 4, "all four bound")
            pods = bound(api)
            assert sorted(p["spec"]["nodeName"] for p in pods.values()) == [
                "n0",
                "n1",
                "n2",
                "n3",
            ]
            for pod in pods.values():
                assert pod["metadata"]["annotations"][ASSIGNMENT_ANNOTATION]
            assert api.request_count("create", "pods", "binding") == 4
            assert api.request_count(resource="leases") > 0  # it led before it bound

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_gang_too_big_says_why_then_binds_when_a_node_arrives(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(3):
                api.put_node(node_obj(f"n{i}", gpus=1))
            seed_gang(api, "train", 4)
            async with running(api, tmp_path):

                def all_say_three_of_four() -> bool:
                    return all("3/4" in unschedulable_message(p) for p in api.pods())

                await eventually(all_say_three_of_four, "PodScheduled=False with 3/4")
                assert bound(api) == {}
                assert api.request_count("create", "pods", "binding") == 0
                api.put_node(node_obj("n3", gpus=1))
                await eventually(lambda: len(bound(api)) == 4, "all four bound")
            assert api.request_count("create", "pods", "binding") == 4

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_two_gangs_of_three_quarters_run_one_after_the_other(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            seed_gang(api, "first", 3, created="2026-01-01T00:00:00Z")
            seed_gang(api, "second", 3, created="2026-01-01T00:01:00Z")
            async with running(api, tmp_path) as port:
                await eventually(lambda: len(bound(api, "first")) == 3, "first gang bound")
                # The second gang was tried and found no room; cycles after that had
                # every chance to place part of it.
                await metric_reaches(port, UNSCHEDULABLE, 1, "the second gang tried")
                await cycles_pass(port)
                # No partial reservation: the second gang holds nothing, was never planned.
                assert await metric(port, SCHEDULED) == 1
                assert bound(api, "second") == {}
                for i in range(3):
                    api.delete_pod("default", f"first-{i}")
                await eventually(lambda: len(bound(api, "second")) == 3, "second gang bound")
            assert api.request_count("create", "pods", "binding") == 6

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_failed_bind_leaves_nothing_bound_and_the_gang_binds_later(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            api.bind_delay(0.05)
            api.fail_next_binds(1, status=403, after=2)  # refused: never retried
            seed_gang(api, "train", 4)
            async with running(api, tmp_path):
                # The broken gang's bound members are deleted (onBindFailure: delete).
                await eventually(lambda: len(api.pods()) == 1, "bound members deleted")
                assert bound(api) == {}
                assert api.request_count("create", "pods", "binding") == 4
                # Their controller (this test) recreates them; the gang then binds.
                have = {p["metadata"]["name"] for p in api.pods()}
                for i in range(4):
                    if f"train-{i}" not in have:
                        api.put_pod(pod_obj(f"train-{i}", gang="train", min_member=4, gpus=1))
                await eventually(lambda: len(bound(api)) == 4, "the gang bound on retry")
            assert api.request_count("create", "pods", "binding") == 8

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_the_cycle_counter_counts_passes_of_the_loop_even_with_nothing_to_do(
    tmp_path: Path,
) -> None:
    """The event tests wait on (tests/waiting.py, `cycles_pass`): it rises on the
    loop's tick when nothing changes, and a cycle that a change woke counts as well."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", gpus=1))
            async with running(api, tmp_path) as port:
                await cycles_pass(port, 2)  # idle: the tick alone
                before = await metric(port, CYCLES)
                seed_gang(api, "solo", 1)
                await eventually(lambda: len(bound(api)) == 1, "the pod bound")
                assert await metric(port, CYCLES) > before

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_health_readiness_and_metrics_are_served(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", gpus=1))
            seed_gang(api, "solo", 1)
            debug_port = free_port()
            async with (
                running(api, tmp_path, debug_port=debug_port) as port,
                aiohttp.ClientSession() as http,
            ):

                async def status(path: str, port: int = port) -> tuple[int, str]:
                    async with http.get(f"http://127.0.0.1:{port}{path}") as response:
                        return response.status, await response.text()

                await eventually(lambda: len(bound(api)) == 1, "the pod bound")
                assert await status("/healthz") == (200, "ok\n")
                assert await status("/readyz") == (200, "ok\n")
                code, text = await status("/metrics")
                assert code == 200
                assert 'gang_scheduler_schedule_attempts_total{result="scheduled"} 1.0' in text
                # Gang names only on the loopback debug listener.
                assert (await status("/debug/gangs"))[0] == 404
                code, text = await status("/debug/gangs", debug_port)
                assert code == 200 and '"gangs": []' in text  # bound gangs wait for nothing

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def test_bind_failures_are_labelled_by_cause() -> None:
    def member(status: int, state: str = "failed") -> MemberOutcome:
        return MemberOutcome(Placement("u", "n"), "ns", "p", state, status)  # type: ignore[arg-type]

    assert failure_reason(member(409)) == "conflict"
    assert failure_reason(member(404)) == "not_found"
    assert failure_reason(member(0, "unknown")) == "timeout"
    # No answer in time, then a read showed the pod unbound: still a timeout.
    no_answer = MemberOutcome(Placement("u", "n"), "ns", "p", "failed", 0, "", requests=2)
    assert failure_reason(no_answer) == "timeout"
    assert failure_reason(member(422)) == "rejected"
    assert failure_reason(member(503, "unknown")) == "server_error"
    assert failure_reason(member(429)) == "server_error"


def test_run_with_an_invalid_config_prints_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("binding:\n  onBindFailure: maybe\n")
    assert main(["run", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "binding.onBindFailure" in err


@pytest.mark.asyncio
async def test_the_command_schedules_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n0", gpus=2))
            seed_gang(api, "pair", 2)
            process = await start_cli(api, tmp_path, stderr=asyncio.subprocess.PIPE)
            try:
                await eventually(lambda: len(bound(api)) == 2, "the gang bound")
                process.send_signal(signal.SIGTERM)
                _, err = await asyncio.wait_for(process.communicate(), HANG)
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            assert process.returncode == 0, err.decode()
            # The log says which build started, and why and how it stopped.
            lines = err.decode().splitlines()
            assert f"starting gang-scheduler version={version()}" in lines[0]
            assert any("signal received signal=SIGTERM" in line for line in lines)
            assert any("shutting down binds_in_flight=0" in line for line in lines)
            assert "stopped exit_code=0" in lines[-1]

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_gang_found_partial_at_start_is_completed(tmp_path: Path) -> None:
    """A crash between binds left 2 of 4 members bound: the new leader binds the other
    two (the rest fits), without touching the bound ones."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=1))
            for i in range(4):
                node = f"n{i}" if i < 2 else ""
                api.put_pod(
                    pod_obj(f"train-{i}", gang="train", min_member=4, gpus=1, node_name=node)
                )
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api)) == 4, "the rest of the gang bound")
            assert api.request_count("create", "pods", "binding") == 2
            assert api.request_count("delete", "pods") == 0
            assert {bound(api)[f"train-{i}"]["spec"]["nodeName"] for i in range(4)} == {
                "n0",
                "n1",
                "n2",
                "n3",
            }

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def steal_the_lease(api: KubeApiEmulator) -> None:
    """Another holder writes the Lease (as a replica that took it over would)."""
    (lease,) = api.objects(LEASES)
    lease["spec"]["holderIdentity"] = "another-replica"
    api.put(LEASES, lease)


def lease_held(api: KubeApiEmulator) -> bool:
    return any(lease.get("spec", {}).get("holderIdentity") for lease in api.objects(LEASES))


@pytest.mark.asyncio
async def test_a_lost_lease_ends_the_scheduler_through_its_on_lost_action(
    tmp_path: Path, lost_leases: LostLeases
) -> None:
    """The runner takes the action as a parameter: a lost lease runs it, and the run ends
    with status 1 (the test process lives on)."""
    lost: list[str] = []
    async with KubeApiEmulator() as api:
        kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
        config = fast_config(free_port(), leader=True)
        task = asyncio.create_task(
            run_scheduler(
                config,
                str(kubeconfig),
                stop=asyncio.Event(),
                on_lease_lost=lambda: lost.append("x"),
            )
        )
        await eventually(lambda: lease_held(api), "leading")
        steal_the_lease(api)
        assert await asyncio.wait_for(task, HANG) == 1
    assert lost == ["x"] and lost_leases.count == 0


@pytest.mark.asyncio
async def test_in_the_tests_a_lost_lease_fails_the_test_not_the_run(
    tmp_path: Path, lost_leases: LostLeases
) -> None:
    """The default action (exit the process) reaches the process through one seam, which
    tests/conftest.py replaces: the scheduler run in this test loses its lease with the
    default action, and pytest is still here to count it."""
    async with KubeApiEmulator() as api:
        kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
        config = fast_config(free_port(), leader=True)
        task = asyncio.create_task(run_scheduler(config, str(kubeconfig), stop=asyncio.Event()))
        await eventually(lambda: lease_held(api), "leading")
        steal_the_lease(api)
        assert await asyncio.wait_for(task, HANG) == 1
    assert lost_leases.count == 1
    lost_leases.expected = True  # this test is about the loss: it does not fail
