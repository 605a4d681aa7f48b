"""The peers' topology requirements read over real HTTP (issue 30): a Volcano PodGroup's
networkTopology, a KAI PodGroup's topologyConstraint and Kueue's TAS annotations on
pods each become the gang's requirement, shown by /debug/gangs; what cannot be
followed keeps the gang unbound and says so on its pods. (Placing by the requirement
is the planner's: tests/ beside it.)"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cache import kueue_topology as kueue
from cache.volcano_tiers import VolcanoTiers
from tests.factories import node_obj, pod_obj
from tests.integrations.controllers import (
    VOLCANO_JOB_UID,
    native_gang_pod,
    native_podgroup_obj,
    volcano_pod,
    volcano_podgroup_obj,
)
from tests.integrations.test_kai import kai_pod, kai_podgroup
from tests.kube.test_runner import TEST_TIMEOUT, bound, fast_config, running_with
from tests.kube.test_runner import unschedulable_message as message
from tests.kube.test_topology import NATIVE, create
from tests.kubeapi import KAI_PODGROUPS, VOLCANO_PODGROUPS, KubeApiEmulator
from tests.waiting import eventually, free_port

REQUIRED = kueue.REQUIRED_ANNOTATION
SLICE_REQUIRED = kueue.SLICE_REQUIRED_ANNOTATION
SLICE_SIZE = kueue.SLICE_SIZE_ANNOTATION

pytestmark = pytest.mark.asyncio

TOR, ZONE, HOST = "volcano.sh/tor", "topology.kubernetes.io/zone", "kubernetes.io/hostname"
RACK, BLOCK = "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block"


async def debug_gangs(port: int) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/debug/gangs") as reply,
    ):
        answer = await reply.json()
    return {gang["key"]: gang for gang in answer["gangs"]}


def pod_message(api: KubeApiEmulator, name: str) -> str:
    return message(api.get_pod("default", name) or {})


async def test_the_peers_requirements_become_the_gangs(tmp_path: Path) -> None:
    """Each gang lacks a member, so it waits and /debug/gangs shows what it requires."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            volcano_group = volcano_podgroup_obj("mnist", 3)
            volcano_group["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 2}
            api.put(VOLCANO_PODGROUPS, volcano_group)
            api.put_pod(volcano_pod("mnist", "worker", 0))
            kai_group = kai_podgroup("pg-train", 3)
            kai_group["spec"]["topologyConstraint"] = {
                "topology": "cluster-topology",
                "requiredTopologyLevel": BLOCK,
                "preferredTopologyLevel": RACK,
            }
            api.put(KAI_PODGROUPS, kai_group)
            api.put_pod(kai_pod("pg-train", 0))
            kueue = {
                REQUIRED: BLOCK,
                SLICE_REQUIRED: RACK,
                SLICE_SIZE: "2",
            }
            api.put_pod(pod_obj("tas-0", gang="tas", min_member=4, gpus=1, annotations=kueue))
            debug = free_port()
            config = fast_config(free_port(), debug_port=debug)
            tiers = VolcanoTiers(keys=(TOR, ZONE))
            config = dataclasses.replace(
                config, topology=dataclasses.replace(config.topology, volcano_tiers=tiers)
            )
            async with running_with(api, tmp_path, config):
                # Each pod told its gang waits: the gangs are assembled.
                for name in ("mnist-worker-0", "pg-train-0", "tas-0"):
                    await eventually(
                        lambda name=name: "waiting for" in pod_message(api, name),  # type: ignore[misc]
                        f"{name} waits",
                    )
                gangs = await debug_gangs(debug)
            assert bound(api) == {}
        volcano_key = f"default/mnist-{VOLCANO_JOB_UID}"
        volcano, kai = gangs[volcano_key]["topology"], gangs["default/pg-train"]["topology"]
        tas = gangs["default/tas"]["topology"]
        assert volcano == {
            "required": ZONE,
            "preferred": [TOR],
            "sliceSize": None,
            "sliceKey": None,
            "source": f"PodGroup {volcano_key} (scheduling.volcano.sh) spec.networkTopology",
        }
        assert kai is not None and (kai["required"], kai["preferred"]) == (BLOCK, [RACK])
        assert "(Topology 'cluster-topology')" in kai["source"]
        assert tas is not None
        assert (tas["required"], tas["sliceSize"], tas["sliceKey"]) == (BLOCK, 2, RACK)

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_what_cannot_be_followed_keeps_whole_gangs_unbound(tmp_path: Path) -> None:
    """Every gang below has all its members and room to run; each states a topology
    this scheduler cannot follow, so none is bound and each pod says why."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            api.put_node(node_obj("n", gpus=8))
            # Volcano: tier 3, with the default tiers (tier 1 = zone) mapping one.
            volcano_group = volcano_podgroup_obj("mnist", 2)
            volcano_group["spec"]["networkTopology"] = {"highestTierAllowed": 3}
            api.put(VOLCANO_PODGROUPS, volcano_group)
            for i in range(2):
                api.put_pod(volcano_pod("mnist", "worker", i))
            # KAI: a subgroup's own constraint.
            kai_group = kai_podgroup("pg-train", 2)
            kai_group["spec"]["subGroups"] = [
                {"name": "a", "minMember": 2, "topologyConstraint": {"requiredTopologyLevel": RACK}}
            ]
            api.put(KAI_PODGROUPS, kai_group)
            for i in range(2):
                api.put_pod(kai_pod("pg-train", i))
            # Kueue: members that disagree, and a slice larger than its gang.
            api.put_pod(
                pod_obj("split-0", gang="split", min_member=2, annotations={REQUIRED: RACK})
            )
            api.put_pod(
                pod_obj("split-1", gang="split", min_member=2, annotations={REQUIRED: BLOCK})
            )
            slices = {SLICE_REQUIRED: RACK, SLICE_SIZE: "3"}
            for i in range(2):
                api.put_pod(pod_obj(f"big-{i}", gang="big", min_member=2, annotations=slices))
            # Native and Kueue: each sound alone, together a contradiction (one host
            # required by the PodGroup, one zone preferred by its members).
            native_group = native_podgroup_obj("mixed", 2)
            native_group["spec"]["schedulingConstraints"] = {"topology": [{"key": HOST}]}
            await create(api, NATIVE, native_group)
            for i in range(2):
                member = native_gang_pod("mixed", i)
                member["metadata"]["annotations"][kueue.PREFERRED_ANNOTATION] = ZONE
                api.put_pod(member)
            # A gang beside them that states nothing is bound as usual.
            for i in range(2):
                api.put_pod(pod_obj(f"plain-{i}", gang="plain", min_member=2))
            config = fast_config(free_port())
            async with running_with(api, tmp_path, config):
                expected = {
                    "mnist-worker-0": "asks for tier 3, but no node label key is configured",
                    "pg-train-0": "spec.subGroups[0].topologyConstraint (a topology per subgroup)",
                    "split-1": "its members state different topologies",
                    "big-0": f"annotation {SLICE_SIZE} 3 is larger than the gang (2 members)",
                    "mixed-1": (
                        f"annotation {kueue.PREFERRED_ANNOTATION} names {ZONE}, not narrower "
                        f"than the required spec.schedulingConstraints.topology[0].key {HOST}"
                    ),
                }
                for name, text in expected.items():
                    await eventually(
                        lambda name=name, text=text: text in pod_message(api, name),  # type: ignore[misc]
                        f"{name} says why",
                    )
                await eventually(lambda: len(bound(api, "plain")) == 2, "the plain gang bound")
                assert set(bound(api)) == {"plain-0", "plain-1"}
                assert "the gang waits until it is fixed" in pod_message(api, "split-0")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
