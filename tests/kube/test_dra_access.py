"""Who may write a ResourceClaim's allocation and reservations, against the emulator
enforcing RBAC, Kubernetes 1.36's granular claim-status authorization and the shipped
ValidatingAdmissionPolicies (deploy/), every request over HTTP with a bearer token:

- the scheduler's claim writes and their rollback need exactly deploy/'s new rules, and
  fail without `resourceclaims/binding` (422) or `resourceclaims/status` (403);
- a tenant, even one RBAC lets write everything, cannot change a claim's allocation or
  reservedFor (policy gang-scheduler-resource-claim-status), while kube-scheduler and
  the resourceclaim controller still can;
- the template flow: the resourceclaim controller stand-in creates the pod's claim from
  its ResourceClaimTemplate and records it in the pod's status, the scheduler allocates
  and reserves it before binding, and once the pod has finished the controller
  deallocates it and deletes it, under the policies.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from cache.dra.claims import Consumer
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.kube.binder import GangBinder, bind_and_settle
from scheduler.kube.client import ApiError, KubeClient, create_client
from scheduler.kube.dra_claims import ClaimWriter, claim_path
from scheduler.planner.result import ClaimAllocation
from tests.deploy.render import one, rendered
from tests.dra_objects import allocation, template_obj
from tests.kube.test_binder import core_from, plan_next, seed_gang
from tests.kube.test_dra_writes import (
    FAST,
    allocated,
    parsed_allocation,
    seed_claims,
    stored_claim,
    with_claims,
)
from tests.kubeapi import (
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    KubeApiEmulator,
    write_kubeconfig,
)
from tests.kubeapi.admission import AccessControl, Account, User, admission_policies
from tests.kubeapi.rbac import Policy, RbacAuthorizer
from tests.kubeapi.resourceclaim_controller import ResourceClaimController

MERGE = "application/merge-patch+json"
CONTROLLER = "system:serviceaccount:kube-system:resource-claim-controller"


def scheduler_policy(without: str = "") -> Policy:
    """The deployed scheduler's RBAC, optionally without the rule on `without`."""
    objects = rendered()
    role = one(objects, "ClusterRole", "gang-scheduler")
    role["rules"] = [r for r in role["rules"] if without not in r["resources"]]
    account = one(objects, "Deployment", "gang-scheduler")["spec"]["template"]["spec"]
    return Policy.for_service_account(objects, "kube-system", account["serviceAccountName"])


@asynccontextmanager
async def cluster(
    tmp_path: Path, accounts: dict[str, Account]
) -> AsyncIterator[tuple[KubeApiEmulator, AccessControl, dict[str, KubeClient]]]:
    access = AccessControl(accounts, admission_policies(rendered()))
    async with KubeApiEmulator() as api:
        clients: dict[str, KubeClient] = {}
        try:
            for token in accounts:
                path = write_kubeconfig(api.base_url, tmp_path / token, token=token)
                clients[token] = await create_client(str(path))
                clients[token].policy = FAST
            api.access = access
            yield api, access, clients
        finally:
            for client in clients.values():
                await client.close()


async def broken_gang(api: KubeApiEmulator, client: KubeClient) -> Any:
    """A gang of 2 with a claim each whose 2nd Binding is refused: claims written, one
    bound member deleted, the other's claim read and rolled back."""
    seed_gang(api, size=2, gpus=1)
    core = core_from(api)
    dra = seed_claims(api, ["train-0-gpu", "train-1-gpu"], core.dra)
    gang, plan = plan_next(core)
    plan = with_claims(plan, gang, dra)
    api.fail_next_binds(1, status=409, after=1)
    writer = ClaimWriter(client, dra)
    return await bind_and_settle(core, GangBinder(client, concurrency=1), gang, plan, claims=writer)


@pytest.mark.asyncio
async def test_claim_writes_and_rollback_run_under_exactly_the_deployed_rules(
    tmp_path: Path,
) -> None:
    policy = scheduler_policy()
    authorizer = RbacAuthorizer(policy)
    accounts = {"scheduler": Account(User(policy.user), authorizer)}
    async with cluster(tmp_path, accounts) as (api, access, clients):
        result, undo = await broken_gang(api, clients["scheduler"])
        assert not result.ok and undo is not None and len(undo.deleted) == 1
        # The unbound member's claim was rolled back (read, then written).
        assert list(allocated(api)) == [f"{undo.deleted[0].split('/')[1]}-gpu"]
    assert authorizer.denied == [] and access.refused == []
    used = {(g.verb, g.resource) for g in authorizer.used if g.group == "resource.k8s.io"}
    assert used == {
        ("patch", "resourceclaims"),
        ("get", "resourceclaims"),
        ("patch", "resourceclaims/status"),
        ("patch", "resourceclaims/binding"),
    }


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("without", "status"), [("resourceclaims/binding", 422), ("resourceclaims/status", 403)]
)
async def test_without_the_new_rules_the_claim_writes_are_refused(
    tmp_path: Path, without: str, status: int
) -> None:
    policy = scheduler_policy(without)
    accounts = {"scheduler": Account(User(policy.user), RbacAuthorizer(policy))}
    async with cluster(tmp_path, accounts) as (api, _, clients):
        result, _ = await broken_gang(api, clients["scheduler"])
        assert not result.ok and str(status) in result.reason and without in result.reason
        assert api.request_count("create", "pods", "binding") == 0
        assert allocated(api) == {}


def claim_accounts() -> dict[str, Account]:
    return {
        # A tenant on a cluster whose RBAC lets it write anything (a wildcard role).
        "mallory": Account(User("system:serviceaccount:default:mallory")),
        "kube-scheduler": Account(User("system:kube-scheduler")),
        "controller": Account(User(CONTROLLER)),
    }


@pytest.mark.asyncio
async def test_a_tenant_cannot_allocate_reserve_or_release_a_claim(tmp_path: Path) -> None:
    async with cluster(tmp_path, claim_accounts()) as (api, access, clients):
        dra = seed_claims(api, ["data"])
        claim = stored_claim(api, "data")
        path = claim_path("default", "data", "status")
        pod = {"resource": "pods", "name": "p", "uid": "p-uid"}
        grab = {"status": {"allocation": allocation("n1"), "reservedFor": [pod]}}
        with pytest.raises(ApiError) as refused:
            await clients["mallory"].request_json("PATCH", path, body=grab, content_type=MERGE)
        assert refused.value.status == 422
        assert "gang-scheduler-resource-claim-status" in refused.value.message
        assert stored_claim(api, "data").get("status") is None
        # kube-scheduler allocates it for its pod: allowed.
        await clients["kube-scheduler"].request_json("PATCH", path, body=grab, content_type=MERGE)
        # The tenant can neither release it nor add itself to it.
        for status in ({"reservedFor": None}, {"reservedFor": [pod, {**pod, "uid": "x"}]}):
            with pytest.raises(ApiError) as again:
                await clients["mallory"].request_json(
                    "PATCH", path, body={"status": status}, content_type=MERGE
                )
            assert again.value.status == 422
        # Its other status (a driver's device status) is not the policy's business.
        devices = {
            "status": {"devices": [{"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}]}
        }
        await clients["mallory"].request_json("PATCH", path, body=devices, content_type=MERGE)
        # The resourceclaim controller deallocates it once its pod is gone: allowed.
        release = {"status": {"reservedFor": None, "allocation": None}}
        await clients["controller"].request_json("PATCH", path, body=release, content_type=MERGE)
        assert "allocation" not in (stored_claim(api, "data").get("status") or {})
        assert (
            len(access.refused) == 3 and claim["metadata"]["uid"] == dra.claims["default/data"].uid
        )


@pytest.mark.asyncio
async def test_the_template_flow_from_claim_creation_to_deallocation(tmp_path: Path) -> None:
    policy = scheduler_policy()
    accounts = {
        "scheduler": Account(User(policy.user), RbacAuthorizer(policy)),
        "controller": Account(User(CONTROLLER)),
    }
    async with cluster(tmp_path, accounts) as (api, access, clients):
        api.put(RESOURCE_CLAIM_TEMPLATES, template_obj("one-gpu", namespace="default"))
        seed_gang(api, size=1, gpus=0)
        pod = api.get_pod("default", "train-0")
        assert pod is not None
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        api.put(PODS, pod)
        controller = ResourceClaimController(clients["controller"])
        await controller.sync()
        [created] = controller.created
        name = created.split("/")[1]
        assert name.startswith("train-0-gpu-")
        pod = api.get_pod("default", "train-0")
        assert pod is not None
        assert pod["status"]["resourceClaimStatuses"] == [
            {"name": "gpu", "resourceClaimName": name}
        ]
        claim = stored_claim(api, name)
        assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        await controller.sync()  # a second pass creates nothing more
        assert controller.created == [created]
        # The scheduler allocates and reserves it, then binds.
        # The core is fed the pod without its claims, and the plan's claim is built by
        # hand (the device chosen by the test); the claim is in the core's DraCache.
        core = SchedulingCore(build_profile())
        dra = core.dra
        dra.apply_claim("ADDED", claim)
        core.replace_nodes(api.nodes(), 0.0)
        plain = copy.deepcopy(api.pods())
        for member in plain:
            member["spec"].pop("resourceClaims", None)
        core.replace_pods(plain, 0.0)
        gang, plan = plan_next(core)
        write = ClaimAllocation(
            "default",
            name,
            claim["metadata"]["uid"],
            claim["metadata"]["resourceVersion"],
            parsed_allocation(plan.placements[0].node, "gpu-0"),
            (Consumer("pods", "train-0", pod["metadata"]["uid"]),),
        )
        plan = dataclasses.replace(plan, claims=(write,))
        writer = ClaimWriter(clients["scheduler"], dra)
        result, _ = await bind_and_settle(
            core, GangBinder(clients["scheduler"]), gang, plan, claims=writer
        )
        assert result.ok and allocated(api) == {name: ["train-0"]}
        await controller.sync()  # the pod runs: nothing changes
        assert allocated(api) == {name: ["train-0"]}
        # The pod finishes: its reservation goes, the claim is deallocated (it carries
        # the scheduler's delete-protection finalizer), the finalizer removed, and the
        # claim the controller generated for it deleted.
        finished = api.get_pod("default", "train-0")
        assert finished is not None
        finished["status"]["phase"] = "Succeeded"
        api.put(PODS, finished)
        await controller.sync()
        assert api.get(RESOURCE_CLAIMS, "default", name) is None
    assert access.refused == []
