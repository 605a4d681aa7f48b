"""A Volcano Job over real HTTP: its PodGroup read by the optional informer, and the
scheduler unbothered where Volcano's CRD is not installed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from tests.factories import node_obj
from tests.integrations.controllers import volcano_pod, volcano_podgroup_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import VOLCANO_PODGROUPS, KubeApiEmulator
from tests.waiting import eventually


def scheduled_message(api: KubeApiEmulator, name: str) -> str:
    pod = api.get_pod("default", name) or {}
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled":
            return str(condition.get("message", ""))
    return ""


@pytest.mark.asyncio
async def test_a_volcano_job_is_never_bound_partially(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            api.put(VOLCANO_PODGROUPS, volcano_podgroup_obj("mnist", 3))
            for i in range(2):
                api.put_pod(volcano_pod("mnist", "worker", i))
            async with running(api, tmp_path):
                await eventually(
                    lambda: api.request_count("list", "podgroups") >= 2, "podgroups listed"
                )
                # A cycle has judged the two: they say they wait for the third.
                await eventually(
                    lambda: "waiting for 1 more member" in scheduled_message(api, "mnist-worker-0"),
                    "the two told they wait for the third",
                )
                assert bound(api) == {}
                api.put_pod(volcano_pod("mnist", "worker", 2))
                await eventually(lambda: len(bound(api)) == 3, "the whole job bound")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_without_volcanos_crd_the_scheduler_runs(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.unserved.add(VOLCANO_PODGROUPS)
            api.put_node(node_obj("n", gpus=8))
            api.put(VOLCANO_PODGROUPS, volcano_podgroup_obj("mnist", 3))
            api.put_pod(volcano_pod("mnist", "worker", 0))
            async with running(api, tmp_path) as port:
                # The list answered 404: no PodGroup is read, so the job is a gang of
                # the members that exist (and is told its size is unknown).
                await eventually(lambda: len(bound(api)) == 1, "the lone pod bound")
                url = f"http://127.0.0.1:{port}/readyz"
                async with aiohttp.ClientSession() as http, http.get(url) as answer:
                    assert answer.status == 200

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
