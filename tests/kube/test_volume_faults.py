"""PreBind's volume writes under API faults and tenant tampering, through the real
client against the emulator over HTTP.

Invariants: a write whose outcome is unknown (5xx after it may have landed, a timeout)
is taken back like one that landed; a value this scheduler did not write (a tenant's,
or another scheduler's, already on the claim, or written meanwhile) is never removed;
an undo that meets a transient failure is tried again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from cache.volumes import SELECTED_NODE_ANNOTATION, VolumeCache
from policies.filters.volume_binding import ClaimChoice
from scheduler.kube.client import KubeClient
from scheduler.kube.volumes import VolumePrebinder
from tests.factories import pod_obj
from tests.kube.test_runner import bound, unschedulable_message
from tests.kube.test_volumes import TEST_TIMEOUT, nodes, running
from tests.kubeapi import (
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    KubeApiEmulator,
)
from tests.volume_objects import csinode_obj, pv_obj, pvc_obj, storage_class_obj, with_claims
from tests.waiting import eventually


def _seed(api: KubeApiEmulator, names: list[str], **annotations: str) -> VolumeCache:
    """Claims on the server, and the cache a plan is made from (what a watch gave)."""
    cache = VolumeCache()
    for name in names:
        stored = api.put(
            PERSISTENT_VOLUME_CLAIMS, pvc_obj(name, storage_class="any", annotations=annotations)
        )
        cache.apply_claim("ADDED", stored)
    return cache


def _choices(cache: VolumeCache, node: str) -> dict[str, list[ClaimChoice]]:
    return {f"pod-{key}": [ClaimChoice(claim, node)] for key, claim in sorted(cache.claims.items())}


def _selected(api: KubeApiEmulator, name: str) -> str | None:
    obj: Any = api.get(PERSISTENT_VOLUME_CLAIMS, "default", name)
    assert obj is not None
    return (obj["metadata"].get("annotations") or {}).get(SELECTED_NODE_ANNOTATION)


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [500, 503, 504])
async def test_a_claim_write_that_landed_before_an_error_is_taken_back(
    api: KubeApiEmulator, client: KubeClient, status: int
) -> None:
    cache = _seed(api, ["data-0", "data-1"])
    # The first claim patch lands, then the answer is lost (a 5xx after the write).
    api.fail_requests("patch", "persistentvolumeclaims", committed=True, status=status)
    prebinder = VolumePrebinder(client)
    result = await prebinder.prebind(_choices(cache, "n1"), cache)
    assert not result.ok
    assert {_selected(api, "data-0"), _selected(api, "data-1")} == {"n1"}
    undo = await prebinder.undo(result)
    assert not undo.errors
    assert _selected(api, "data-0") is None and _selected(api, "data-1") is None


@pytest.mark.asyncio
async def test_a_refused_write_is_not_taken_back_so_a_value_written_by_another_stays(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """409: the claim moved since the plan (here a tenant set the same node meanwhile).
    The write did not land, so nothing of ours is there: the undo leaves it alone even
    though the value is equal to the one we tried."""
    cache = _seed(api, ["data-0"])
    stored: Any = api.get(PERSISTENT_VOLUME_CLAIMS, "default", "data-0")
    stored["metadata"]["annotations"] = {SELECTED_NODE_ANNOTATION: "n1"}
    api.put(PERSISTENT_VOLUME_CLAIMS, stored)
    prebinder = VolumePrebinder(client)
    result = await prebinder.prebind(_choices(cache, "n1"), cache)
    assert not result.ok and "409" in result.reason
    await prebinder.undo(result)
    assert _selected(api, "data-0") == "n1"


@pytest.mark.asyncio
async def test_a_node_already_selected_on_the_claim_is_never_removed_by_an_undo(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """A tenant (or kube-scheduler, for another pod of the claim) set the annotation
    before the plan; the plan follows it. When the gang breaks, the undo must not take
    away a value that was not ours: a provisioner may be working on it."""
    cache = _seed(api, ["data-0", "data-1"], **{SELECTED_NODE_ANNOTATION: "n1"})
    prebinder = VolumePrebinder(client)
    result = await prebinder.prebind(_choices(cache, "n1"), cache)
    assert result.ok
    undo = await prebinder.undo(result)
    assert not undo.errors
    assert _selected(api, "data-0") == "n1" and _selected(api, "data-1") == "n1"


@pytest.mark.asyncio
async def test_an_undo_that_meets_a_transient_failure_is_tried_again(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    cache = _seed(api, ["data-0"])
    prebinder = VolumePrebinder(client, undo_retry_pause=0.0)
    result = await prebinder.prebind(_choices(cache, "n1"), cache)
    assert result.ok and _selected(api, "data-0") == "n1"
    api.fail_requests("patch", "persistentvolumeclaims", count=2, status=503)
    undo = await prebinder.undo(result)
    assert not undo.errors and _selected(api, "data-0") is None


@pytest.mark.asyncio
async def test_a_claim_deleted_mid_prebind_fails_the_write_and_the_undo_is_quiet(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    cache = _seed(api, ["data-0", "data-1"])
    api.delete(PERSISTENT_VOLUME_CLAIMS, "default", "data-1")
    prebinder = VolumePrebinder(client)
    result = await prebinder.prebind(_choices(cache, "n1"), cache)
    assert not result.ok and "404" in result.reason
    undo = await prebinder.undo(result)
    assert not undo.errors and _selected(api, "data-0") is None


@pytest.mark.asyncio
async def test_a_value_changed_after_our_write_is_not_removed_by_the_undo(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    cache = _seed(api, ["data-0"])
    prebinder = VolumePrebinder(client)
    result = await prebinder.prebind(_choices(cache, "n1"), cache)
    stored: Any = api.get(PERSISTENT_VOLUME_CLAIMS, "default", "data-0")
    stored["metadata"]["annotations"][SELECTED_NODE_ANNOTATION] = "n7"
    api.put(PERSISTENT_VOLUME_CLAIMS, stored)
    undo = await prebinder.undo(result)
    assert not undo.errors and _selected(api, "data-0") == "n7"


@pytest.mark.asyncio
async def test_a_pv_an_administrator_pre_bound_to_the_claim_keeps_its_claim_ref_after_an_undo(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    cache = _seed(api, ["data-0"])
    cache.apply_volume(
        "ADDED", api.put(PERSISTENT_VOLUMES, pv_obj("disk", node="n1", claim=("default", "data-0")))
    )
    claim = cache.claims["default/data-0"]
    prebinder = VolumePrebinder(client)
    result = await prebinder.prebind({"pod": [ClaimChoice(claim, "n1", "disk")]}, cache)
    assert result.ok
    await prebinder.undo(result)
    stored: Any = api.get(PERSISTENT_VOLUMES, "", "disk")
    assert stored["spec"]["claimRef"]["name"] == "data-0"


@pytest.mark.asyncio
async def test_hostile_storage_objects_from_a_lenient_server_stop_nothing(tmp_path: Path) -> None:
    """Objects the real server would refuse (stored here without validation, as an
    older or lenient server may have): a StorageClass whose allowedTopologies is not a
    list, a claim whose ownerReferences is a number, a CSINode whose drivers is a
    string. The scheduler keeps running, the pod using the broken class waits with a
    reason naming it, and a well-formed gang with its own claims binds."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            nodes(api)
            api.put(STORAGE_CLASSES, storage_class_obj("any", provisioner="ebs.csi.aws.com"))
            broken = storage_class_obj("broken", provisioner="ebs.csi.aws.com")
            broken["allowedTopologies"] = "zone-a"
            api.put(STORAGE_CLASSES, broken)
            api.put(CSI_NODES, {**csinode_obj("n0", {}), "spec": {"drivers": "ebs"}})
            odd = pvc_obj("odd", storage_class="broken")
            odd["metadata"]["ownerReferences"] = 5
            api.put(PERSISTENT_VOLUME_CLAIMS, odd)
            api.put_pod(with_claims(pod_obj("victim", gpus=1), "odd"))
            for i in range(2):
                api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj(f"data-{i}", storage_class="any"))
                api.put_pod(with_claims(pod_obj(f"w-{i}", gang="w", min_member=2), f"data-{i}"))
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "w-")) == 2, "the good gang binds")
                await eventually(
                    lambda: (
                        'storageclass "broken": allowedTopologies'
                        in unschedulable_message(api.get_pod("default", "victim") or {})
                    ),
                    "the pod says which object is broken",
                )
                assert "victim" not in bound(api)

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
@pytest.mark.parametrize(("status", "committed"), [(409, False), (500, True), (503, False)])
async def test_a_gang_whose_claim_writes_fail_binds_later_with_each_claim_on_its_pods_node(
    tmp_path: Path, status: int, committed: bool
) -> None:
    """The first claim write fails (409: the claim moved; 500 after it landed; 503
    before): no member is bound on that attempt, and when the retry binds the gang,
    every claim names the node its own pod runs on."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api:
            nodes(api)
            api.put(STORAGE_CLASSES, storage_class_obj("any", provisioner="ebs.csi.aws.com"))
            for i in range(3):
                api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj(f"data-{i}", storage_class="any"))
            api.fail_requests("patch", "persistentvolumeclaims", status=status, committed=committed)
            for i in range(3):
                api.put_pod(
                    with_claims(pod_obj(f"g-{i}", gang="g", min_member=3, cpu="20"), f"data-{i}")
                )
            async with running(api, tmp_path):
                await eventually(lambda: len(bound(api, "g-")) == 3, "bound on a retry")
            first_bind = next(
                i
                for i, r in enumerate(api.request_log)
                if (r.verb, r.resource, r.subresource) == ("create", "pods", "binding")
            )
            failed = [
                i
                for i, r in enumerate(api.request_log)
                if r.resource == "persistentvolumeclaims" and r.status == status
            ]
            assert failed and failed[0] < first_bind
            for i in range(3):
                node = bound(api, "g-")[f"g-{i}"]["spec"]["nodeName"]
                assert _selected(api, f"data-{i}") == node

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


@pytest.mark.asyncio
async def test_a_pv_gone_from_the_cache_is_never_patched_without_a_precondition(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """The PV the plan chose was deleted (its event arrived) and an administrator
    recreated one under the same name for another claim: the write would carry no
    resourceVersion, so it is not sent at all."""
    cache = _seed(api, ["data-0"])
    planned = api.put(PERSISTENT_VOLUMES, pv_obj("disk", node="n1"))
    cache.apply_volume("ADDED", planned)
    claim = cache.claims["default/data-0"]
    cache.apply_volume("DELETED", planned)
    api.put(PERSISTENT_VOLUMES, pv_obj("disk", node="n1", claim=("default", "other")))
    prebinder = VolumePrebinder(client)
    result = await prebinder.prebind({"pod": [ClaimChoice(claim, "n1", "disk")]}, cache)
    assert not result.ok and "no longer known" in result.reason
    stored: Any = api.get(PERSISTENT_VOLUMES, "", "disk")
    assert stored["spec"]["claimRef"]["name"] == "other"
    assert api.request_count("patch", "persistentvolumes") == 0


@pytest.mark.asyncio
async def test_a_claim_without_a_resource_version_is_never_patched_unconditionally(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj("data-0", storage_class="any"))
    cache = VolumeCache()
    cache.apply_claim("ADDED", pvc_obj("data-0", storage_class="any", resource_version=""))
    result = await VolumePrebinder(client).prebind(_choices(cache, "n1"), cache)
    assert not result.ok and _selected(api, "data-0") is None
    assert api.request_count("patch", "persistentvolumeclaims") == 0
