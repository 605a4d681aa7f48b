"""Claims of a whole gang (a native PodGroup's spec.resourceClaims, KEP-5729) over real
HTTP against the API emulator: the claim allocated once, reserved for the PodGroup
(`{apiGroup: scheduling.k8s.io, resource: podgroups}`), every member bound on a node
that reaches its devices; taken back when the gang breaks before any member is bound,
kept while a member it serves stays bound (docs/dra.md, "Claims of a whole gang")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cache.cluster import EventType
from cache.dra.claims import claim_from_api
from cache.native_gang import native_podgroup_from_api
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.kube.binder import GangBinder, bind_and_settle
from scheduler.kube.client import KubeClient
from scheduler.kube.dra_claims import ClaimWriter
from scheduler.planner.result import Plan
from tests.dra_objects import GPU_CLASS, device_class_obj, slice_obj
from tests.factories import node_obj
from tests.integrations.controllers import native_gang_pod, native_podgroup_obj
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import (
    DEVICE_CLASSES,
    NATIVE_PODGROUPS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeApiEmulator,
    api_client,
)
from tests.waiting import eventually

GROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
ENTRY = {"name": "gpus", "resourceClaimName": "shared"}


def two_gpu_claim() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": GPU_CLASS,
                            "allocationMode": "ExactCount",
                            "count": 2,
                        },
                    }
                ]
            }
        },
    }


def group_with_claim() -> dict[str, Any]:
    group = native_podgroup_obj("train", 4)
    group["spec"]["resourceClaims"] = [dict(ENTRY)]
    return group


def member(index: int) -> dict[str, Any]:
    pod = native_gang_pod("train", index, gpus=0)
    pod["spec"]["resourceClaims"] = [dict(ENTRY)]
    return pod


def seed_cluster(api: KubeApiEmulator) -> None:
    """n0 has one GPU, n1 and n2 two each: the claim of two fits on n1 or n2 only."""
    api.put(DEVICE_CLASSES, device_class_obj())
    for name, gpus in (("n0", 1), ("n1", 2), ("n2", 2)):
        api.put_node(node_obj(name))
        api.put(RESOURCE_SLICES, slice_obj(name, gpus=gpus))
    for i in range(4):
        api.put_pod(member(i))


def podgroup_consumer(api: KubeApiEmulator) -> dict[str, str]:
    group = api.get(NATIVE_PODGROUPS, "default", "train")
    assert group is not None
    uid = group["metadata"]["uid"]
    return {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": uid}


def shared_status(api: KubeApiEmulator) -> dict[str, Any]:
    claim = api.get(RESOURCE_CLAIMS, "default", "shared")
    assert claim is not None
    status = claim.get("status") or {}
    assert isinstance(status, dict)
    return status


@pytest.mark.asyncio
async def test_a_gang_binds_whole_on_its_group_claim_reserved_for_the_podgroup(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            seed_cluster(api)
            # Created as a tenant would: through the validating API.
            async with KubeClient(await api_client(api.base_url)) as kube:
                await kube.request_json("POST", CLAIMS, body=two_gpu_claim())
                await kube.request_json("POST", GROUPS, body=group_with_claim())
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "train-")) == 4, "the gang bound")
            nodes = {p["spec"]["nodeName"] for p in bound(api, "train-").values()}
            assert len(nodes) == 1 and nodes <= {"n1", "n2"}
            status = shared_status(api)
            results = status["allocation"]["devices"]["results"]
            assert len(results) == 2 and {r["pool"] for r in results} == nodes
            # Reserved once, for the PodGroup: no pod entry.
            assert status["reservedFor"] == [podgroup_consumer(api)]

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def planned(api: KubeApiEmulator, client: KubeClient) -> tuple[SchedulingCore, Any, Plan]:
    """The cluster above, the claim and PodGroup created through the API, and the
    core's plan for the gang (the real planner, fed what the informers would give)."""
    seed_cluster(api)
    await client.request_json("POST", CLAIMS, body=two_gpu_claim())
    await client.request_json("POST", GROUPS, body=group_with_claim())
    core = SchedulingCore(build_profile())
    core.replace_nodes(api.nodes(), 0.0)
    for rtype in (DEVICE_CLASSES, RESOURCE_SLICES, RESOURCE_CLAIMS):
        for obj in api.objects(rtype):
            core.apply_dra_object(rtype.plural, "ADDED", obj, 0.0)
    group = api.get(NATIVE_PODGROUPS, "default", "train")
    assert group is not None
    core.apply_gang_group(native_podgroup_from_api, EventType.ADDED, group, 0.0)
    core.replace_pods(api.pods(), 0.0)
    attempt = core.schedule_next(0.0)
    assert attempt is not None and isinstance(attempt.result, Plan), attempt
    return core, attempt.gang, attempt.result


@pytest.mark.asyncio
async def test_a_gang_broken_before_any_member_binds_gives_the_group_claim_back(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    core, gang, plan = await planned(api, client)
    [claim] = plan.claims
    assert [c.resource for c in claim.reserved_for] == ["podgroups"]
    api.fail_next_binds(4, status=409)
    writer = ClaimWriter(client, core.dra)
    result, undo = await bind_and_settle(core, GangBinder(client), gang, plan, claims=writer)
    assert not result.ok and undo is not None and not result.bound
    # Every member known unbound: the PodGroup's entry goes, and the allocation with it.
    assert shared_status(api) == {}
    assert core.dra.hold_state("default/shared") is None


@pytest.mark.asyncio
async def test_a_group_claim_stays_reserved_while_a_member_it_serves_stays_bound(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    core, gang, plan = await planned(api, client)
    api.fail_next_binds(1, status=409, after=1)
    writer = ClaimWriter(client, core.dra)
    binder = GangBinder(client, concurrency=1, on_failure="keep")
    result, _ = await bind_and_settle(core, binder, gang, plan, claims=writer)
    assert not result.ok and result.bound and len(result.failed) == 1
    # The bound member uses the devices through its PodGroup: the entry stays.
    status = shared_status(api)
    assert status["reservedFor"] == [podgroup_consumer(api)]
    assert len(status["allocation"]["devices"]["results"]) == 2


@pytest.mark.asyncio
async def test_a_broken_gang_gives_its_group_claim_back_once_no_member_is_on_a_node(
    tmp_path: Path,
) -> None:
    """The 2nd Binding is refused: the gang breaks and its bound members are deleted.
    While they are on their node the PodGroup keeps the claim (their devices are in
    use); once they are gone and the gang waits, the scheduler takes the PodGroup off
    the claim and deallocates it, as kube-scheduler's PostFilter does. The members
    recreated, the gang binds on a fresh allocation."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            seed_cluster(api)
            async with KubeClient(await api_client(api.base_url)) as kube:
                await kube.request_json("POST", CLAIMS, body=two_gpu_claim())
                await kube.request_json("POST", GROUPS, body=group_with_claim())
            api.fail_next_binds(1, status=409, after=1)
            async with running(api, tmp_path):
                await eventually(
                    lambda: api.request_count("delete", "pods") > 0, "the bound members deleted"
                )
                await eventually(
                    lambda: shared_status(api) == {}, "the PodGroup's claim given back"
                )
                for i in range(4):
                    if api.get_pod("default", f"train-{i}") is None:
                        api.put_pod(member(i))
                await eventually(lambda: len(bound(api, "train-")) == 4, "the gang bound")
                status = shared_status(api)
                assert status["reservedFor"] == [podgroup_consumer(api)]
                assert len(status["allocation"]["devices"]["results"]) == 2

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_release_leaves_a_claim_changed_since_the_core_judged_it(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """The release is conditional on the version the core saw: a claim written since
    (our own plan's reservation among others) is judged again, never released blind."""
    core, gang, plan = await planned(api, client)
    result, _ = await bind_and_settle(
        core, GangBinder(client), gang, plan, claims=ClaimWriter(client, core.dra)
    )
    assert result.ok
    stored = api.get(RESOURCE_CLAIMS, "default", "shared")
    assert stored is not None
    seen = claim_from_api(stored)
    stored["metadata"]["labels"] = {"touched": "yes"}
    api.put(RESOURCE_CLAIMS, stored)
    group_uid = podgroup_consumer(api)["uid"]
    writer = ClaimWriter(client, core.dra)
    assert await writer.release_group_reservations([(seen, group_uid)]) == 0
    assert shared_status(api)["reservedFor"] == [podgroup_consumer(api)]
    fresh = api.get(RESOURCE_CLAIMS, "default", "shared")
    assert fresh is not None
    assert await writer.release_group_reservations([(claim_from_api(fresh), group_uid)]) == 1
    assert shared_status(api) == {}
