"""Inter-pod affinity and topology spread end to end against the API emulator: pods
with these fields bind where kube-scheduler would let them and are refused with its
FailedScheduling words elsewhere; namespaceSelector reads Namespace objects through the
namespace informer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from scheduler.kube.client import KubeClient
from tests.kube.test_runner import TEST_TIMEOUT, bound, running, unschedulable_message
from tests.kubeapi import NAMESPACES, KubeApiEmulator
from tests.podconstraints import HOST, ZONE, labelled_pod, required, spread, term, zoned_node
from tests.waiting import eventually

WORKER = {"app": "train", "role": "worker"}
DB = {"app": "db"}


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels or {})}}


def members(count: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [
        labelled_pod(f"g-{i}", WORKER, gang="g", min_member=count, gpus=1, **kwargs)
        for i in range(count)
    ]


@pytest.mark.asyncio
async def test_anti_affinity_through_a_namespace_selector_keeps_the_gang_off(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for i in range(4):
                api.put_node(zoned_node(f"n{i}", "z1", gpus=2))
            api.put(NAMESPACES, namespace("default"))
            api.put(NAMESPACES, namespace("ml-a", {"team": "ml"}))
            api.put_pod(labelled_pod("db", DB, namespace="ml-a", node_name="n0"))
            away = required(
                "podAntiAffinity",
                term(WORKER, HOST),
                term(DB, HOST, namespaceSelector={"matchLabels": {"team": "ml"}}),
            )
            for pod in members(3, affinity=away):
                api.put_pod(pod)
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "g-")) == 3, "the gang bound")
            nodes = sorted(p["spec"]["nodeName"] for p in bound(api, "g-").values())
            assert nodes == ["n1", "n2", "n3"]

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_refused_with_kube_scheduler_reasons_then_bound_once_nodes_arrive(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for zone in ("za", "zb"):
                api.put_node(zoned_node(f"{zone}-0", zone, gpus=8))
            constrained = members(
                4,
                affinity=required("podAntiAffinity", term(WORKER, HOST)),
                spread=[spread(WORKER, ZONE)],
            )
            for pod in constrained:
                api.put_pod(pod)
            async with running(api, tmp_path):

                def refused() -> bool:
                    return all(
                        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity "
                        "rules." in unschedulable_message(p)
                        for p in api.pods()
                        if p["metadata"]["name"] != "g-0" and p["metadata"]["name"] != "g-1"
                    ) and all(
                        "2/4 members placeable" in unschedulable_message(p) for p in api.pods()
                    )

                await eventually(refused, "PodScheduled=False with anti-affinity reasons")
                assert bound(api) == {}
                for zone in ("za", "zb"):
                    api.put_node(zoned_node(f"{zone}-1", zone, gpus=8))
                await eventually(lambda: len(bound(api, "g-")) == 4, "the gang bound")
            nodes = [p["spec"]["nodeName"] for p in bound(api, "g-").values()]
            assert len(set(nodes)) == 4

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_namespace_labelled_later_lets_a_waiting_gang_follow_its_pods(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            for zone in ("za", "zb"):
                api.put_node(zoned_node(f"{zone}-0", zone, gpus=4))
            api.put(NAMESPACES, namespace("lab"))
            api.put_pod(labelled_pod("db", DB, namespace="lab", node_name="zb-0"))
            near = required(
                "podAffinity", term(DB, ZONE, namespaceSelector={"matchLabels": {"team": "ml"}})
            )
            for pod in members(2, affinity=near):
                api.put_pod(pod)
            async with running(api, tmp_path):

                def refused() -> bool:
                    return all(
                        "node(s) didn't match pod affinity rules" in unschedulable_message(p)
                        for p in api.pods()
                        if p["metadata"]["name"].startswith("g-")
                    )

                await eventually(refused, "refused: no pod the term selects")
                api.put(NAMESPACES, namespace("lab", {"team": "ml"}))
                await eventually(lambda: len(bound(api, "g-")) == 2, "the gang bound")
            assert {p["spec"]["nodeName"] for p in bound(api, "g-").values()} == {"zb-0"}

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_the_api_labels_every_namespace_with_its_name(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    created = await client.request_json(
        "POST", "/api/v1/namespaces", body={"metadata": {"name": "team-a", "labels": {"x": "1"}}}
    )
    assert created["metadata"]["labels"] == {"x": "1", "kubernetes.io/metadata.name": "team-a"}
    assert created["status"] == {"phase": "Active"}
    stored = api.get(NAMESPACES, "", "team-a")
    assert stored is not None
    assert stored["metadata"]["labels"]["kubernetes.io/metadata.name"] == "team-a"
