"""A change of leader keeps the GPU books (docs/security.md, "The signing key").

Two scheduler runners against the API emulator, leader election on one Lease, both with
the default configuration (as `kubectl apply -k deploy/` runs them): the first binds
fractional pods, hands the Lease over, and the second places more. What the device plugin
serves is each pod's written assignment, so no GPU may carry more than 1000 milli of
written assignments: the second leader must know the first one's devices, not infer
them."""

from __future__ import annotations

import asyncio
import base64
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from cache.gpu import (
    ASSIGNMENT_ANNOTATION,
    SIGNATURE_ANNOTATION,
    parse_assignment,
    verify_assignment,
)
from scheduler.kube.runner import run_scheduler
from scheduler.process.config import SchedulerConfig, config_from_mapping
from tests.factories import node_obj, pod_obj
from tests.kubeapi import LEASES, SECRETS, KubeApiEmulator, write_kubeconfig
from tests.waiting import HANG, eventually, free_port

TEST_TIMEOUT = 4 * HANG  # turns a hang into a failure, whatever the speed


def default_config(**overrides: Any) -> SchedulerConfig:
    """Every option at its default (the shipped one), with short timings."""
    return config_from_mapping(
        {
            "http": {"address": "127.0.0.1", "port": free_port()},
            # A lease no slow machine outlasts: the leader hands over by releasing it.
            "leaderElection": {
                "enabled": True,
                "leaseDurationSeconds": 600.0,
                "renewDeadlineSeconds": 400.0,
                "retryPeriodSeconds": 1.0,  # also the release's time limit
            },
            "timeouts": {
                "initialBackoffSeconds": 0.1,
                "maxBackoffSeconds": 0.3,
                "bindTimeoutSeconds": 2.0,
            },
            **overrides,
        }
    )


def written_load(pods: list[Mapping[str, Any]]) -> Counter[tuple[str, int]]:
    """Milli per (node, GPU) of the assignments written on bound pods: what the device
    plugin hands out."""
    load: Counter[tuple[str, int]] = Counter()
    for pod in pods:
        node = pod["spec"].get("nodeName")
        text = (pod["metadata"].get("annotations") or {}).get(ASSIGNMENT_ANNOTATION)
        if node and text:
            for index, milli in parse_assignment(text):
                load[(node, index)] += milli
    return load


def holder(api: KubeApiEmulator) -> str:
    lease = api.get(LEASES, "kube-system", "gang-scheduler") or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def is_bound(api: KubeApiEmulator, *names: str) -> bool:
    return all((api.get_pod("default", n) or {"spec": {}})["spec"].get("nodeName") for n in names)


class Replica:
    """One scheduler process: `run_scheduler` as a task, stopped cleanly (the Lease
    released, as at a rolling update or a drain)."""

    def __init__(self, config: SchedulerConfig, kubeconfig: Path) -> None:
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(
            run_scheduler(config, str(kubeconfig), clock=time.monotonic, stop=self.stop)
        )

    async def end(self) -> None:
        self.stop.set()
        assert await asyncio.wait_for(self.task, HANG) == 0


async def first_binds_then_second_leads(
    api: KubeApiEmulator,
    tmp_path: Path,
    first: SchedulerConfig,
    second: SchedulerConfig,
    *,
    between: Callable[[], None] = lambda: None,
    until: Callable[[], bool] | None = None,
) -> None:
    """Node n, 2 GPUs. The first leader binds `high` (600, higher priority, so first)
    onto one GPU and then `low` (500, created earlier) onto the other. Inferred in
    creation order, `low` would take GPU 0 and `high` GPU 1: the swap that makes a new
    pod of 500 land on the GPU holding 600. The second leader then places `late` (500),
    which fits only beside `low`. `between` runs once the first leader's binds are in,
    before the second replica starts; `until`: what ends the run (default: `late`
    bound)."""
    api.put_node(node_obj("n", gpus=2, vgpu=2000))
    api.put_pod(pod_obj("low", vgpu=500, created="2026-01-01T00:00:00Z"))
    api.put_pod(pod_obj("high", vgpu=600, priority=100, created="2026-01-01T00:01:00Z"))
    kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
    leader = Replica(first, kubeconfig)
    standby: Replica | None = None
    try:
        await eventually(lambda: is_bound(api, "low", "high"), "the first leader's binds")
        old = holder(api)
        between()
        standby = Replica(second, kubeconfig)
        await leader.end()  # releases the Lease: the standby takes it
        await eventually(lambda: holder(api) not in ("", old), "the second leader")
        api.put_pod(pod_obj("late", vgpu=500, created="2026-01-01T00:02:00Z"))
        await eventually(until or (lambda: is_bound(api, "late")), "the second leader's decision")
    finally:
        for replica in (leader, standby):
            if replica is not None and not replica.task.done():
                await replica.end()


@pytest.mark.asyncio
async def test_a_new_leader_does_not_over_commit_the_gpus_the_old_one_assigned(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            await first_binds_then_second_leads(api, tmp_path, default_config(), default_config())
            load = written_load(api.pods())
            assert max(load.values()) <= 1000, dict(load)
            assert sum(load.values()) == 1600

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def key_secret(api: KubeApiEmulator) -> dict[str, Any]:
    secret = api.get(SECRETS, "kube-system", "gang-scheduler-assignment-key")
    assert secret is not None, "the first replica creates the Secret"
    return secret


@pytest.mark.asyncio
async def test_a_rotated_key_still_verifies_what_the_previous_key_signed(tmp_path: Path) -> None:
    """The operator adds key-2 to the Secret and restarts: the new process signs with
    key-2 and still verifies the binds key-1 signed, so it does not over-commit them."""
    rotated = b"the second key, thirty-two bytes"

    async def scenario() -> None:
        async with KubeApiEmulator() as api:

            def rotate() -> None:
                secret = key_secret(api)
                secret["data"]["key-2"] = base64.b64encode(rotated).decode()
                api.put(SECRETS, secret)

            await first_binds_then_second_leads(
                api, tmp_path, default_config(), default_config(), between=rotate
            )
            load = written_load(api.pods())
            assert max(load.values()) <= 1000, dict(load)
            old_key = base64.b64decode(key_secret(api)["data"]["key-1"])
            for name, key in (("high", old_key), ("late", rotated)):
                pod = api.get_pod("default", name)
                assert pod is not None
                annotations = pod["metadata"]["annotations"]
                shares = parse_assignment(annotations[ASSIGNMENT_ANNOTATION])
                signature = annotations[SIGNATURE_ANNOTATION]
                assert verify_assignment(key, pod["metadata"]["uid"], "n", shares, signature)

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_without_a_shared_key_the_new_leader_holds_old_binds_at_their_worst(
    tmp_path: Path,
) -> None:
    """Each replica with a key of its own (no Secret, no keyFile): the second cannot
    verify the first one's binds, so it charges each on every GPU of the node and does
    not place `late` at all, rather than onto a GPU the device plugin still serves."""
    own_key = {"assignmentSigning": {"secretName": "", "keyFile": ""}}

    def late_decided(api: KubeApiEmulator) -> bool:
        pod = api.get_pod("default", "late") or {"spec": {}, "status": {}}
        conditions = (pod.get("status") or {}).get("conditions") or []
        unschedulable = any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in conditions
        )
        return unschedulable or bool(pod["spec"].get("nodeName"))

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            await first_binds_then_second_leads(
                api,
                tmp_path,
                default_config(**own_key),
                default_config(**own_key),
                until=lambda: late_decided(api),
            )
            assert not is_bound(api, "late")
            load = written_load(api.pods())
            assert max(load.values()) <= 1000, dict(load)

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
