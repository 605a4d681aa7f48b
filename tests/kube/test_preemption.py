"""Priority preemption end to end against the API emulator, through the real client
(scheduler/kube/preemption.py): victims evicted whole through pods/eviction, the
preemptor's nodes nominated, events on both sides, and a PodDisruptionBudget that
refuses keeping its gang (docs/quotas.md)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from scheduler.process.config import PreemptionConfig, config_from_mapping
from tests.cache.test_quota import quota_obj
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import (
    TEST_TIMEOUT,
    UNSCHEDULABLE,
    bound,
    fast_config,
    running_with,
)
from tests.kubeapi import ELASTIC_QUOTAS, KubeApiEmulator
from tests.kubeapi.resources import EVENTS, POD_DISRUPTION_BUDGETS
from tests.signed import signed, with_key
from tests.waiting import cycles_pass, eventually, free_port, metric_reaches


def gang(
    name: str, priority: int, node: str = "", namespace: str = "default"
) -> list[dict[str, Any]]:
    """A gang of two; with `node`, bound there by the scheduler (signed with TEST_KEY)
    before the test starts it: only such a gang may be evicted (cache/ownership.py)."""
    pods = [
        pod_obj(
            f"{name}-{i}",
            namespace=namespace,
            gang=name,
            min_member=2,
            gpus=4,
            priority=priority,
            node_name=node,
            phase="Running" if node else "Pending",
        )
        for i in range(2)
    ]
    return [signed(pod) for pod in pods] if node else pods


def team_b_borrows_from_a(api: KubeApiEmulator) -> None:
    """Two 8-GPU nodes, teams a and b each guaranteed 8 GPUs (max 16); b runs gang "own"
    (within its min, on n0) and gang "borrow" (a's idle guarantee, on n1), priority 50,
    both bound by the scheduler."""
    api.put_node(node_obj("n0", gpus=8))
    api.put_node(node_obj("n1", gpus=8))
    for team in ("a", "b"):
        gpus = {"nvidia.com/gpu": 8}
        api.put(ELASTIC_QUOTAS, quota_obj(team, {"nvidia.com/gpu": 16}, gpus))
    for pod in [
        *gang("own", 50, node="n0", namespace="b"),
        *gang("borrow", 50, node="n1", namespace="b"),
    ]:
        api.put_pod(pod)


async def sample(port: int, line_prefix: str) -> float:
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        text = await response.text()
    for line in text.splitlines():
        if line.startswith(line_prefix + " "):
            return float(line.removeprefix(line_prefix + " "))
    return 0.0


def events(api: KubeApiEmulator, reason: str) -> dict[str, str]:
    return {
        e["involvedObject"]["name"]: e["message"]
        for e in api.objects(EVENTS)
        if e.get("reason") == reason
    }


@pytest.mark.asyncio
async def test_a_higher_gang_evicts_a_lower_one_whole_and_takes_its_nominated_node(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            for pod in gang("low", 1, node="n"):
                api.put_pod(pod)
            port = free_port()
            async with running_with(api, tmp_path, with_key(fast_config(port), tmp_path)):
                for pod in gang("high", 10):
                    api.put_pod(pod)
                await eventually(lambda: len(bound(api, "high-")) == 2, "high bound")
                assert not bound(api, "low-")
                await eventually(lambda: len(events(api, "Preempted")) == 2, "victim events")
                evicted = 'gang_scheduler_preemptions_total{result="evicted"}'
                assert await sample(port, evicted) == 1
                assert await sample(port, "gang_scheduler_preempted_gangs_total") == 1
            assert api.request_count("create", "pods", "eviction") == 2
            preempted = events(api, "Preempted")
            assert set(preempted) == {"low-0", "low-1"}
            assert "Preempted by gang default/high (priority 10)" in preempted["low-0"]
            assert set(events(api, "Preempting")) == {"high-0", "high-1"}
            for name in ("high-0", "high-1"):
                pod = api.get_pod("default", name) or {}
                assert pod["status"].get("nominatedNodeName") == "n"
                assert pod["spec"]["nodeName"] == "n"

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_budget_that_refuses_keeps_the_victim_and_the_preemptor_waits(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            for pod in gang("low", 1, node="n"):
                api.put_pod(pod)
            api.put(
                POD_DISRUPTION_BUDGETS,
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": "low", "namespace": "default"},
                    "spec": {
                        "minAvailable": 2,
                        "selector": {"matchLabels": {"scheduling.x-k8s.io/pod-group": "low"}},
                    },
                },
            )
            port = free_port()
            async with running_with(api, tmp_path, with_key(fast_config(port), tmp_path)):
                for pod in gang("high", 10):
                    api.put_pod(pod)
                await eventually(
                    lambda: api.request_count("create", "pods", "eviction") >= 1, "eviction"
                )
                # The refusal is taken (the decision dropped), and cycles after it ran.
                refusals = 'gang_scheduler_preemptions_total{result="refused"}'
                await metric_reaches(port, refusals, 1, "the refusal counted")
                await cycles_pass(port)
                assert len(bound(api, "low-")) == 2  # the budget held
                assert not bound(api, "high-")
                assert not events(api, "Preempted")
                await eventually(lambda: len(events(api, "PreemptionRefused")) == 2, "refusal told")
                refused = events(api, "PreemptionRefused")["high-0"]
                assert "eviction of default/low-0 a PodDisruptionBudget refuses" in refused
                assert await sample(port, refusals) == 1
                assert await sample(port, "gang_scheduler_preempted_gangs_total") == 0
                for name in ("high-0", "high-1"):
                    pod = api.get_pod("default", name) or {}
                    assert "nominatedNodeName" not in pod["status"]
            # Refused, the gang is spared a while: not retried in a loop.
            assert api.request_count("create", "pods", "eviction") == 1

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_with_preemption_off_priority_only_orders_the_queue(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            for pod in gang("low", 1, node="n"):
                api.put_pod(pod)
            for pod in gang("high", 10):
                api.put_pod(pod)
            port = free_port()
            # With the key that signed the low gang: it could be evicted, were the switch on.
            config = with_key(fast_config(port), tmp_path)
            config = dataclasses.replace(config, preemption=PreemptionConfig(enabled=False))
            async with running_with(api, tmp_path, config):
                await eventually(
                    lambda: api.request_count("create", "events") >= 1, "high told it waits"
                )
                # Its attempt found no room, and cycles after it ran: with preemption
                # on, that attempt would have evicted the low gang.
                await metric_reaches(port, UNSCHEDULABLE, 1, "the high gang tried")
                await cycles_pass(port)
            assert api.request_count("create", "pods", "eviction") == 0
            assert len(bound(api, "low-")) == 2 and not bound(api, "high-")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def test_the_switch_is_read_from_the_configuration() -> None:
    assert config_from_mapping(None).preemption.enabled
    assert not config_from_mapping({"preemption": {"enabled": False}}).preemption.enabled


@pytest.mark.asyncio
async def test_a_team_under_its_min_reclaims_a_borrowing_gang_through_the_eviction_api(
    tmp_path: Path,
) -> None:
    """Team b borrows team a's idle guarantee with a gang of a higher priority than a's;
    a's gang, within a's min, takes it back: b's borrowing gang is evicted whole (b keeps
    its min), a's gang is nominated and bound, and the victims are told it was a reclaim."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            team_b_borrows_from_a(api)
            port = free_port()
            async with running_with(api, tmp_path, with_key(fast_config(port), tmp_path)):
                for pod in gang("job", 1, namespace="a"):
                    api.put_pod(pod)
                await eventually(lambda: len(bound(api, "job-")) == 2, "a's gang bound")
                await eventually(lambda: len(events(api, "Preempted")) == 2, "victim events")
                evicted = 'gang_scheduler_preemptions_total{result="evicted"}'
                assert await sample(port, evicted) == 1
            assert api.request_count("create", "pods", "eviction") == 2
            assert len(bound(api, "own-")) == 2  # b keeps its min
            assert not bound(api, "borrow-")
            preempted = events(api, "Preempted")
            assert set(preempted) == {"borrow-0", "borrow-1"}
            assert "Preempted by gang a/job (reclaim)" in preempted["borrow-0"]
            assert "borrows beyond its quota's min" in preempted["borrow-0"]
            assert "reclaims the min guaranteed to quota a" in events(api, "Preempting")["job-0"]
            for name in ("job-0", "job-1"):
                pod = api.get_pod("a", name) or {}
                assert pod["status"].get("nominatedNodeName") == "n1"
                assert pod["spec"]["nodeName"] == "n1"

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


def test_reclaim_is_read_from_the_configuration() -> None:
    assert config_from_mapping(None).preemption.reclaim
    assert not config_from_mapping({"preemption": {"reclaim": False}}).preemption.reclaim


@pytest.mark.asyncio
async def test_a_pinned_member_in_each_borrowing_gang_does_not_stop_the_reclaim(
    tmp_path: Path,
) -> None:
    """The attack on a lender's min end to end: team b pins one tiny pod (its gang's
    label, this scheduler's name, `spec.nodeName` at create) beside each of its gangs.
    Team a's gang within a's min still takes the loan back: the members the scheduler
    bound are evicted, the pinned pods are left alone (docs/security.md)."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            team_b_borrows_from_a(api)
            for name, node in (("own", "n0"), ("borrow", "n1")):
                shield = pod_obj(
                    f"{name}-shield",
                    namespace="b",
                    gang=name,
                    min_member=2,
                    cpu="100m",
                    priority=50,
                    node_name=node,
                    phase="Running",
                )
                api.put_pod(shield)
            port = free_port()
            async with running_with(api, tmp_path, with_key(fast_config(port), tmp_path)):
                for pod in gang("job", 1, namespace="a"):
                    api.put_pod(pod)
                await eventually(lambda: len(bound(api, "job-")) == 2, "a's gang bound")
            assert api.request_count("create", "pods", "eviction") == 2
            assert set(events(api, "Preempted")) in ({"own-0", "own-1"}, {"borrow-0", "borrow-1"})
            for name in ("own-shield", "borrow-shield"):
                assert api.get_pod("b", name) is not None, f"{name} was removed"

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
