"""Every API call has a time limit and a stated retry policy (scheduler/kube/call_policy.py,
docs/kubernetes.md "Timeouts and retries"), against an API that black-holes one kind of
request: it reads the request and never answers.

What is asserted is what happened (requests the emulator received, events and
conditions written, pods bound), never how fast: the limits are short only so the
tests are."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from scheduler.kube.call_policy import CallPolicy
from scheduler.kube.client import KubeClient, never, transient
from scheduler.process.config import SchedulerConfig
from tests.factories import node_obj, pod_obj, podgroup_obj
from tests.kube.test_preemption import gang
from tests.kube.test_runner import TEST_TIMEOUT, bound, fast_config, running_with
from tests.kubeapi import KubeApiEmulator, api_client
from tests.kubeapi.resources import EVENTS, PODGROUPS
from tests.signed import with_key
from tests.waiting import eventually, free_port

ATTEMPTS = 3
POLICY = CallPolicy(
    timeout_seconds=0.3, attempts=ATTEMPTS, initial_backoff_seconds=0.01, max_backoff_seconds=0.02
)


def short_limits(config: SchedulerConfig) -> SchedulerConfig:
    client = dataclasses.replace(
        config.client,
        request_timeout_seconds=POLICY.timeout_seconds,
        retry_attempts=POLICY.attempts,
        retry_backoff_seconds=POLICY.initial_backoff_seconds,
        max_retry_backoff_seconds=POLICY.max_backoff_seconds,
    )
    return dataclasses.replace(config, client=client)


async def ends_by_itself(call: Any, bound_seconds: float = 30.0) -> BaseException | None:
    """Run `call` and return what it raised (None: it returned). It must end on its own:
    the test only guards against a call that never ends (the failure under test)."""
    task = asyncio.ensure_future(call)
    done, _ = await asyncio.wait({task}, timeout=bound_seconds)
    if task not in done:
        task.cancel()
        raise AssertionError("the call never ended: no time limit")
    return task.exception()


@pytest.mark.asyncio
async def test_a_black_holed_call_times_out_and_is_retried_only_where_safe() -> None:
    async with KubeApiEmulator() as api:
        api.put_pod(pod_obj("p"))
        api.black_hole("patch", "pods", "status")
        path = "/api/v1/namespaces/default/pods/p/status"
        body = {"status": {"conditions": []}}
        async with KubeClient(await api_client(api.base_url), policy=POLICY) as client:
            for lean in (True, False):  # the lean write path and aiohttp's
                client.lean_writes = lean
                api.reset_request_counts()
                # No limit given by the caller: the policy's applies.
                error = await ends_by_itself(client.request_json("PATCH", path, body=body))
                assert isinstance(error, TimeoutError)
                assert api.request_count("patch", "pods", "status") == 1
                # A call that may be repeated: tried `attempts` times, then the failure.
                error = await ends_by_itself(
                    client.call("PATCH", path, body=body, retry_on=transient)
                )
                assert isinstance(error, TimeoutError)
                assert api.request_count("patch", "pods", "status") == 1 + ATTEMPTS
                # One that may not: sent once.
                error = await ends_by_itself(client.call("PATCH", path, body=body, retry_on=never))
                assert isinstance(error, TimeoutError)
                assert api.request_count("patch", "pods", "status") == 2 + ATTEMPTS
            # Reads too.
            api.black_hole("get", "pods")
            error = await ends_by_itself(
                client.call("GET", "/api/v1/namespaces/default/pods/p", retry_on=transient)
            )
            assert isinstance(error, TimeoutError)
            assert api.request_count("get", "pods") == ATTEMPTS
            # Healed: the next call is answered.
            api.lift_black_holes()
            found = await client.call(
                "GET", "/api/v1/namespaces/default/pods/p", retry_on=transient
            )
            assert found["metadata"]["name"] == "p"


def events_with(api: KubeApiEmulator, reason: str) -> list[dict[str, Any]]:
    return [e for e in api.objects(EVENTS) if e.get("reason") == reason]


def condition(api: KubeApiEmulator, name: str) -> str:
    pod = api.get_pod("default", name) or {}
    for found in pod.get("status", {}).get("conditions", []):
        if found.get("type") == "PodScheduled":
            return f"{found.get('status')}/{found.get('reason')}"
    return ""


@pytest.mark.asyncio
async def test_black_holed_evictions_drop_the_preemption_and_the_rest_flows(
    tmp_path: Path,
) -> None:
    """Before: an eviction was sent with no time limit, so one never answered stalled
    its preemption for good (the preemptor waited forever, its room held). Now it times
    out, is retried per policy (a uid-guarded eviction may be repeated), the preemption
    is dropped with a PreemptionRefused event naming the timeout, and meanwhile other
    gangs bind and other feedback is written. Once evictions are answered again, the
    preemption goes through."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("gpu", gpus=8))
            api.put_node(node_obj("cpu", gpus=0))
            for pod in gang("low", 1, node="gpu"):
                api.put_pod(pod)
            api.black_hole("create", "pods", "eviction")
            config = short_limits(with_key(fast_config(free_port()), tmp_path))
            # A dropped preemption is tried again at the latest after this (else on a
            # change in the cluster).
            timeouts = dataclasses.replace(config.timeouts, max_unschedulable_seconds=0.5)
            config = dataclasses.replace(config, timeouts=timeouts)
            async with running_with(api, tmp_path, config):
                for pod in gang("high", 10):
                    api.put_pod(pod)
                api.put_pod(pod_obj("side-0", gang="side", min_member=1, gpus=0))
                # Lower than `low`: it waits and is told so, without preempting.
                api.put_pod(pod_obj("huge-0", gang="huge", min_member=1, gpus=16))

                def refused() -> list[dict[str, Any]]:
                    return [
                        e
                        for e in events_with(api, "PreemptionRefused")
                        if "TimeoutError" in str(e.get("message"))
                    ]

                await eventually(lambda: bool(refused()), "the preemption dropped on a timeout")
                evictions = [r for r in api.request_log if r.subresource == "eviction"]
                # Retried per policy: the same eviction `attempts` times, all unanswered.
                assert len(evictions) >= ATTEMPTS
                assert len({(r.namespace, r.name) for r in evictions[:ATTEMPTS]}) == 1
                assert all(r.status == 0 for r in evictions)
                # Meanwhile: another gang bound, another gang told why it waits.
                await eventually(lambda: "side-0" in bound(api), "the side gang bound")
                await eventually(
                    lambda: condition(api, "huge-0") == "False/Unschedulable", "huge told"
                )
                assert len(bound(api, "low-")) == 2  # nothing evicted
                api.lift_black_holes()
                await eventually(lambda: len(bound(api, "high-")) == 2, "high bound at last")
                assert not bound(api, "low-")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT * 2)


@pytest.mark.asyncio
async def test_black_holed_event_writes_do_not_stop_other_feedback(tmp_path: Path) -> None:
    """Before: the feedback writers (4) sent events with no time limit, so four event
    writes never answered stopped every later condition and status write for good.
    Now each times out (once: a create is not repeated) and the rest is written."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            api.black_hole("create", "events")
            config = short_limits(fast_config(free_port()))
            async with running_with(api, tmp_path, config):
                # Each bound pod writes a Scheduled event: more than the four writers.
                for name in ("a", "b", "c", "d"):
                    api.put(PODGROUPS, podgroup_obj(name, 2))
                    for i in range(2):
                        api.put_pod(pod_obj(f"{name}-{i}", gang=name, gpus=1))
                await eventually(
                    lambda: api.request_count("create", "events") >= 8, "events attempted"
                )
                api.put_pod(pod_obj("huge-0", gang="huge", min_member=1, gpus=16))
                await eventually(
                    lambda: condition(api, "huge-0") == "False/Unschedulable",
                    "the condition written after the black-holed events",
                )

                def phases() -> set[str]:
                    return {
                        str((g.get("status") or {}).get("phase")) for g in api.objects(PODGROUPS)
                    }

                await eventually(lambda: phases() == {"Scheduled"}, "PodGroup statuses written")
                assert len(bound(api)) == 8
                assert not api.objects(EVENTS)

    await asyncio.wait_for(scenario(), TEST_TIMEOUT * 2)
