"""Only a node's own agent writes what the scheduler charges a node by (docs/security.md,
"Node"): the kubelet pod-resources report `gang-scheduler.io/gpu-kubelet-devices` and
the GPU inventory `gang-scheduler.io/gpu-topology`. Another writer of Nodes (a
node-labelling controller, a tenant given `patch` on nodes for its own labels, a
compromised operator) could otherwise move charges on any node: a report that puts a
running pod on another GPU frees its real GPU in the books, and the next pod is placed
on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cache.gpu import TOPOLOGY_ANNOTATION
from cache.kubelet_devices import KUBELET_DEVICES_ANNOTATION
from tests.deploy import test_admission_policy as base
from tests.deploy.test_admission_policy import MERGE, refused
from tests.factories import node_obj
from tests.kubeapi.admission import Account, User
from tests.kubeapi.rbac import Policy, RbacAuthorizer

NODE_WRITER = [
    {
        "kind": "ClusterRole",
        "metadata": {"name": "node-labeller"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
    },
    {
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "node-labeller"},
        "roleRef": {"kind": "ClusterRole", "name": "node-labeller"},
        "subjects": [{"kind": "ServiceAccount", "name": "labeller", "namespace": "tools"}],
    },
]


DEPLOYED_ACCOUNTS = base.accounts


def with_a_node_writer() -> dict[str, Account]:
    accounts = DEPLOYED_ACCOUNTS()
    policy = Policy.for_service_account(NODE_WRITER, "tools", "labeller")
    accounts["labeller"] = Account(User(policy.user), RbacAuthorizer(policy))
    return accounts


def annotate(key: str, value: str | None) -> dict[str, Any]:
    return {"metadata": {"annotations": {key: value}}}


@pytest.mark.asyncio
@pytest.mark.parametrize("key", [KUBELET_DEVICES_ANNOTATION, TOPOLOGY_ANNOTATION])
async def test_only_the_nodes_own_agent_writes_what_the_scheduler_charges_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    monkeypatch.setattr(base, "accounts", with_a_node_writer)
    async with base.cluster(tmp_path) as c:
        value = '{"uid-x":[0]}' if key == KUBELET_DEVICES_ANNOTATION else "{}"
        # The node's own agent: allowed, and so is removing it.
        await c["agent-a"].request_json(
            "PATCH", "/api/v1/nodes/node-a", body=annotate(key, value), content_type=MERGE
        )
        # node-b's own agent wrote it there too (seeded as the store holds it).
        node_b = node_obj("node-b", gpus=2)
        node_b["metadata"]["annotations"] = {key: value}
        c.api.put_node(node_b)
        # Anyone else, on any node, changing or removing it: refused.
        for node in ("node-a", "node-b"):
            for body in (annotate(key, '{"uid-y":[1]}'), annotate(key, None)):
                await refused(
                    c["labeller"].request_json(
                        "PATCH", f"/api/v1/nodes/{node}", body=body, content_type=MERGE
                    ),
                    f"only the node agent of a node writes {key}",
                )
        for node in ("node-a", "node-b"):
            stored = c.api.get_node(node)
            assert stored is not None and stored["metadata"]["annotations"][key] == value
        # Nor added where there is none.
        await c["agent-a"].request_json(
            "PATCH", "/api/v1/nodes/node-a", body=annotate(key, None), content_type=MERGE
        )
        await refused(
            c["labeller"].request_json(
                "PATCH", "/api/v1/nodes/node-a", body=annotate(key, value), content_type=MERGE
            ),
            f"only the node agent of a node writes {key}",
        )
        # Everything else of a Node stays theirs to write.
        await c["labeller"].request_json(
            "PATCH",
            "/api/v1/nodes/node-b",
            body={"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}},
            content_type=MERGE,
        )
