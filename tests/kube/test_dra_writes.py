"""DRA claim writes of a gang, through the real client over real HTTP against the API
emulator (which validates claim status as Kubernetes 1.36 does): every claim's
allocation and reservedFor before the first Binding, all or nothing, and the rollback
when a claim write or a Binding fails (scheduler/kube/dra_claims.py, docs/dra.md
"Writes and rollback").

Plans are built by hand (`with_claims`, the devices chosen by the test); the claims are
held in the core's own DraCache, which the binder settles through the core.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from cache.dra.claims import Allocation, Consumer, claim_from_api
from cache.dra.store import DraCache, Hold
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import Gang
from scheduler.kube.binder import GangBinder, bind_and_settle
from scheduler.kube.call_policy import CallPolicy
from scheduler.kube.client import KubeClient
from scheduler.kube.dra_claims import DELETE_PROTECTION_FINALIZER, ClaimWriter
from scheduler.planner.result import ClaimAllocation, Plan
from tests.dra_objects import allocation, claim_obj
from tests.kube.test_binder import core_from, plan_next, seed_gang
from tests.kubeapi import RESOURCE_CLAIMS, KubeApiEmulator
from tests.kubeapi.resourceclaim_controller import ResourceClaimController

FAST = CallPolicy(timeout_seconds=2.0, initial_backoff_seconds=0.01, max_backoff_seconds=0.02)


def parsed_allocation(node: str, device: str) -> Allocation:
    claim = claim_obj("x", namespace="default")
    claim["status"] = {"allocation": allocation(node, (device,))}
    found = claim_from_api(claim).allocation
    assert found is not None
    return found


def stored_as_created(name: str) -> dict[str, Any]:
    """A claim as the API server stores it after its create (spec defaulted): seeded
    with `put`, which skips the create strategy."""
    claim = claim_obj(name, namespace="default")
    claim["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "ExactCount"
    return claim


def seed_claims(api: KubeApiEmulator, names: list[str], dra: DraCache | None = None) -> DraCache:
    """Claims on the server, and the DRA cache a plan is made from (what a watch gave):
    `dra` (the core's) when given."""
    dra = DraCache() if dra is None else dra
    for name in names:
        dra.apply_claim("ADDED", api.put(RESOURCE_CLAIMS, stored_as_created(name)))
    return dra


def with_claims(plan: Plan, gang: Gang, dra: DraCache, shared: str = "") -> Plan:
    """The plan with one claim per member (`<pod>-gpu`, device gpu-<i> of its node), or
    one claim `shared` for every member; the allocations held in `dra` as the core's
    assume would hold them."""
    pods = {pod.uid: pod for pod in gang.pending}
    claims: list[ClaimAllocation] = []
    if shared:
        known = dra.claims[f"default/{shared}"]
        node = plan.placements[0].node
        consumers = tuple(
            Consumer("pods", pods[p.pod_uid].name, p.pod_uid) for p in plan.placements
        )
        claims.append(
            ClaimAllocation(
                "default",
                shared,
                known.uid,
                known.resource_version,
                parsed_allocation(node, "gpu-0"),
                consumers,
            )
        )
    else:
        for index, placement in enumerate(plan.placements):
            pod = pods[placement.pod_uid]
            known = dra.claims[f"default/{pod.name}-gpu"]
            claims.append(
                ClaimAllocation(
                    "default",
                    known.name,
                    known.uid,
                    known.resource_version,
                    parsed_allocation(placement.node, f"gpu-{index}"),
                    (Consumer("pods", pod.name, pod.uid),),
                )
            )
    dra.assume([(c.key, c.allocation) for c in claims if c.allocation is not None])
    return dataclasses.replace(plan, claims=tuple(claims))


def stored_claim(api: KubeApiEmulator, name: str) -> dict[str, Any]:
    found = api.get(RESOURCE_CLAIMS, "default", name)
    assert found is not None
    return found


def allocated(api: KubeApiEmulator) -> dict[str, list[str]]:
    """Claim name -> the pod names it is reserved for, of every allocated claim."""
    return {
        c["metadata"]["name"]: [r["name"] for r in c["status"].get("reservedFor", [])]
        for c in api.objects(RESOURCE_CLAIMS)
        if (c.get("status") or {}).get("allocation")
    }


def reserved_anywhere(api: KubeApiEmulator) -> list[str]:
    return [
        r["name"]
        for c in api.objects(RESOURCE_CLAIMS)
        for r in (c.get("status") or {}).get("reservedFor", [])
    ]


async def gang_with_claims(
    api: KubeApiEmulator, size: int = 2, shared: bool = False
) -> tuple[SchedulingCore, Gang, Plan, DraCache]:
    seed_gang(api, size=size, gpus=1)
    names = ["shared"] if shared else [f"train-{i}-gpu" for i in range(size)]
    core = core_from(api)
    dra = seed_claims(api, names, core.dra)
    gang, plan = plan_next(core)
    return core, gang, with_claims(plan, gang, dra, "shared" if shared else ""), dra


def order(api: KubeApiEmulator) -> list[str]:
    return [
        f"{r.verb} {r.resource}/{r.subresource}".rstrip("/") for r in api.request_log if r.status
    ]


@pytest.mark.asyncio
async def test_every_claim_is_written_before_the_first_binding(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    core, gang, plan, dra = await gang_with_claims(api, size=3)
    api.reset_request_counts()
    api.request_log.clear()
    writer = ClaimWriter(client, dra)
    result, undo = await bind_and_settle(core, GangBinder(client), gang, plan, claims=writer)
    assert result.ok and undo is None
    log = order(api)
    first_bind = log.index("create pods/binding")
    assert log[:first_bind].count("patch resourceclaims/status") == 3
    assert "patch resourceclaims/status" not in log[first_bind:]
    # The finalizer first, then the status, one request each: 2 per claim.
    assert log[:first_bind].count("patch resourceclaims") == 3
    assert api.request_count("patch", "resourceclaims") == 6
    for claim in plan.claims:
        stored = stored_claim(api, claim.name)
        assert DELETE_PROTECTION_FINALIZER in stored["metadata"]["finalizers"]
        assert stored["status"]["reservedFor"] == [
            {
                "resource": "pods",
                "name": claim.reserved_for[0].name,
                "uid": claim.reserved_for[0].uid,
            }
        ]
        assert claim.allocation is not None
        assert stored["status"]["allocation"]["devices"] == claim.allocation.to_api()["devices"]
        # Written: held until the claim's event shows the allocation.
        assert dra.hold_state(claim.key) == Hold.WRITTEN


@pytest.mark.asyncio
async def test_a_409_on_one_claim_breaks_the_whole_gang_and_nothing_stays_allocated(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    core, gang, plan, dra = await gang_with_claims(api, size=3)
    # The last claim changes after the plan (a driver, a user): its write is 409.
    changed = stored_claim(api, "train-2-gpu")
    changed["metadata"]["labels"] = {"touched": "yes"}
    api.put(RESOURCE_CLAIMS, changed)
    api.request_log.clear()
    writer = ClaimWriter(client, dra)
    writer.client.policy = FAST
    result, undo = await bind_and_settle(core, GangBinder(client), gang, plan, claims=writer)
    assert not result.ok and undo is None
    assert "409" in result.reason and "train-2-gpu" in result.reason
    assert api.request_count("create", "pods", "binding") == 0
    # The 409 is not retried: one status patch for that claim.
    conflicts = [r for r in api.request_log if r.status == 409]
    assert len(conflicts) == 1
    assert allocated(api) == {} and reserved_anywhere(api) == []
    assert all(dra.hold_state(c.key) is None for c in plan.claims)
    # The core released the members and will retry the gang.
    assert not core.cache.assumed() and gang.key in core.queue


@pytest.mark.asyncio
async def test_a_claim_deleted_between_plan_and_write_rolls_the_gang_back(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    core, gang, plan, dra = await gang_with_claims(api, size=2)
    api.delete(RESOURCE_CLAIMS, "default", "train-1-gpu")
    writer = ClaimWriter(client, dra)
    result, _ = await bind_and_settle(core, GangBinder(client), gang, plan, claims=writer)
    assert not result.ok and "404" in result.reason
    assert api.request_count("create", "pods", "binding") == 0
    assert allocated(api) == {} and reserved_anywhere(api) == []
    assert all(dra.hold_state(c.key) is None for c in plan.claims)


@pytest.mark.asyncio
async def test_a_claim_the_cache_saw_deleted_is_not_written_at_all(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    core, gang, plan, dra = await gang_with_claims(api, size=2)
    deleted = api.delete(RESOURCE_CLAIMS, "default", "train-1-gpu")
    assert deleted is not None
    dra.apply_claim("DELETED", deleted)
    writer = ClaimWriter(client, dra)
    result, _ = await bind_and_settle(core, GangBinder(client), gang, plan, claims=writer)
    assert not result.ok and "deleted since the plan" in result.reason
    claim_patches = [r for r in api.request_log if r.resource == "resourceclaims"]
    assert all(r.name != "train-1-gpu" for r in claim_patches)
    assert allocated(api) == {}


@pytest.mark.asyncio
async def test_a_claim_allocated_by_someone_else_meanwhile_is_never_deallocated_by_us(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """kube-scheduler allocated the claim for a pod of its own between our plan and our
    write: our write is refused (409), and the rollback leaves its allocation alone."""
    core, gang, plan, dra = await gang_with_claims(api, size=2)
    theirs = stored_claim(api, "train-0-gpu")
    theirs["status"] = {
        "allocation": allocation("n1", ("gpu-7",)),
        "reservedFor": [{"resource": "pods", "name": "other", "uid": "other-uid"}],
    }
    api.put(RESOURCE_CLAIMS, theirs)
    writer = ClaimWriter(client, dra)
    result, _ = await bind_and_settle(core, GangBinder(client), gang, plan, claims=writer)
    assert not result.ok
    assert allocated(api) == {"train-0-gpu": ["other"]}


@pytest.mark.asyncio
async def test_a_lost_answer_then_409_is_read_back_and_counts_as_landed(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """The first status write lands but its answer is a 500; the retry (allowed: the
    resourceVersion guards it) gets 409 because our own write moved the version. That
    409 is not a change by someone else: the claim is read, carries our write, and the
    gang binds."""
    core, gang, plan, dra = await gang_with_claims(api, size=2)
    api.fail_requests("patch", "resourceclaims", "status", committed=True, status=500)
    writer = ClaimWriter(client, dra)
    writer.client.policy = FAST
    result, _ = await bind_and_settle(core, GangBinder(client), gang, plan, claims=writer)
    assert result.ok, result.reason
    assert api.request_count("patch", "resourceclaims", "status") == 3
    assert api.request_count("get", "resourceclaims") == 1
    assert sorted(allocated(api)) == ["train-0-gpu", "train-1-gpu"]


@pytest.mark.asyncio
async def test_a_lost_answer_then_409_with_the_read_back_failing_is_taken_back(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """The status write lands but its answer is lost; the retry meets 409 and the claim
    cannot be read back: the write may have landed, so it is not counted refused. The
    rollback reads the claim again and takes the allocation back: nothing stays
    allocated for the gang that did not bind, and no hold is left behind."""
    core, gang, plan, dra = await gang_with_claims(api, size=1)
    api.fail_requests("patch", "resourceclaims", "status", committed=True, status=500)
    api.fail_requests("get", "resourceclaims", status=409)
    writer = ClaimWriter(client, dra)
    writer.client.policy = FAST
    result, _ = await bind_and_settle(core, GangBinder(client), gang, plan, claims=writer)
    assert not result.ok and "409" in result.reason
    assert api.request_count("create", "pods", "binding") == 0
    assert allocated(api) == {} and reserved_anywhere(api) == []
    assert all(dra.hold_state(c.key) is None for c in plan.claims)


@pytest.mark.asyncio
async def test_a_failed_binding_releases_the_unbound_members_claims_and_the_controller_the_rest(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """The 2nd Binding is refused: the gang breaks. The unbound member's claim is
    deallocated by the scheduler at once; the bound member (deleted by the undo) keeps
    its reservation until its pod is gone, then the resourceclaim controller (the
    stand-in) removes it and deallocates. Nothing stays allocated."""
    core, gang, plan, dra = await gang_with_claims(api, size=2)
    api.fail_next_binds(1, status=409, after=1)
    writer = ClaimWriter(client, dra)
    binder = GangBinder(client, concurrency=1)
    result, undo = await bind_and_settle(core, binder, gang, plan, claims=writer)
    assert not result.ok and undo is not None and len(undo.deleted) == 1
    bound_claim = f"{undo.deleted[0].split('/')[1]}-gpu"
    assert allocated(api) == {bound_claim: [undo.deleted[0].split("/")[1]]}
    await ResourceClaimController(client).sync()
    assert allocated(api) == {} and reserved_anywhere(api) == []


@pytest.mark.asyncio
async def test_a_shared_claim_keeps_its_allocation_for_a_member_left_bound(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """onBindFailure keep: the bound member stays, so the claim it shares stays
    allocated and reserved for it; only the unbound member's entry is removed."""
    core, gang, plan, dra = await gang_with_claims(api, size=2, shared=True)
    api.fail_next_binds(1, status=409, after=1)
    writer = ClaimWriter(client, dra)
    binder = GangBinder(client, concurrency=1, on_failure="keep")
    result, _ = await bind_and_settle(core, binder, gang, plan, claims=writer)
    assert not result.ok
    [kept] = [m.name for m in result.bound]
    assert allocated(api) == {"shared": [kept]}


@pytest.mark.asyncio
async def test_a_claim_allocated_before_gets_only_reservations_and_keeps_its_allocation(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    """A claim already allocated (allocation None in the plan): only reservedFor is
    added, next to the consumer it had; a rollback removes ours and never the
    allocation, which is not ours."""
    seed_gang(api, size=2, gpus=1)
    existing = stored_as_created("shared")
    existing["status"] = {
        "allocation": allocation("n0", ("gpu-0",)),
        "reservedFor": [{"resource": "pods", "name": "other", "uid": "other-uid"}],
    }
    core = core_from(api)
    dra = core.dra
    dra.apply_claim("ADDED", api.put(RESOURCE_CLAIMS, existing))
    gang, plan = plan_next(core)
    known = dra.claims["default/shared"]
    pods = {p.uid: p for p in gang.pending}
    claim = ClaimAllocation(
        "default",
        "shared",
        known.uid,
        known.resource_version,
        None,
        tuple(Consumer("pods", pods[p.pod_uid].name, p.pod_uid) for p in plan.placements),
    )
    plan = dataclasses.replace(plan, claims=(claim,))
    api.fail_next_binds(1, status=409, after=1)
    writer = ClaimWriter(client, dra)
    result, _ = await bind_and_settle(
        core, GangBinder(client, concurrency=1), gang, plan, claims=writer
    )
    assert not result.ok
    # No finalizer write for a claim it did not allocate.
    assert api.request_count("patch", "resourceclaims", "") == 0
    [bound] = [m.name for m in result.bound]
    assert allocated(api) == {"shared": ["other", bound]}
