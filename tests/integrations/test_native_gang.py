"""Kubernetes 1.36's own gang API: pods naming a PodGroup of scheduling.k8s.io/v1alpha2
in spec.schedulingGroup are gangs of its spec.schedulingPolicy.gang.minCount."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cache.cluster import EventType
from cache.native_gang import NATIVE_GROUP, native_podgroup_from_api
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from tests.factories import node_obj
from tests.integrations.controllers import native_gang_pod, native_podgroup_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import NATIVE_PODGROUPS, KubeApiEmulator
from tests.waiting import eventually

ADDED = EventType.ADDED


def core_with(pods: list[dict[str, Any]], *groups: dict[str, Any]) -> SchedulingCore:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=8), 0)
    for group in groups:
        core.apply_gang_group(native_podgroup_from_api, ADDED, group, 0)
    for pod in pods:
        core.apply_pod(ADDED, pod, 0)
    return core


def test_min_count_is_the_gang_size() -> None:
    pods = [native_gang_pod("train", i) for i in range(2)]
    core = core_with(pods, native_podgroup_obj("train", 3))
    gang = core.index.assemble()[0].gangs["default/train"]
    assert (gang.min_member, gang.size_source, gang.ready) == (3, "podgroup", False)
    assert gang.problems == []  # the pods are no longer refused for spec.schedulingGroup
    core.apply_pod(ADDED, native_gang_pod("train", 2), 1)
    attempt = core.schedule_next(1)
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert len(attempt.result.placements) == 3


def test_the_basic_policy_places_each_member_as_it_fits() -> None:
    core = core_with([native_gang_pod("web", 0)], native_podgroup_obj("web", None))
    gang = core.index.assemble()[0].gangs["default/web"]
    assert (gang.min_member, gang.ready) == (1, True)


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ({"gang": {"minCount": 0}}, "gang.minCount must be a positive 32-bit integer, got 0"),
        ({"gang": {}}, "gang.minCount must be a positive 32-bit integer, got None"),
        ({"gang": {"minCount": 2}, "basic": {}}, "sets both gang and basic"),
        ({}, "sets neither gang nor basic"),
    ],
)
def test_a_policy_the_api_would_refuse_is_a_problem(policy: dict[str, Any], problem: str) -> None:
    obj = native_podgroup_obj("g", 2)
    obj["spec"]["schedulingPolicy"] = policy
    group = native_podgroup_from_api(obj)
    assert group.api == NATIVE_GROUP and group.min_member is None
    assert any(problem in text for text in group.problems), group.problems


def condition(api: KubeApiEmulator) -> tuple[str, str, str] | None:
    """The PodGroupScheduled condition of default/train, as the API holds it."""
    group = api.get(NATIVE_PODGROUPS, "default", "train") or {}
    for cond in group.get("status", {}).get("conditions", []):
        if cond["type"] == "PodGroupScheduled":
            assert cond["lastTransitionTime"].endswith("Z")
            return (cond["status"], cond["reason"], cond["message"])
    return None


@pytest.mark.asyncio
async def test_a_native_gang_binds_whole_over_http(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            api.put(NATIVE_PODGROUPS, native_podgroup_obj("train", 3))
            for i in range(2):
                api.put_pod(native_gang_pod("train", i))
            async with running(api, tmp_path):
                # The message says why, as the members' conditions do.
                waiting = "0/3 members scheduled: waiting for 1 more member: 2/3 exist"
                await eventually(
                    lambda: condition(api) == ("False", "Unschedulable", waiting),
                    "the PodGroup says it is not scheduled, and why",
                )
                assert bound(api) == {}
                api.put_pod(native_gang_pod("train", 2))
                await eventually(lambda: len(bound(api)) == 3, "the whole gang bound")
                await eventually(
                    lambda: condition(api) == ("True", "Scheduled", "3/3 members scheduled"),
                    "the PodGroup says it is scheduled",
                )

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_where_the_api_is_off_the_scheduler_runs(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.unserved.add(NATIVE_PODGROUPS)
            api.put_node(node_obj("n", gpus=8))
            api.put_pod(native_gang_pod("train", 0))
            async with running(api, tmp_path) as port:
                # No PodGroup can be read: the gang is the members that exist.
                await eventually(lambda: len(bound(api)) == 1, "the pod bound")
                url = f"http://127.0.0.1:{port}/readyz"
                async with aiohttp.ClientSession() as http, http.get(url) as answer:
                    assert answer.status == 200
            # The emulator answers as a server with the API off: no such path, and no
            # such group in discovery.
            async with aiohttp.ClientSession() as http:
                path = f"{api.base_url}/apis/scheduling.k8s.io/v1alpha2/podgroups"
                async with http.get(path) as answer:
                    assert answer.status == 404
                async with http.get(f"{api.base_url}/apis") as answer:
                    groups = {group["name"] for group in (await answer.json())["groups"]}
                    assert "scheduling.k8s.io" not in groups
                    assert "scheduling.volcano.sh" in groups

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
