"""A DRA gang whose first attempt breaks on a Binding binds on the retry, end to end: the
scheduler's planner (whole-gang claims, dra-plan) and its claim writes and rollback
(dra-kube) run together in `run_scheduler` against the API emulator, with the
resourceclaim controller stand-in acting where a test says.

After the retry: every member bound, every allocated claim reserved only for bound pods
(once the controller has removed the entries of pods that are gone), and no device
allocated to two claims.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from scheduler.kube.binder import GangBinder, bind_and_settle
from scheduler.kube.client import KubeClient
from scheduler.kube.dra_claims import ClaimWriter
from scheduler.planner.result import Plan, Unschedulable
from tests.dra_objects import device_class_obj, slice_obj
from tests.factories import node_obj, pod_obj
from tests.kube.test_binder import core_from, plan_next
from tests.kube.test_dra_writes import stored_as_created
from tests.kube.test_runner import TEST_TIMEOUT, bound, running
from tests.kubeapi import (
    DEVICE_CLASSES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeApiEmulator,
    api_client,
)
from tests.kubeapi.resourceclaim_controller import ResourceClaimController
from tests.waiting import eventually

pytestmark = pytest.mark.asyncio


def member(index: int, uid: str = "") -> dict[str, Any]:
    pod = pod_obj(f"dra-{index}", gang="dra", min_member=2)
    if uid:
        pod["metadata"]["uid"] = uid  # a pod created again: a new uid
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"dra-{index}"}]
    return pod


def allocated_devices(api: KubeApiEmulator) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of every allocation on every claim, repeats kept."""
    return [
        (r["driver"], r["pool"], r["device"])
        for c in api.objects(RESOURCE_CLAIMS)
        for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
            "results", []
        )
    ]


def reservations(api: KubeApiEmulator) -> dict[str, list[str]]:
    """Claim name -> the pod uids it is reserved for, of every allocated claim."""
    return {
        c["metadata"]["name"]: [r["uid"] for r in c["status"].get("reservedFor", [])]
        for c in api.objects(RESOURCE_CLAIMS)
        if (c.get("status") or {}).get("allocation")
    }


@pytest.mark.parametrize("controller_first", [False, True], ids=["stale-entry", "deallocated"])
async def test_a_dra_gang_broken_by_a_binding_binds_on_the_retry(
    tmp_path: Path, controller_first: bool
) -> None:
    """The 2nd Binding is refused (409): the bound member is deleted (onBindFailure:
    delete), the unbound member's claim rolled back. Its controller creates the deleted
    member again (a new uid, the same claim), either before the resourceclaim controller
    has acted (the claim still allocated and reserved for the pod that is gone) or after
    it deallocated the claim; the gang then binds, each claim on a device of its own."""

    async def scenario() -> None:
        async with KubeApiEmulator() as api, KubeClient(await api_client(api.base_url)) as kube:
            controller = ResourceClaimController(kube)
            api.put_node(node_obj("n0", gpus=2))
            api.put(DEVICE_CLASSES, device_class_obj())
            api.put(RESOURCE_SLICES, slice_obj("n0", gpus=2))
            for i in range(2):
                api.put(RESOURCE_CLAIMS, stored_as_created(f"dra-{i}"))
            api.fail_next_binds(1, status=409, after=1)
            for i in range(2):
                api.put_pod(member(i))
            async with running(api, tmp_path):
                await eventually(lambda: len(api.pods()) == 1, "the bound member deleted")
                [left] = [p["metadata"]["name"] for p in api.pods()]
                assert not bound(api)
                gone = 1 - int(left.removeprefix("dra-"))
                # The unbound member's claim is rolled back (after the delete); only the
                # deleted member's claim stays allocated, reserved for it.
                await eventually(
                    lambda: reservations(api) == {f"dra-{gone}": [f"uid-default-dra-{gone}"]},
                    "the unbound member's claim rolled back",
                )
                if controller_first:
                    await controller.sync()
                    assert reservations(api) == {}
                api.put_pod(member(gone, uid=f"again-{gone}"))
                await eventually(lambda: len(bound(api, "dra-")) == 2, "the gang bound on retry")
            await controller.sync()  # entries of pods that are gone removed
            live = {p["metadata"]["uid"] for p in bound(api).values()}
            held = reservations(api)
            assert sorted(held) == ["dra-0", "dra-1"]
            assert all(uids and set(uids) <= live for uids in held.values()), held
            devices = allocated_devices(api)
            assert len(devices) == 2 and not [d for d, n in Counter(devices).items() if n > 1]
            assert api.request_count("create", "pods", "binding") == 4

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)


async def test_a_refused_claim_write_wakes_the_dra_gang_waiting_for_its_device(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """Pod a is planned onto the only device; pod b then waits for a device to change.
    a's claim status write is refused (403: nothing of ours lands, so no claim event
    will follow): the device a held is free again, and b, waiting for exactly that, is
    planned at once rather than after maxUnschedulableSeconds."""
    api.put_node(node_obj("n0", gpus=0))
    api.put(DEVICE_CLASSES, device_class_obj())
    api.put(RESOURCE_SLICES, slice_obj("n0", gpus=1))
    for name in ("a", "b"):
        api.put(RESOURCE_CLAIMS, stored_as_created(name))
        pod = pod_obj(name, created=f"2026-01-01T00:00:0{ord(name) - ord('a')}Z")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
        api.put_pod(pod)
    core = core_from(api)
    for kind, rtype in (
        ("deviceclasses", DEVICE_CLASSES),
        ("resourceslices", RESOURCE_SLICES),
        ("resourceclaims", RESOURCE_CLAIMS),
    ):
        for obj in api.objects(rtype):
            core.apply_dra_object(kind, "ADDED", obj, 0.0)
    gang, plan = plan_next(core)
    assert [p.name for p in gang.pending] == ["a"]
    waiting = core.schedule_next(0.0)
    assert waiting is not None and isinstance(waiting.result, Unschedulable)
    assert core.schedule_next(0.0) is None  # b waits for a change
    api.fail_requests("patch", "resourceclaims", "status", count=1, status=403)
    result, _ = await bind_and_settle(
        core,
        GangBinder(client),
        gang,
        plan,
        clock=lambda: 1.0,
        claims=ClaimWriter(client, core.dra),
    )
    assert not result.ok and not core.dra.is_assumed("default/a")
    attempt = core.schedule_next(1.0)  # a is backing off; b was woken
    assert attempt is not None and isinstance(attempt.result, Plan), attempt
    assert [p.name for p in attempt.gang.pending] == ["b"]
