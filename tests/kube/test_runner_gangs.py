"""Gangs never get lost or stuck, end to end against the API emulator (issue 10):
scheduling gates, head-of-line requeues."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client

from scheduler.kube.client import create_client
from scheduler.kube.runner import SchedulerRun
from tests.factories import node_obj, pod_obj, podgroup_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound, fast_config, running
from tests.kube.test_runner_faults import SteppedClock, run_past_the_grace
from tests.kubeapi import PODGROUPS, KubeApiEmulator, api_client, write_kubeconfig
from tests.signed import signed
from tests.waiting import HANG, cycles_pass, eventually, eventually_async, free_port, metric

pytestmark = pytest.mark.asyncio


def condition(pod: dict[str, Any] | None) -> dict[str, Any]:
    for entry in (pod or {}).get("status", {}).get("conditions", []):
        if entry.get("type") == "PodScheduled":
            return dict(entry)
    return {}


async def test_a_gated_member_holds_its_gang_without_a_bind_until_the_gate_goes(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=4))
            api.put_pod(pod_obj("g-0", gang="g", min_member=2, gpus=1))
            gated = pod_obj("g-1", gang="g", min_member=2, gpus=1)
            gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
            api.put_pod(gated)
            async with running(api, tmp_path):
                await eventually(
                    lambda: (
                        condition(api.get_pod("default", "g-1")).get("reason") == "SchedulingGated"
                    ),
                    "the gated pod says it is gated",
                )
                assert condition(api.get_pod("default", "g-1"))["message"] == (
                    "Scheduling is blocked due to non-empty scheduling gates: example.com/quota"
                )
                held = condition(api.get_pod("default", "g-0"))
                assert held["reason"] == "Unschedulable"
                assert "waits for scheduling gates to be removed" in held["message"]
                assert api.request_count("create", "pods", "binding") == 0
                # The gate's owner removes it: the whole gang binds, once.
                del gated["spec"]["schedulingGates"]
                api.put_pod(gated)
                await eventually(lambda: len(bound(api)) == 2, "the gang bound")
            assert api.request_count("create", "pods", "binding") == 2
            assert api.request_count("delete", "pods") == 0

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


PODS_CACHED = 'gang_scheduler_cache_size{type="pods"}'


async def metric_equals(port: int, sample: str, value: float) -> bool:
    return await metric(port, sample) == value


async def attempts(port: int, result: str) -> float:
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    prefix = f'gang_scheduler_schedule_attempts_total{{result="{result}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.removeprefix(prefix))
    return 0.0


async def test_unschedulable_pods_are_not_retried_for_their_own_conditions_or_unrelated_deletes(
    tmp_path: Path,
) -> None:
    impossible = 60

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            api.put_pod(pod_obj("cpu-job", cpu="4", node_name="n", phase="Running"))
            for i in range(impossible):
                api.put_pod(pod_obj(f"huge-{i}", gpus=16))
            clock = SteppedClock()
            async with running(api, tmp_path, clock=clock) as port:
                await eventually(
                    lambda: all(
                        condition(api.get_pod("default", f"huge-{i}")).get("reason")
                        == "Unschedulable"
                        for i in range(impossible)
                    ),
                    "every impossible pod told why",
                )
                api.delete_pod("default", "cpu-job")  # frees CPUs no huge pod can use
                await eventually_async(
                    lambda: metric_equals(port, PODS_CACHED, impossible), "the delete seen"
                )
                # Past the longest backoff (0.5 s), then cycles: a pod requeued by the
                # delete would be due, and retried.
                clock.offset += 1.0
                await cycles_pass(port)
                api.put_pod(pod_obj("fits", gpus=2, created="2026-01-01T00:01:00Z"))
                await eventually(lambda: "fits" in bound(api), "the fitting pod bound")
                assert await attempts(port, "unschedulable") == impossible
                assert await attempts(port, "scheduled") == 1

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_a_partial_gang_with_no_pending_member_is_deleted_after_the_grace(
    tmp_path: Path,
) -> None:
    """Two of four members bound, the other two never created (or deleted and not yet
    recreated): found partial on taking over, and past the grace its bound members go.
    A gang with a member that ran to completion, and a gang of another scheduler, are
    left alone."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(6):
                api.put_node(node_obj(f"n{i}", gpus=1))
            for i in range(2):
                # Bound by this scheduler (signed) before it restarted.
                api.put_pod(
                    signed(
                        pod_obj(f"train-{i}", gang="train", min_member=4, gpus=1, node_name=f"n{i}")
                    )
                )
            api.put_pod(
                pod_obj(
                    "done-0", gang="done", min_member=2, gpus=1, node_name="n2", phase="Succeeded"
                )
            )
            api.put_pod(pod_obj("done-1", gang="done", min_member=2, gpus=1, node_name="n3"))
            for i in (4, 5):
                api.put_pod(
                    pod_obj(
                        f"theirs-{i}",
                        gang="theirs",
                        min_member=4,
                        gpus=1,
                        node_name=f"n{i}",
                        scheduler="other-scheduler",
                    )
                )
            await run_past_the_grace(
                api,
                tmp_path,
                lambda: (
                    api.get_pod("default", "train-0") is None
                    and api.get_pod("default", "train-1") is None
                ),
                "the bound members of the partial gang deleted",
            )
            assert api.request_count("delete", "pods") == 2
            left = sorted(p["metadata"]["name"] for p in api.pods())
            assert left == ["done-0", "done-1", "theirs-4", "theirs-5"]

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def per_object_state(run: SchedulerRun) -> dict[str, int]:
    """The size of everything the scheduler keeps per pod, gang, PodGroup or node."""
    core, recorder, index = run.core, run.recorder, run.core.index
    return {
        "cache pods": len(list(core.cache.pods())),
        "cache podgroups": len(core.cache.podgroups()),
        "cache assumed": len(core.cache.assumed()),
        "cache bound by us": len(core.cache._bound_by_us),
        "index members": len(index._members),
        "index pods": len(index._gang_of),
        "index podgroups": len(index._podgroups),
        "index gangs": len(index._gangs),
        "index partial": len(index._partial),
        "core gangs": len(core.gangs),
        "core partial": len(core.partial_gangs),
        "queue": len(core.queue),
        "partial rule": len(run.partial._since) + len(run.partial._placeable),
        "waiting shown": len(run._waiting_shown),
        "recorder gangs": len(recorder._gangs),
        "recorder conditions": len(recorder._conditions),
        "recorder published": len(recorder._published),
        "recorder podgroup status": len(recorder._podgroup_status),
        "recorder podgroup uids": len(recorder._podgroup_uids),
        "writes queued": len(run.writes),
    }


async def test_everything_kept_per_object_is_freed_when_the_objects_go(tmp_path: Path) -> None:
    gangs = 15

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig")
            kube = await create_client(str(kubeconfig), qps=1000, burst=1000)
            run = SchedulerRun(fast_config(free_port()), kube)
            stop = asyncio.Event()
            task = asyncio.create_task(run.run(stop))
            try:
                await run.informers.wait_synced()
                await cycles_pass(run.metrics.registry, 1)  # the first cycles' state
                baseline = per_object_state(run)
                for i in range(gangs):
                    # Gangs that cannot fit (16 GPUs a member), with a PodGroup each:
                    # conditions, FailedScheduling events and PodGroup statuses.
                    api.put(PODGROUPS, podgroup_obj(f"big-{i}", 2))
                    for j in range(2):
                        api.put_pod(pod_obj(f"big-{i}-{j}", gang=f"big-{i}", gpus=16))
                    # A gang waiting for a member, whose PodGroup is wrong (an event on it).
                    bad = podgroup_obj(f"bad-{i}", 3)
                    bad["spec"]["scheduleTimeoutSeconds"] = -1
                    api.put(PODGROUPS, bad)
                    api.put_pod(pod_obj(f"bad-{i}-0", gang=f"bad-{i}"))
                # And a gang that binds.
                api.put(PODGROUPS, podgroup_obj("fits", 2))
                for j in range(2):
                    api.put_pod(pod_obj(f"fits-{j}", gang="fits", gpus=1))
                await eventually(lambda: len(bound(api)) == 2, "the fitting gang bound")
                await eventually(
                    lambda: len(run.recorder._podgroup_status) >= gangs,
                    "PodGroup statuses written",
                )
                await run.writes.drain()
                grown = per_object_state(run)
                assert grown["recorder podgroup status"] > baseline["recorder podgroup status"]
                assert grown["cache bound by us"] == 2  # the fitting gang's binds
                for pod in api.pods():
                    api.delete_pod("default", pod["metadata"]["name"])
                for group in api.objects(PODGROUPS):
                    api.delete(PODGROUPS, "default", group["metadata"]["name"])
                await eventually(
                    lambda: not list(run.core.cache.pods()) and not run.core.cache.podgroups(),
                    "the deletes seen",
                )
                await cycles_pass(run.metrics.registry)  # cycles that saw them gone
                await run.writes.drain()
                assert per_object_state(run) == baseline
            finally:
                stop.set()
                assert await asyncio.wait_for(task, HANG) == 0
                await kube.close()

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_a_deleted_pod_held_by_a_finalizer_keeps_its_gpus_until_it_is_gone(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api, await api_client(api.base_url) as http:
            core = client.CoreV1Api(http)
            api.put_node(node_obj("n", gpus=4))
            old = pod_obj("old", gpus=4, node_name="n", phase="Running")
            old["metadata"]["finalizers"] = ["example.com/cleanup"]
            api.put_pod(old)
            async with running(api, tmp_path) as port:
                await core.delete_namespaced_pod("old", "default")
                api.put_pod(pod_obj("g-0", gang="g", min_member=2, gpus=2))
                api.put_pod(pod_obj("g-1", gang="g", min_member=2, gpus=2))
                await eventually(
                    lambda: (
                        condition(api.get_pod("default", "g-0")).get("reason") == "Unschedulable"
                    ),
                    "the gang told it does not fit",
                )
                await cycles_pass(port)  # cycles that knew "old" was going: no bind
                assert api.request_count("create", "pods", "binding") == 0
                await core.patch_namespaced_pod(
                    "old",
                    "default",
                    {"metadata": {"finalizers": None}},
                    _content_type="application/merge-patch+json",
                )
                await eventually(lambda: len(bound(api)) == 2, "the gang bound once it is gone")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_a_gang_waits_for_a_new_node_to_be_ready(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api, await api_client(api.base_url) as http:
            core = client.CoreV1Api(http)
            node = node_obj("new", gpus=2)
            del node["metadata"]["resourceVersion"]
            node["spec"] = {}
            await core.create_node(node)  # admitted with the not-ready taint
            api.put_pod(pod_obj("g-0", gang="g", min_member=2, gpus=1))
            api.put_pod(pod_obj("g-1", gang="g", min_member=2, gpus=1))
            async with running(api, tmp_path):
                await eventually(
                    lambda: (
                        "node.kubernetes.io/not-ready"
                        in condition(api.get_pod("default", "g-0")).get("message", "")
                    ),
                    "the gang told about the taint",
                )
                assert api.request_count("create", "pods", "binding") == 0
                # The kubelet reports Ready; the node lifecycle controller lifts the taint.
                ready = api.get_node("new")
                assert ready is not None
                ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
                await core.replace_node_status("new", ready)
                await eventually(lambda: len(bound(api)) == 2, "the gang bound on the node")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
