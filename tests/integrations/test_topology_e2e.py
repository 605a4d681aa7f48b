"""A required topology level placed end to end, for every source that can state it
(issue 30): Kubernetes' own PodGroup, this project's PodGroup, Kueue's TAS annotations,
KAI's PodGroup and Volcano's PodGroup, each built as that peer's controller writes it
(tests/integrations/controllers.py, tests/integrations/test_kai.py), through the API
emulator with the real client over HTTP.

One scheduler per source runs three phases on one cluster, each on nodes of its own
racks so that the phases before it cannot help or hinder it:
- one domain or none: a gang that fits only across two racks waits, saying which level
  and what the fullest rack has free; once one rack has room it binds there;
- bound members fix the domain: a gang whose bound member sits in a full rack waits,
  though another rack has room, and binds where its member runs once room appears;
- preemption within a domain: a higher gang that would fit across two racks without
  evicting anyone evicts one victim, in one rack, and binds in that rack.
Slices are a fourth test, for the sources that can state them (own CRD, Kueue): each
slice in one clique, and with a member bound, the members left sliced (the last slice
shorter) and placed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cache import kueue_topology as kueue
from cache.volcano_tiers import VolcanoTiers
from scheduler.process.config import SchedulerConfig
from tests.factories import node_obj, pod_obj
from tests.integrations.controllers import (
    kueue_pod,
    native_gang_pod,
    native_podgroup_obj,
    volcano_pod,
    volcano_podgroup_obj,
)
from tests.integrations.test_kai import kai_pod, kai_podgroup
from tests.kube.test_runner import TEST_TIMEOUT, fast_config, running_with
from tests.kube.test_runner import unschedulable_message as message
from tests.kube.test_topology import NATIVE, OWN, create, own_group
from tests.kubeapi import KAI_PODGROUPS, VOLCANO_PODGROUPS, KubeApiEmulator
from tests.signed import signed, with_key
from tests.waiting import eventually, free_port

pytestmark = pytest.mark.asyncio

RACK = "topology.kubernetes.io/rack"
CLIQUE = "nvidia.com/gpu.clique"
# The gangs under test; the victims of the preemption phase are lower.
PRIORITY, VICTIM_PRIORITY = 10, 1


@dataclass(frozen=True)
class Shape:
    """A gang of `size` members of `gpus` GPUs each, all required in one rack; with
    `bound_on`, member 0 already runs on that node; with `slices`, every `slices[0]`
    consecutive members in one domain of `slices[1]`."""

    name: str
    size: int
    gpus: int
    bound_on: str = ""
    slices: tuple[int, str] | None = None


def set_gpus(pod: dict[str, Any], gpus: int) -> dict[str, Any]:
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    return pod


def finish(pod: dict[str, Any], shape: Shape, index: int) -> dict[str, Any]:
    """A member as the API holds it once admission resolved its PriorityClass, and, for
    member 0 of a gang with `bound_on`, once it runs there."""
    pod["spec"]["priority"] = PRIORITY
    set_gpus(pod, shape.gpus)
    if index == 0 and shape.bound_on:
        pod["spec"]["nodeName"] = shape.bound_on
        pod["status"]["phase"] = "Running"
    return pod


async def native(api: KubeApiEmulator, shape: Shape) -> list[str]:
    group = native_podgroup_obj(shape.name, shape.size)
    group["spec"]["schedulingConstraints"] = {"topology": [{"key": RACK}]}
    # The class the workload names, and the value the Priority admission plugin resolves.
    group["spec"].update(priorityClassName="train", priority=PRIORITY)
    await create(api, NATIVE, group)
    pods = [finish(native_gang_pod(shape.name, i), shape, i) for i in range(shape.size)]
    return put(api, pods)


async def own(api: KubeApiEmulator, shape: Shape) -> list[str]:
    topology: dict[str, Any] = {"requiredKey": RACK}
    if shape.slices is not None:
        topology.update(sliceSize=shape.slices[0], sliceKey=shape.slices[1])
    await create(api, OWN, own_group(shape.name, shape.size, topology))
    pods = [pod_obj(f"{shape.name}-{i}", gang=shape.name) for i in range(shape.size)]
    return put(api, [finish(pod, shape, i) for i, pod in enumerate(pods)])


async def kueue_tas(api: KubeApiEmulator, shape: Shape) -> list[str]:
    """A Kueue plain-pod group admitted (its gate removed), its pod set's TAS
    annotations on every member (Kueue copies them from the pod template)."""
    annotations = {kueue.REQUIRED_ANNOTATION: RACK}
    if shape.slices is not None:
        annotations[kueue.SLICE_REQUIRED_ANNOTATION] = shape.slices[1]
        annotations[kueue.SLICE_SIZE_ANNOTATION] = str(shape.slices[0])
    pods = []
    for i in range(shape.size):
        pod = kueue_pod(shape.name, i, shape.size, gated=False)
        pod["metadata"]["annotations"].update(annotations)
        pods.append(finish(pod, shape, i))
    return put(api, pods)


async def kai(api: KubeApiEmulator, shape: Shape) -> list[str]:
    group = kai_podgroup(shape.name, shape.size)
    group["spec"]["topologyConstraint"] = {
        "topology": "cluster-topology",
        "requiredTopologyLevel": RACK,
    }
    api.put(KAI_PODGROUPS, group)
    return put(api, [finish(kai_pod(shape.name, i), shape, i) for i in range(shape.size)])


async def volcano(api: KubeApiEmulator, shape: Shape) -> list[str]:
    """Tier 1 is the rack (the scheduler's topology.volcanoTiers, `volcano_config`)."""
    group = volcano_podgroup_obj(shape.name, shape.size)
    group["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 1}
    api.put(VOLCANO_PODGROUPS, group)
    pods = [volcano_pod(shape.name, "worker", i) for i in range(shape.size)]
    return put(api, [finish(pod, shape, i) for i, pod in enumerate(pods)])


def put(api: KubeApiEmulator, pods: list[dict[str, Any]]) -> list[str]:
    for pod in pods:
        api.put_pod(pod)
    return [pod["metadata"]["name"] for pod in pods]


def volcano_config(config: SchedulerConfig) -> SchedulerConfig:
    tiers = VolcanoTiers(keys=(RACK,))
    return dataclasses.replace(
        config, topology=dataclasses.replace(config.topology, volcano_tiers=tiers)
    )


@dataclass(frozen=True)
class Source:
    name: str
    gang: Callable[[KubeApiEmulator, Shape], Awaitable[list[str]]]
    # Why the source cannot state slices (None: it can).
    no_slices: str | None = None
    configure: Callable[[SchedulerConfig], SchedulerConfig] = lambda config: config


SOURCES = [
    Source(
        "native",
        native,
        no_slices="Kubernetes 1.36's schedulingConstraints.topology[] has a key only",
    ),
    Source("own-crd", own),
    Source("kueue", kueue_tas),
    Source("kai", kai, no_slices="KAI's topologyConstraint has required and preferred levels only"),
    Source(
        "volcano",
        volcano,
        no_slices="Volcano's networkTopology has a mode and a highest tier only",
        configure=volcano_config,
    ),
]


def node(name: str, rack: str, gpus: int, clique: str = "") -> dict[str, Any]:
    labels = {RACK: rack, **({CLIQUE: clique} if clique else {})}
    return node_obj(name, gpus=gpus, labels=labels)


def label_of(api: KubeApiEmulator, pod: str, key: str) -> str | None:
    node_name = (api.get_pod("default", pod) or {}).get("spec", {}).get("nodeName")
    for found in api.nodes():
        if found["metadata"]["name"] == node_name:
            return found["metadata"].get("labels", {}).get(key)
    return None


def is_bound(api: KubeApiEmulator, pod: str) -> bool:
    return bool((api.get_pod("default", pod) or {}).get("spec", {}).get("nodeName"))


def victim(name: str, node_name: str) -> dict[str, Any]:
    """A one-member gang of 4 GPUs the scheduler bound (signed), lower than the gangs
    under test: the only pods they may evict."""
    pod = pod_obj(
        name,
        gang=name,
        min_member=1,
        gpus=4,
        priority=VICTIM_PRIORITY,
        node_name=node_name,
        phase="Running",
    )
    return signed(pod)


@pytest.mark.parametrize("source", SOURCES, ids=[source.name for source in SOURCES])
async def test_a_required_rack_is_one_rack_or_none_fixed_by_bound_members_and_preempted_within(
    source: Source, tmp_path: Path
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            # One domain or none: 8 GPUs free in r1, 4 in r2; the gang needs 12.
            for name, rack in (("a1", "r1"), ("a2", "r1"), ("b1", "r2")):
                api.put_node(node(name, rack, 4))
            wide = await source.gang(api, Shape("wide", 3, gpus=4))
            config = with_key(source.configure(fast_config(free_port())), tmp_path)
            async with running_with(api, tmp_path, config):
                needs = f"needs 12 GPUs in one {RACK}; the fullest rack has 8 free"
                await eventually(
                    lambda: all(needs in message(api.get_pod("default", p) or {}) for p in wide),
                    "every member says what the racks lack",
                )
                assert not any(is_bound(api, pod) for pod in wide)
                api.put_node(node("a3", "r1", 4))
                await eventually(lambda: all(is_bound(api, p) for p in wide), "wide bound")
                assert {label_of(api, pod, RACK) for pod in wide} == {"r1"}

                # Bound members fix the domain: member 0 runs in rack f, which is full;
                # r2 has the 4 GPUs member 1 needs, yet it waits for rack f.
                api.put_node(node("f1", "f", 4))
                fixed = await source.gang(api, Shape("fixed", 2, gpus=4, bound_on="f1"))
                waits = f"needs 4 GPUs in {RACK}=f, where its bound members run; it has 0 free"
                await eventually(
                    lambda: waits in message(api.get_pod("default", fixed[1]) or {}),
                    "the member left names its bound member's rack",
                )
                assert not is_bound(api, fixed[1])
                api.put_node(node("f2", "f", 4))
                await eventually(lambda: is_bound(api, fixed[1]), "the member left bound")
                assert label_of(api, fixed[1], RACK) == "f"

                # Preemption within a domain: 4 GPUs free in p1 and in p2 (8 across the
                # two, room enough without a rack), a victim beside each.
                for name, rack in (("p1a", "p1"), ("p1b", "p1"), ("p2a", "p2"), ("p2b", "p2")):
                    api.put_node(node(name, rack, 4))
                api.put_pod(victim("low-p1", "p1b"))
                api.put_pod(victim("low-p2", "p2b"))
                high = await source.gang(api, Shape("high", 2, gpus=4))
                await eventually(lambda: all(is_bound(api, p) for p in high), "high bound")
                evicted = [v for v in ("low-p1", "low-p2") if not is_bound(api, v)]
                assert len(evicted) == 1, evicted
                rack = evicted[0].removeprefix("low-")
                assert {label_of(api, pod, RACK) for pod in high} == {rack}
                # The gangs placed before are untouched.
                assert all(is_bound(api, pod) for pod in [*wide, *fixed])

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.parametrize("source", SOURCES, ids=[source.name for source in SOURCES])
async def test_slices_sit_each_in_one_clique_inside_the_rack(
    source: Source, tmp_path: Path
) -> None:
    if source.no_slices is not None:
        pytest.skip(f"{source.name} cannot state slices: {source.no_slices}")

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            # Rack s: 3 GPUs in clique k1, 3 in k2; a gang of 4 one-GPU members in
            # slices of 2 must split 2 and 2 (packing k1 first would split a slice).
            # Rack t has room for the whole gang on one node in no clique: no slice fits.
            api.put_node(node("s1", "s", 3, clique="k1"))
            api.put_node(node("s2", "s", 3, clique="k2"))
            api.put_node(node("t1", "t", 8))
            sliced = await source.gang(api, Shape("sliced", 4, gpus=1, slices=(2, CLIQUE)))
            config = source.configure(fast_config(free_port()))
            async with running_with(api, tmp_path, config):
                await eventually(lambda: all(is_bound(api, p) for p in sliced), "sliced bound")
                assert {label_of(api, pod, RACK) for pod in sliced} == {"s"}
                cliques = [label_of(api, pod, CLIQUE) for pod in sliced]
                assert cliques[0] == cliques[1] and cliques[2] == cliques[3], cliques

                # A member bound in rack u: the three left are sliced {1, 2} and {3}
                # (bound members are not re-sliced), the last slice shorter.
                api.put_node(node("u1", "u", 2, clique="k5"))
                api.put_node(node("u2", "u", 3, clique="k6"))
                api.put_node(node("u3", "u", 1, clique="k7"))
                rest = await source.gang(
                    api, Shape("rest", 4, gpus=1, bound_on="u1", slices=(2, CLIQUE))
                )
                await eventually(lambda: all(is_bound(api, p) for p in rest), "rest bound")
                assert {label_of(api, pod, RACK) for pod in rest} == {"u"}
                assert label_of(api, rest[1], CLIQUE) == label_of(api, rest[2], CLIQUE) == "k6"

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
