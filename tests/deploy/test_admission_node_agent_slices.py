"""In DRA mode (deploy/components/dra-driver) the node agent's token writes ResourceSlices
of its own node only (docs/security.md, "ResourceSlices: each agent its own node").

RBAC grants create, update and delete on every slice (it cannot name "the caller's
node"); the ValidatingAdmissionPolicy gang-scheduler-node-agent-slices keeps each agent
to slices whose spec.nodeName is the node in its token, of the driver
gpu.gang-scheduler.io, in the pool named after its node. Each forged write is sent as
the agent's service account (its token naming node-a) over HTTP, under the RBAC and
policies the overlay with the component renders; the writes the agent really makes are
made by the real publisher.
"""

from __future__ import annotations

import copy
import io
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from cache.gpu import TOPOLOGY_ANNOTATION
from scheduler.agent.discovery import discover
from scheduler.agent.dra_plugin import KubeClaimApi
from scheduler.agent.dra_publisher import SLICES_PATH, KubeSliceApi, SlicePublisher
from scheduler.agent.dra_slices import DRIVER, slice_name, slice_specs
from scheduler.agent.publisher import AgentOptions, KubeNodeApi, NodeAgent, RetryPolicy
from scheduler.kube.client import KubeClient, create_client
from tests.agent import PCIE_BOX, FakeNvml
from tests.deploy.render import DEPLOY, one, rendered
from tests.deploy.test_admission_policy import cluster, refused
from tests.dra_builders import claim_obj, exactly
from tests.factories import node_obj
from tests.kubeapi import KubeApiEmulator, write_kubeconfig
from tests.kubeapi.admission import (
    NODE_NAME_EXTRA,
    AccessControl,
    Account,
    User,
    admission_policies,
)
from tests.kubeapi.rbac import Policy, RbacAuthorizer
from tests.kubeapi.resources import RESOURCE_CLAIMS, RESOURCE_SLICES

NOT_ITS_NODE = "may only write ResourceSlices of the node it runs on"
NOT_ITS_POOL = "writes only ResourceSlices of driver gpu.gang-scheduler.io"


def dra_overlay(tmp_path: Path) -> list[dict[str, Any]]:
    """The base with the dra-driver component, as an operator's overlay renders it."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    up = os.path.relpath(DEPLOY, overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [up], "components": [f"{up}/components/dra-driver"]})
    )
    return rendered(overlay)


def agent_account(objects: list[dict[str, Any]], node: str | None) -> Account:
    spec = one(objects, "DaemonSet", "gang-scheduler-node-agent")
    name = spec["spec"]["template"]["spec"]["serviceAccountName"]
    policy = Policy.for_service_account(objects, "kube-system", name)
    extra = {NODE_NAME_EXTRA: (node,)} if node else {}
    return Account(User(policy.user, extra=extra), RbacAuthorizer(policy))


class DraCluster:
    def __init__(self, api: KubeApiEmulator, clients: dict[str, KubeClient]) -> None:
        self.api = api
        self.clients = clients

    def __getitem__(self, who: str) -> KubeClient:
        return self.clients[who]

    def slices(self) -> dict[str, dict[str, Any]]:
        return {s["metadata"]["name"]: s for s in self.api.objects(RESOURCE_SLICES)}


@asynccontextmanager
async def dra_cluster(tmp_path: Path) -> AsyncIterator[DraCluster]:
    objects = dra_overlay(tmp_path)
    accounts = {
        "agent-a": agent_account(objects, "node-a"),
        "agent-unbound": agent_account(objects, None),
        "admin": Account(User("kubernetes-admin", groups=("system:masters",))),
    }
    access = AccessControl(accounts, admission_policies(objects))
    async with KubeApiEmulator() as api:
        api.access = access
        api.put_node(node_obj("node-a", gpus=4))
        api.put_node(node_obj("node-b", gpus=4))
        clients = {}
        try:
            for token in access.accounts:
                path = write_kubeconfig(api.base_url, tmp_path / token, token=token)
                clients[token] = await create_client(str(path))
            yield DraCluster(api, clients)
        finally:
            for client in clients.values():
                await client.close()


def a_slice(node: str, name: str | None = None, **changes: Any) -> dict[str, Any]:
    spec = slice_specs(discover(FakeNvml(PCIE_BOX)), node, generation=1)[0]
    spec.update(changes)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or slice_name(node, 0)},
        "spec": spec,
    }


@pytest.mark.asyncio
async def test_what_the_agent_really_writes_is_allowed(tmp_path: Path) -> None:
    """The publisher creates, replaces and deletes its node's slices, and withdraws
    them, and the kubelet plugin reads a claim, as the agent's service account: nothing
    refused, every verb of the component's ClusterRole used."""
    async with dra_cluster(tmp_path) as c:
        publisher = SlicePublisher(KubeSliceApi(c["agent-a"]), "node-a", tmp_path / "none")
        assert await publisher.publish(discover(FakeNvml(PCIE_BOX)))
        assert len(c.slices()) == 4
        smaller = copy.deepcopy(PCIE_BOX)
        object.__setattr__(smaller, "gpus", PCIE_BOX.gpus[:3])
        assert await publisher.publish(discover(FakeNvml(smaller)))  # update + delete
        assert len(c.slices()) == 3
        assert await publisher.withdraw() == 3
        # The kubelet plugin's one read: the claim it is asked to prepare.
        c.api.put(RESOURCE_CLAIMS, claim_obj("train", [exactly()], namespace="team-a"))
        read = await KubeClaimApi(c["agent-a"]).get_claim("team-a", "train")
        assert read["metadata"]["name"] == "train"
        access = c.api.access
        assert access is not None and access.refused == []


FORGED: list[tuple[str, dict[str, Any], str]] = [
    ("publishes devices for another node", a_slice("node-b"), NOT_ITS_NODE),
    (
        "names its own node but the pool of another",
        a_slice("node-a", pool={"name": "node-b", "generation": 1, "resourceSliceCount": 1}),
        NOT_ITS_POOL,
    ),
    ("writes another driver's slice", a_slice("node-a", driver="gpu.nvidia.com"), NOT_ITS_POOL),
    (
        "publishes devices for every node",
        {**a_slice("node-a", "all"), "spec": {**a_slice("node-a")["spec"], "allNodes": True}},
        NOT_ITS_NODE,
    ),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("case", "body", "message"), FORGED, ids=[f[0] for f in FORGED])
async def test_the_agent_cannot_create_a_slice_it_does_not_own(
    tmp_path: Path, case: str, body: dict[str, Any], message: str
) -> None:
    if "allNodes" in body["spec"]:
        del body["spec"]["nodeName"]
    async with dra_cluster(tmp_path) as c:
        await refused(c["agent-a"].request_json("POST", SLICES_PATH, body=body), message)
        assert c.slices() == {}, case


@pytest.mark.asyncio
async def test_the_agent_cannot_take_over_or_delete_another_nodes_slice(tmp_path: Path) -> None:
    async with dra_cluster(tmp_path) as c:
        theirs = a_slice("node-b")
        stored = await c["admin"].request_json("POST", SLICES_PATH, body=theirs)
        name = stored["metadata"]["name"]
        before = copy.deepcopy(c.slices())
        # Rewritten as its own (nodeName is immutable anyway; the policy refuses first).
        taken = copy.deepcopy(stored)
        taken["spec"]["devices"][0]["attributes"]["productName"] = {"string": "forged"}
        await refused(
            c["agent-a"].request_json("PUT", f"{SLICES_PATH}/{name}", body=taken), NOT_ITS_NODE
        )
        await refused(c["agent-a"].request_json("DELETE", f"{SLICES_PATH}/{name}"), NOT_ITS_NODE)
        assert c.slices() == before


@pytest.mark.asyncio
async def test_a_token_without_a_node_writes_no_slice(tmp_path: Path) -> None:
    async with dra_cluster(tmp_path) as c:
        await refused(
            c["agent-unbound"].request_json("POST", SLICES_PATH, body=a_slice("node-a")),
            "names no node",
        )


def test_the_component_grants_exactly_what_dra_mode_calls(tmp_path: Path) -> None:
    objects = dra_overlay(tmp_path)
    role = one(objects, "ClusterRole", "gang-scheduler-node-agent-dra")
    assert role["rules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["list", "create", "update", "delete"],
        },
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    ]
    (container,) = one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert container["args"][-2:] == ["--dra", "--no-device-plugin"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi"} <= (
        mounts
    )
    # Without the component: no --dra, no mounts, no rights.
    base = rendered()
    (plain,) = one(base, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert "--dra" not in plain["args"]
    assert not [o for o in base if o["metadata"]["name"] == "gang-scheduler-node-agent-dra"]
    assert DRIVER in yaml.safe_dump(
        one(base, "ValidatingAdmissionPolicy", "gang-scheduler-node-agent-slices")
    )


@pytest.mark.asyncio
async def test_without_the_component_the_agent_says_what_dra_mode_lacks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`--dra` under the base's RBAC only: the slices are refused (403), the pass says
    which rights are missing, and the Node is still published."""
    async with cluster(tmp_path) as c:
        options = AgentOptions(node_name="node-a", interval=60, once=True, dra=True)
        agent = NodeAgent(
            FakeNvml(PCIE_BOX),
            options,
            KubeNodeApi(c["agent-a"]),
            out=io.StringIO(),
            retry=RetryPolicy(attempts=1),
            slices=SlicePublisher(KubeSliceApi(c["agent-a"]), "node-a", tmp_path / "none"),
        )
        assert not await agent.run_pass()
        assert "needs the rights of deploy/components/dra-driver" in caplog.text
        stored = c.api.get_node("node-a")
        assert stored is not None
        assert TOPOLOGY_ANNOTATION in stored["metadata"]["annotations"]
