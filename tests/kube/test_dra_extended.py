"""DRA-backed extended resources through the real client over real HTTP against the API
emulator (docs/dra.md, "Extended resources"): a gang asking `nvidia.com/gpu: 2` each on
nodes that do not advertise it, a DeviceClass naming it; the claim created for each
pod (generated name, the pod its owner, the annotation), its status, the pod's
`status.extendedResourceClaimStatus`, all before the first Binding; and a broken gang's
claims deleted again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cache.dra.claims import EXTENDED_CLAIM_ANNOTATION
from scheduler.cycle.core import SchedulingCore
from scheduler.kube.binder import GangBinder, bind_and_settle
from scheduler.kube.client import KubeClient
from scheduler.kube.dra_claims import DELETE_PROTECTION_FINALIZER, ClaimWriter
from tests.dra_objects import GPU_CLASS, device_class_obj, slice_obj
from tests.factories import node_obj, pod_obj
from tests.kube.test_binder import core_from, plan_next
from tests.kube.test_runner import bound, running
from tests.kubeapi import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES, KubeApiEmulator
from tests.scheduler.dra_cores import KINDS
from tests.waiting import eventually

GPU = "nvidia.com/gpu"


def gpu_class() -> dict[str, Any]:
    obj = device_class_obj()
    obj["spec"]["extendedResourceName"] = GPU
    return obj


def seed(api: KubeApiEmulator, size: int = 2) -> None:
    """Two nodes with no nvidia.com/gpu allocatable, 4 DRA GPUs each, and a gang of
    `size` asking 2 GPUs each."""
    api.put(DEVICE_CLASSES, gpu_class())
    for node in ("n0", "n1"):
        api.put_node(node_obj(node))
        api.put(RESOURCE_SLICES, slice_obj(node, gpus=4))
    for i in range(size):
        api.put_pod(pod_obj(f"train-{i}", gang="train", min_member=size, gpus=2))


def extended_claims(api: KubeApiEmulator) -> dict[str, dict[str, Any]]:
    """Pod name -> the extended-resource claim it owns."""
    found = {}
    for claim in api.objects(RESOURCE_CLAIMS):
        meta = claim["metadata"]
        if (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true":
            found[meta["ownerReferences"][0]["name"]] = claim
    return found


def core_with_dra(api: KubeApiEmulator) -> SchedulingCore:
    core = core_from(api)
    for kind, rtype in (
        ("DeviceClass", DEVICE_CLASSES),
        ("ResourceSlice", RESOURCE_SLICES),
    ):
        for obj in api.objects(rtype):
            core.apply_dra_object(KINDS[kind], "ADDED", obj, 0.0)
    return core


def order(api: KubeApiEmulator) -> list[str]:
    return [
        f"{r.verb} {r.resource}/{r.subresource}".rstrip("/") for r in api.request_log if r.status
    ]


@pytest.mark.asyncio
async def test_each_member_gets_its_claim_status_and_pod_status_before_the_bindings(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed(api)
    core = core_with_dra(api)
    gang, plan = plan_next(core)
    assert len([c for c in plan.claims if c.extended is not None]) == 2
    api.request_log.clear()
    result, undo = await bind_and_settle(
        core, GangBinder(client), gang, plan, claims=ClaimWriter(client, core.dra)
    )
    assert result.ok and undo is None, result.reason
    log = order(api)
    first_bind = log.index("create pods/binding")
    assert log[:first_bind].count("create resourceclaims") == 2
    assert log[:first_bind].count("patch resourceclaims/status") == 2
    assert log[:first_bind].count("patch pods/status") == 2
    claims = extended_claims(api)
    assert sorted(claims) == ["train-0", "train-1"]
    for pod_name, claim in claims.items():
        meta = claim["metadata"]
        pod = api.get_pod("default", pod_name)
        assert meta["name"].startswith(f"{pod_name}-extended-resources-")
        owner = meta["ownerReferences"][0]
        assert owner["kind"] == "Pod" and owner["uid"] == pod["metadata"]["uid"]
        assert owner["controller"] is True
        assert DELETE_PROTECTION_FINALIZER in meta["finalizers"]
        [request] = claim["spec"]["devices"]["requests"]
        assert request["name"] == "container-0-request-2"
        assert request["exactly"]["deviceClassName"] == GPU_CLASS
        assert request["exactly"]["count"] == 2
        status = claim["status"]
        assert len(status["allocation"]["devices"]["results"]) == 2
        assert status["reservedFor"] == [
            {"resource": "pods", "name": pod_name, "uid": pod["metadata"]["uid"]}
        ]
        assert pod["status"]["extendedResourceClaimStatus"] == {
            "requestMappings": [
                {
                    "containerName": "main",
                    "resourceName": GPU,
                    "requestName": "container-0-request-2",
                }
            ],
            "resourceClaimName": meta["name"],
        }
        assert pod["spec"]["nodeName"]
    devices = [
        (r["pool"], r["device"])
        for c in claims.values()
        for r in c["status"]["allocation"]["devices"]["results"]
    ]
    assert len(set(devices)) == 4
    # The created claims' events end the holds of the claims planned under made-up names.
    for claim in api.objects(RESOURCE_CLAIMS):
        core.apply_dra_object("resourceclaims", "ADDED", claim, 0.0)
    assert not any(core.dra.is_assumed(c.key) for c in plan.claims)
    assert len(core.dra.taken()) == 4


@pytest.mark.asyncio
async def test_a_broken_gang_deletes_the_claims_it_created(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """Every Binding refused: the gang breaks, no member is bound, and the claims
    created for them are deleted (the finalizer taken off first); the holds end."""
    seed(api)
    core = core_with_dra(api)
    gang, plan = plan_next(core)
    api.fail_next_binds(2, status=409)
    result, _ = await bind_and_settle(
        core, GangBinder(client), gang, plan, claims=ClaimWriter(client, core.dra)
    )
    assert not result.ok
    assert extended_claims(api) == {}
    assert api.request_count("delete", "resourceclaims") == 2
    assert not any(core.dra.is_assumed(c.key) for c in plan.claims)
    assert core.dra.taken() == frozenset()


@pytest.mark.asyncio
async def test_a_refused_pod_status_write_deletes_the_claim_and_binds_nobody(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """The pod's status write is refused (here: the pod is gone meanwhile): the claim
    created for it is deleted, no Binding is sent."""
    seed(api, size=1)
    core = core_with_dra(api)
    gang, plan = plan_next(core)
    api.delete_pod("default", "train-0")
    result, _ = await bind_and_settle(
        core, GangBinder(client), gang, plan, claims=ClaimWriter(client, core.dra)
    )
    assert not result.ok and "pod status" in result.reason
    assert api.request_count("create", "pods", "binding") == 0
    assert extended_claims(api) == {}
    assert core.dra.taken() == frozenset()


@pytest.mark.asyncio
async def test_end_to_end_the_gang_binds_on_dra_devices(tmp_path: Path) -> None:
    async with KubeApiEmulator() as api:
        seed(api, size=4)
        async with running(api, tmp_path):
            await eventually(lambda: len(bound(api, "train-")) == 4, "the gang bound")
        claims = extended_claims(api)
        assert sorted(claims) == [f"train-{i}" for i in range(4)]
        devices = [
            (r["pool"], r["device"])
            for c in claims.values()
            for r in c["status"]["allocation"]["devices"]["results"]
        ]
        assert len(set(devices)) == 8


@pytest.mark.asyncio
async def test_a_create_whose_answer_is_lost_is_found_by_its_owner_and_deleted(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """The claim is created but the answer is a 500: the create is not sent again (a
    generated name would make a second claim); the gang breaks and the rollback finds
    the claim by its annotation and owner, and deletes it."""
    seed(api, size=1)
    core = core_with_dra(api)
    gang, plan = plan_next(core)
    api.fail_requests("create", "resourceclaims", status=500, committed=True)
    result, _ = await bind_and_settle(
        core, GangBinder(client), gang, plan, claims=ClaimWriter(client, core.dra)
    )
    assert not result.ok and "create" in result.reason
    assert api.request_count("create", "resourceclaims") == 1
    assert api.request_count("create", "pods", "binding") == 0
    assert extended_claims(api) == {}
    assert api.request_count("delete", "resourceclaims") == 1
    assert core.dra.taken() == frozenset()


@pytest.mark.asyncio
async def test_a_claim_left_by_an_earlier_attempt_is_deleted_then_the_pod_binds(
    tmp_path: Path,
) -> None:
    """A claim an earlier attempt created for a pending pod (a crash between create and
    Binding: annotated, controlled by the pod, the finalizer on, allocated): deleted as
    kube-scheduler's PostFilter deletes it, then the pod gets a new one and binds."""
    async with KubeApiEmulator() as api:
        seed(api, size=1)
        pod = api.get_pod("default", "train-0")
        assert pod is not None
        left = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": "train-0-extended-resources-old",
                "namespace": "default",
                "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                "finalizers": [DELETE_PROTECTION_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": "train-0",
                        "uid": pod["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "container-0-request-2",
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
        api.put(RESOURCE_CLAIMS, left)
        async with running(api, tmp_path):
            await eventually(lambda: len(bound(api, "train-")) == 1, "the pod bound")
        assert api.get(RESOURCE_CLAIMS, "default", "train-0-extended-resources-old") is None
        [claim] = extended_claims(api).values()
        assert claim["status"]["allocation"]
        stored = api.get_pod("default", "train-0")
        assert stored is not None
        assert (
            stored["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
            == claim["metadata"]["name"]
        )
