"""Migrating from KAI-Scheduler: its PodGroup (scheduling.run.ai) sizes the gang its pods
name in `pod-group-name`, read by an optional informer over real HTTP; its GPU-sharing
annotation is refused out loud rather than booked and never granted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cache.kai import kai_podgroup_from_api
from tests.factories import node_obj, pod_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import EVENTS, KAI_PODGROUPS, KubeApiEmulator
from tests.waiting import eventually

pytestmark = pytest.mark.asyncio


def kai_podgroup(name: str, min_member: Any, queue: str = "team-a") -> dict[str, Any]:
    """As KAI's pod-grouper writes it (top owner's labels and queue, minMember)."""
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"kai.scheduler/queue": queue},
        },
        "spec": {"minMember": min_member, "queue": queue, "priorityClassName": "train"},
    }


def kai_pod(group: str, index: int, **kwargs: Any) -> dict[str, Any]:
    """A pod migrated from KAI: schedulerName changed to ours, the pod-grouper's
    annotation and the queue label kept."""
    obj = pod_obj(f"{group}-{index}", gpus=1, annotations={"pod-group-name": group, **kwargs})
    obj["metadata"]["labels"]["kai.scheduler/queue"] = "team-a"
    return obj


def condition(api: KubeApiEmulator, name: str) -> str:
    pod = api.get_pod("default", name) or {}
    for found in pod.get("status", {}).get("conditions", []):
        if found["type"] == "PodScheduled":
            return str(found.get("message", ""))
    return ""


async def test_a_kai_podgroup_sizes_the_gang_its_pods_name(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            api.put(KAI_PODGROUPS, kai_podgroup("pg-train-1234", 3))
            for i in range(2):
                api.put_pod(kai_pod("pg-train-1234", i))
            async with running(api, tmp_path):
                await eventually(
                    lambda: (
                        condition(api, "pg-train-1234-0") == "waiting for 1 more member: 2/3 exist"
                    ),
                    "two of three wait",
                )
                assert bound(api) == {}
                api.put_pod(kai_pod("pg-train-1234", 2))
                await eventually(lambda: len(bound(api)) == 3, "the whole gang bound")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_a_kai_gpu_fraction_is_refused_on_the_pod(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            notebook = pod_obj("notebook", annotations={"gpu-fraction": "0.3"})
            api.put_pod(notebook)
            async with running(api, tmp_path):
                await eventually(
                    lambda: any(
                        "gpu-fraction='0.3'" in e["message"]
                        and "nvidia.com/vgpu: 300" in e["message"]
                        for e in api.objects(EVENTS)
                        if e.get("reason") == "InvalidPodSpec"
                    ),
                    "the refusal told on the pod",
                )
                assert bound(api) == {}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.parametrize(
    ("value", "size", "problem"),
    [(4, 4, ""), (0, None, ""), (-1, None, "non-negative"), ("4", None, "non-negative")],
)
async def test_a_hostile_kai_min_member_is_a_problem(value: Any, size: Any, problem: str) -> None:
    group = kai_podgroup_from_api(kai_podgroup("g", value))
    assert group.min_member == size
    assert (problem in group.problems[0]) if problem else not group.problems
