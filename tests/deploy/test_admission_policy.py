"""The shipped ValidatingAdmissionPolicies refuse each forging attack (issue 10,
docs/security.md), evaluated for real by the API emulator, with tenants limited by RBAC
as on a shared cluster; and they leave everyone else alone.

Tenants are service accounts of their namespace with an `edit`-like Role on pods (they
may create, patch and delete their own pods, not bind them). Every request goes over
HTTP through the project's own client with a bearer token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from cache.gpu import ASSIGNMENT_ANNOTATION, SIGNATURE_ANNOTATION
from scheduler.agent.allocation import ALLOCATED_ANNOTATION
from scheduler.kube.client import ApiError, KubeClient, create_client
from tests.deploy.render import one, rendered
from tests.factories import node_obj, pod_obj
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.kubeapi.admission import (
    NODE_NAME_EXTRA,
    AccessControl,
    Account,
    User,
    admission_policies,
)
from tests.kubeapi.rbac import Policy, RbacAuthorizer

MERGE = "application/merge-patch+json"
TENANT_ROLE = {
    "kind": "Role",
    "metadata": {"name": "tenant", "namespace": "team-a"},
    "rules": [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"],
        }
    ],
}


def tenant_account(name: str, extra_rules: list[dict[str, Any]] = ()) -> Account:  # type: ignore[assignment]
    role = {**TENANT_ROLE, "rules": [*TENANT_ROLE["rules"], *extra_rules]}  # type: ignore[list-item]
    binding = {
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": "team-a"},
        "roleRef": {"kind": "Role", "name": "tenant"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "team-a"}],
    }
    policy = Policy.for_service_account([role, binding], "team-a", name)
    return Account(User(policy.user), RbacAuthorizer(policy))


def deployed_account(kind: str, workload: str, extra: dict[str, tuple[str, ...]]) -> Account:
    objects = rendered()
    spec = one(objects, kind, workload)
    name = spec["spec"]["template"]["spec"]["serviceAccountName"]
    policy = Policy.for_service_account(objects, "kube-system", name)
    return Account(User(policy.user, extra=extra), RbacAuthorizer(policy))


def accounts() -> dict[str, Account]:
    return {
        "alice": tenant_account("alice"),
        # A tenant running a scheduler of its own (it may bind its pods).
        "bob": tenant_account(
            "bob", [{"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}]
        ),
        "scheduler": deployed_account("Deployment", "gang-scheduler", {}),
        "agent-a": deployed_account(
            "DaemonSet", "gang-scheduler-node-agent", {NODE_NAME_EXTRA: ("node-a",)}
        ),
        "agent-unbound": deployed_account("DaemonSet", "gang-scheduler-node-agent", {}),
        "admin": Account(User("kubernetes-admin", groups=("system:masters",))),
    }


class Cluster:
    def __init__(self, api: KubeApiEmulator, clients: dict[str, KubeClient]) -> None:
        self.api = api
        self.clients = clients

    def __getitem__(self, who: str) -> KubeClient:
        return self.clients[who]


@asynccontextmanager
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    access = AccessControl(accounts(), admission_policies(rendered()))
    async with KubeApiEmulator() as api:
        api.access = access
        api.put_node(node_obj("node-a", gpus=2))
        api.put_node(node_obj("node-b", gpus=2))
        clients = {}
        try:
            for token in access.accounts:
                path = write_kubeconfig(api.base_url, tmp_path / token, token=token)
                clients[token] = await create_client(str(path))
            yield Cluster(api, clients)
        finally:
            for client in clients.values():
                await client.close()


def pods_path(namespace: str = "team-a", name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/pods"
    return f"{base}/{name}" if name else base


def tenant_pod(name: str, **kwargs: Any) -> dict[str, Any]:
    obj = pod_obj(name, namespace="team-a", vgpu=500, **kwargs)
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        obj["metadata"].pop(key, None)
    return obj


def binding(name: str, node: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team-a"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"name": node}}


async def refused(call: Any, message: str) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await call
    error = caught.value
    assert error.status == 422 and error.reason == "Invalid", error
    assert "is forbidden: ValidatingAdmissionPolicy 'gang-scheduler-" in error.message
    assert message in error.message, error.message
    return error


async def bound_by_the_scheduler(c: Cluster, name: str, node: str = "node-a") -> None:
    """A tenant's pod, bound by the scheduler's service account with its assignment."""
    await c["alice"].request_json("POST", pods_path(), body=tenant_pod(name))
    assigned = {ASSIGNMENT_ANNOTATION: "1:500", SIGNATURE_ANNOTATION: "v1:signed"}
    await c["scheduler"].request_json(
        "POST", pods_path(name=name) + "/binding", body=binding(name, node, assigned)
    )


# --- tenants ------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_a_tenant_cannot_create_a_bound_pod_with_its_own_assignment(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        for key, value in (
            (ASSIGNMENT_ANNOTATION, "0:500"),
            (SIGNATURE_ANNOTATION, "v1:copied"),
            (ALLOCATED_ANNOTATION, "main"),
        ):
            forged = tenant_pod("forged", node_name="node-a", annotations={key: value})
            await refused(
                c["alice"].request_json("POST", pods_path(), body=forged),
                "a pod cannot be created with gang-scheduler.io/gpu-devices",
            )
        assert c.api.get_pod("team-a", "forged") is None
        # Without them a pod may still name its node (other users are unaffected).
        plain = tenant_pod("plain", node_name="node-a")
        created = await c["alice"].request_json("POST", pods_path(), body=plain)
        assert created["spec"]["nodeName"] == "node-a"


@pytest.mark.asyncio
async def test_a_tenant_cannot_patch_the_assignment_of_its_running_pod(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await bound_by_the_scheduler(c, "notebook")
        for patch in (
            {ASSIGNMENT_ANNOTATION: "0:500"},  # changed
            {ASSIGNMENT_ANNOTATION: None},  # removed
            {SIGNATURE_ANNOTATION: "v1:other"},
        ):
            await refused(
                c["alice"].request_json(
                    "PATCH",
                    pods_path(name="notebook"),
                    body={"metadata": {"annotations": patch}},
                    content_type=MERGE,
                ),
                "written by the scheduler's binding only and never change afterwards",
            )
        # Nor can an administrator: the value is the scheduler's.
        await refused(
            c["admin"].request_json(
                "PATCH",
                pods_path(name="notebook"),
                body={"metadata": {"annotations": {ASSIGNMENT_ANNOTATION: "0:500"}}},
                content_type=MERGE,
            ),
            "never change afterwards",
        )
        pod = c.api.get_pod("team-a", "notebook")
        assert pod is not None and pod["metadata"]["annotations"][ASSIGNMENT_ANNOTATION] == "1:500"
        # Its other annotations and labels stay the tenant's to change.
        await c["alice"].request_json(
            "PATCH",
            pods_path(name="notebook"),
            body={"metadata": {"annotations": {"team": "vision"}, "labels": {"run": "7"}}},
            content_type=MERGE,
        )


@pytest.mark.asyncio
async def test_a_tenant_cannot_mark_containers_allocated(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await bound_by_the_scheduler(c, "notebook")
        await refused(
            c["alice"].request_json(
                "PATCH",
                pods_path(name="notebook"),
                body={"metadata": {"annotations": {ALLOCATED_ANNOTATION: "main"}}},
                content_type=MERGE,
            ),
            "gang-scheduler.io/gpu-allocated is written by the node agent only",
        )


@pytest.mark.asyncio
async def test_only_the_scheduler_binds_with_an_assignment(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c["bob"].request_json("POST", pods_path(), body=tenant_pod("own"))
        await refused(
            c["bob"].request_json(
                "POST",
                pods_path(name="own") + "/binding",
                body=binding("own", "node-a", {ASSIGNMENT_ANNOTATION: "0:500"}),
            ),
            "only the gang scheduler binds a pod with gang-scheduler.io/gpu-devices",
        )
        await refused(
            c["bob"].request_json(
                "POST",
                pods_path(name="own") + "/binding",
                body=binding("own", "node-a", {ALLOCATED_ANNOTATION: "main"}),
            ),
            "a binding cannot carry gang-scheduler.io/gpu-allocated",
        )
        # Bob's own scheduler may bind without one (its charge is then inferred).
        await c["bob"].request_json(
            "POST", pods_path(name="own") + "/binding", body=binding("own", "node-a")
        )
        pod = c.api.get_pod("team-a", "own")
        assert pod is not None and pod["spec"]["nodeName"] == "node-a"
        # Alice may not bind at all (RBAC, before admission).
        await c["alice"].request_json("POST", pods_path(), body=tenant_pod("mine"))
        with pytest.raises(ApiError) as caught:
            await c["alice"].request_json(
                "POST", pods_path(name="mine") + "/binding", body=binding("mine", "node-a")
            )
        assert caught.value.status == 403


# --- the node agent -----------------------------------------------------------------------
@pytest.mark.asyncio
async def test_a_node_agent_writes_only_on_its_own_node(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await bound_by_the_scheduler(c, "on-a", "node-a")
        await bound_by_the_scheduler(c, "on-b", "node-b")
        agent = c["agent-a"]
        mark = {"metadata": {"annotations": {ALLOCATED_ANNOTATION: "main"}}}
        # Its own node and the pods bound there: allowed.
        await agent.request_json("PATCH", pods_path(name="on-a"), body=mark, content_type=MERGE)
        await agent.request_json(
            "PATCH",
            "/api/v1/nodes/node-a",
            body={"metadata": {"annotations": {"gang-scheduler.io/gpu-topology": "{}"}}},
            content_type=MERGE,
        )
        # Another node's pod or Node: refused.
        await refused(
            agent.request_json("PATCH", pods_path(name="on-b"), body=mark, content_type=MERGE),
            "the node agent may only change pods bound to the node it runs on",
        )
        await refused(
            agent.request_json(
                "PATCH",
                "/api/v1/nodes/node-b",
                body={"metadata": {"labels": {"owned": "yes"}}},
                content_type=MERGE,
            ),
            "the node agent may only change the Node it runs on",
        )
        # On its own node, nothing of a pod but the mark: not its image, not its labels.
        image = {"spec": {"containers": [{"name": "main", "image": "evil"}]}}
        await refused(
            agent.request_json(
                "PATCH",
                pods_path(name="on-a"),
                body=image,
                content_type="application/strategic-merge-patch+json",
            ),
            "changes nothing of a pod but its gang-scheduler.io/gpu-allocated mark",
        )
        await refused(
            agent.request_json(
                "PATCH",
                pods_path(name="on-a"),
                body={"metadata": {"labels": {"x": "y"}}},
                content_type=MERGE,
            ),
            "changes nothing of a pod but its gang-scheduler.io/gpu-allocated mark",
        )
        on_b = c.api.get_pod("team-a", "on-b")
        assert on_b is not None and ALLOCATED_ANNOTATION not in on_b["metadata"]["annotations"]
        node_b = c.api.get_node("node-b")
        assert node_b is not None and "owned" not in node_b["metadata"].get("labels", {})


@pytest.mark.asyncio
async def test_a_node_agent_token_without_a_node_is_refused(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await refused(
            c["agent-unbound"].request_json(
                "PATCH",
                "/api/v1/nodes/node-a",
                body={"metadata": {"labels": {"x": "y"}}},
                content_type=MERGE,
            ),
            "the node agent's token names no node",
        )


@pytest.mark.asyncio
async def test_the_policy_is_evaluated_not_assumed(tmp_path: Path) -> None:
    """Unknown tokens are 401; the binding's pod write is not admitted a second time
    (the scheduler's bind adds the keys no update may add)."""
    async with cluster(tmp_path) as c:
        await bound_by_the_scheduler(c, "p")
        pod = c.api.get_pod("team-a", "p")
        assert pod is not None and pod["metadata"]["annotations"][SIGNATURE_ANNOTATION]
        path = write_kubeconfig(c.api.base_url, tmp_path / "stranger", token="stranger")
        async with await create_client(str(path)) as stranger:
            with pytest.raises(ApiError) as caught:
                await stranger.request_json("GET", pods_path())
        assert caught.value.status == 401


def test_the_policies_name_the_deployed_service_accounts() -> None:
    """A rename of either service account must reach the policies, or the scheduler's
    binds and the agent's writes would be refused (and the agent's rule lost)."""
    objects = rendered()
    text = "\n".join(str(o["spec"]) for o in objects if o["kind"] == "ValidatingAdmissionPolicy")
    workloads = (("Deployment", "gang-scheduler"), ("DaemonSet", "gang-scheduler-node-agent"))
    for kind, name in workloads:
        workload = one(objects, kind, name)
        account = workload["spec"]["template"]["spec"]["serviceAccountName"]
        namespace = workload["metadata"]["namespace"]
        assert f"'system:serviceaccount:{namespace}:{account}'" in text
