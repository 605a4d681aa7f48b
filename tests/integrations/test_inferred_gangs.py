"""Jobs that need no edits: gangs inferred from the workloads' own labels and owners,
through the API emulator over real HTTP (the owners served as the controllers' CRDs,
read by the optional informers; pods as the controllers create them)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from scheduler.process.config import GangInferenceConfig, SchedulerConfig
from tests.factories import node_obj
from tests.integrations import workload_objects as w
from tests.kube.test_runner import TEST_TIMEOUT, bound, fast_config, running_with
from tests.kubeapi import EVENTS, WORKLOAD_TYPES, KubeApiEmulator
from tests.kubeapi.resources import JOBS, JOBSETS, MPIJOBS, PYTORCHJOBS, RAYCLUSTERS, ResourceType
from tests.waiting import eventually, free_port

pytestmark = pytest.mark.asyncio


def inferring(port: int, namespaces: list[str]) -> SchedulerConfig:
    return dataclasses.replace(
        fast_config(port), gang_inference=GangInferenceConfig(frozenset(namespaces))
    )


def condition(api: KubeApiEmulator, name: str) -> str:
    pod = api.get_pod("team", name) or {}
    for found in pod.get("status", {}).get("conditions", []):
        if found["type"] == "PodScheduled":
            return str(found.get("message", ""))
    return ""


def warnings(api: KubeApiEmulator, reason: str) -> list[str]:
    return [e["message"] for e in api.objects(EVENTS) if e.get("reason") == reason]


# (owner type, owner object, its pods in creation order): the last pod completes the gang.
Workload = tuple[ResourceType | None, Any, list[dict[str, Any]]]
WORKLOADS: dict[str, Callable[[], Workload]] = {
    "indexed-job": lambda: (
        JOBS,
        w.indexed_job("train", 3, 6),
        [w.indexed_job_pod("train", i) for i in range(3)],
    ),
    "jobset": lambda: (
        JOBSETS,
        w.jobset("llm", [("driver", 1, 1), ("workers", 2, 1)]),
        [w.jobset_pod("llm", "driver", 0, 0)]
        + [w.jobset_pod("llm", "workers", j, 0) for j in (0, 1)],
    ),
    "pytorchjob": lambda: (
        PYTORCHJOBS,
        w.pytorchjob("pt", 1, 2),
        [w.pytorchjob_pod("pt", "master", 0)]
        + [w.pytorchjob_pod("pt", "worker", i) for i in (0, 1)],
    ),
    "mpijob": lambda: (
        MPIJOBS,
        w.mpijob("mpi", 2),
        [w.mpijob_worker("mpi", 0), w.mpijob_worker("mpi", 1), w.mpijob_launcher("mpi")],
    ),
    "raycluster": lambda: (
        RAYCLUSTERS,
        w.raycluster("rc", [{"groupName": "gpu", "replicas": 6, "minReplicas": 2}], True),
        [w.ray_pod("rc", "head", 0), w.ray_pod("rc", "worker", 0), w.ray_pod("rc", "worker", 1)],
    ),
    "leaderworkerset": lambda: (None, None, [w.lws_pod("srv", 0, i, size=3) for i in range(3)]),
}


@pytest.mark.parametrize("kind", list(WORKLOADS))
async def test_a_workload_is_never_bound_partially(kind: str, tmp_path: Path) -> None:
    """Two of three members wait, saying so; the third completes the gang and all three
    are bound together. Without inference each would be bound alone."""
    owner_type, owner, pods = WORKLOADS[kind]()

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            if owner_type is not None:
                api.put(owner_type, owner)
            for pod in pods[:2]:
                api.put_pod(pod)
            async with running_with(api, tmp_path, inferring(free_port(), ["team"])):
                first = pods[0]["metadata"]["name"]
                await eventually(
                    lambda: condition(api, first) == "waiting for 1 more member: 2/3 exist",
                    "the first two told they wait for the third",
                )
                assert bound(api) == {}
                api.put_pod(pods[2])
                await eventually(lambda: len(bound(api)) == 3, "the whole workload bound")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_a_hostile_owner_spec_is_told_on_the_pods_and_nothing_crashes(
    tmp_path: Path,
) -> None:
    """A JobSet asking for more pods than a gang may hold (the CRD accepts each count):
    its pods say so, the gang is the members that exist, and the scheduler runs on."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            api.put(JOBSETS, w.jobset("huge", [("workers", 2**31 - 1, 2)]))
            api.put_pod(w.jobset_pod("huge", "workers", 0, 0))
            port = free_port()
            async with running_with(api, tmp_path, inferring(port, ["team"])):
                await eventually(
                    lambda: any(
                        m.startswith("JobSet team/huge: spec.replicatedJobs adds up to 4294967294")
                        for m in warnings(api, "InvalidPodGroup")
                    ),
                    "the JobSet's problem told on its pod",
                )
                await eventually(lambda: len(bound(api)) == 1, "the pod that exists bound")
                assert any("inferred" in m for m in warnings(api, "GangSizeUnknown"))
                url = f"http://127.0.0.1:{port}/readyz"
                async with aiohttp.ClientSession() as http, http.get(url) as answer:
                    assert answer.status == 200

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_without_the_workload_apis_the_scheduler_runs(tmp_path: Path) -> None:
    """No Job API (unlikely) and no CRDs: every owner list answers 404, the informers
    wait, and a LeaderWorkerSet group (sized by its pods) is still one gang."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.unserved.update(WORKLOAD_TYPES)
            api.put_node(node_obj("n", gpus=8))
            for i in range(2):
                api.put_pod(w.lws_pod("srv", 0, i, size=3))
            async with running_with(api, tmp_path, inferring(free_port(), ["team"])):
                await eventually(
                    lambda: condition(api, "srv-0") == "waiting for 1 more member: 2/3 exist",
                    "the group waits for its third pod",
                )
                api.put_pod(w.lws_pod("srv", 0, 2, size=3))
                await eventually(lambda: len(bound(api)) == 3, "the whole group bound")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_a_namespace_not_opted_in_is_scheduled_pod_by_pod(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            api.put(JOBS, w.indexed_job("train", 3, 3))
            api.put_pod(w.indexed_job_pod("train", 0))
            async with running_with(api, tmp_path, inferring(free_port(), ["elsewhere"])):
                await eventually(lambda: len(bound(api)) == 1, "the lone pod bound")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_an_inferred_gang_that_does_not_fit_says_so_under_its_name(tmp_path: Path) -> None:
    """A JobSet of three 4-GPU pods on one 8-GPU node: nothing bound, and each pod's
    condition names the inferred gang and how many of its members fit."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            api.put(JOBSETS, w.jobset("llm", [("workers", 3, 1)]))
            for j in range(3):
                pod = w.jobset_pod("llm", "workers", j, 0)
                requests = pod["spec"]["containers"][0]["resources"]["requests"]
                requests["nvidia.com/gpu"] = "4"
                api.put_pod(pod)
            async with running_with(api, tmp_path, inferring(free_port(), ["team"])):
                names = [f"llm-workers-{j}-0-p" for j in range(3)]
                await eventually(
                    lambda: all(
                        "gang team/jobset:llm: 2/3 members placeable" in condition(api, name)
                        for name in names
                    ),
                    "the shortfall told under the gang's name",
                )
                told = [condition(api, name) for name in names]
                assert any("Insufficient nvidia.com/gpu" in message for message in told), told
                assert bound(api) == {}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_a_rayjob_cluster_is_one_gang_and_its_submitter_runs_alone(tmp_path: Path) -> None:
    """A RayJob: its controller creates a RayCluster (controlled by the RayJob) whose
    head and workers are one gang, and a plain Job whose submitter pod is no gang. The
    submitter is bound at once; the cluster waits whole for its last worker."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            cluster = "rj-x7k2p"
            api.put(
                RAYCLUSTERS, w.rayjob_cluster("rj", cluster, [{"groupName": "gpu", "replicas": 2}])
            )
            api.put_pod(w.rayjob_submitter_pod("rj"))
            api.put_pod(w.ray_pod(cluster, "head", 0))
            api.put_pod(w.ray_pod(cluster, "worker", 0))
            async with running_with(api, tmp_path, inferring(free_port(), ["team"])):
                await eventually(
                    lambda: set(bound(api)) == {"rj-submit"}, "the submitter bound alone"
                )
                await eventually(
                    lambda: (
                        condition(api, f"{cluster}-head-0")
                        == "waiting for 1 more member: 2/3 exist"
                    ),
                    "the cluster waits for its second worker",
                )
                api.put_pod(w.ray_pod(cluster, "worker", 1))
                await eventually(lambda: len(bound(api)) == 4, "the whole cluster bound")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
