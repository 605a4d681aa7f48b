"""A required topology level through the API emulator, with the real client over HTTP:
Kubernetes' own PodGroup (spec.schedulingConstraints.topology) and this project's
(spec.topology), each created through the API as a controller would: the gang binds
inside one rack or not at all, says why it waits, and members already bound fix the
rack; a value the scheduler cannot follow is named on the pods."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from scheduler.kube.client import KubeClient
from tests.factories import node_obj, pod_obj
from tests.integrations.controllers import native_gang_pod, native_podgroup_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound, running, unschedulable_message
from tests.kubeapi import KubeApiEmulator, api_client
from tests.waiting import eventually

RACK = "topology.kubernetes.io/rack"
NATIVE = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups"
OWN = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/default/podgroups"


def in_rack(name: str, rack: str | None, gpus: int) -> dict[str, Any]:
    return node_obj(name, gpus=gpus, labels={RACK: rack} if rack else {})


def native_group(name: str, size: int, key: str) -> dict[str, Any]:
    obj = native_podgroup_obj(name, size)
    obj["spec"]["schedulingConstraints"] = {"topology": [{"key": key}]}
    return obj


def own_group(name: str, size: int, topology: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": size, "topology": topology},
    }


async def create(api: KubeApiEmulator, path: str, body: dict[str, Any]) -> None:
    async with KubeClient(await api_client(api.base_url)) as client:
        await client.request_json("POST", path, body=body)


def racks(api: KubeApiEmulator) -> set[str | None]:
    label = {n["metadata"]["name"]: n["metadata"].get("labels", {}).get(RACK) for n in api.nodes()}
    return {label[p["spec"]["nodeName"]] for p in bound(api).values()}


@pytest.mark.asyncio
async def test_a_native_gang_binds_in_one_rack_or_waits_saying_why(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            # 8 GPUs free in r1, 4 in r2, 16 in no rack: 12 GPUs fit in total, in no rack.
            for node in (in_rack("a1", "r1", 4), in_rack("a2", "r1", 4)):
                api.put_node(node)
            api.put_node(in_rack("b1", "r2", 4))
            api.put_node(in_rack("free", None, 16))
            await create(api, NATIVE, native_group("train", 3, RACK))
            for i in range(3):
                api.put_pod(native_gang_pod("train", i, gpus=4))
            async with running(api, tmp_path):
                needs = (
                    f"gang default/train: needs 12 GPUs in one {RACK}; the fullest rack has 8 free"
                )
                await eventually(
                    lambda: all(needs in unschedulable_message(p) for p in api.pods()),
                    "every member says what the rack lacks",
                )
                assert bound(api) == {}
                api.put_node(in_rack("a3", "r1", 4))
                await eventually(lambda: len(bound(api)) == 3, "the whole gang bound")
                assert racks(api) == {"r1"}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_own_podgroup_members_already_bound_fix_the_rack(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            # a (r1) is the tightest node for the two members left; the bound one is in r2.
            api.put_node(in_rack("a", "r1", 4))
            api.put_node(in_rack("b", "r2", 16))
            await create(api, OWN, own_group("train", 3, {"requiredKey": RACK}))
            api.put_pod(pod_obj("train-0", gang="train", gpus=2, node_name="b"))
            for i in (1, 2):
                api.put_pod(pod_obj(f"train-{i}", gang="train", gpus=2))
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api)) == 3, "the gang completed")
                assert racks(api) == {"r2"}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_own_podgroup_with_a_slice_larger_than_the_gang_is_refused_on_its_pods(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(in_rack("a", "r1", 8))
            topology = {"requiredKey": RACK, "sliceSize": 5, "sliceKey": "nvidia.com/gpu.clique"}
            await create(api, OWN, own_group("train", 2, topology))
            for i in range(2):
                api.put_pod(pod_obj(f"train-{i}", gang="train", gpus=1))
            async with running(api, tmp_path):
                await eventually(
                    lambda: all(
                        "spec.topology.sliceSize 5 is larger than the gang (2 members)"
                        in unschedulable_message(p)
                        for p in api.pods()
                    ),
                    "the members name the field the scheduler cannot follow",
                )
                assert bound(api) == {}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
