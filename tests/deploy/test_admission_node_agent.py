"""The node agent's token writes on its own Node exactly what the agent publishes, and
nothing else (docs/security.md, "Node: least privilege for the node agent").

RBAC gives the agent `patch` on every Node; the admission policy keeps it to the Node
named in its token. Before this, on that Node it could rewrite anything: label itself
`node-restriction.kubernetes.io/*` or `node-role.kubernetes.io/*` to draw workloads
meant for dedicated nodes, drop its taints, uncordon itself, or opt itself in to
serving whole GPUs. The NodeRestriction admission plugin forbids a kubelet the first
three; the agent needs far less than a kubelet, so its policy is an allow-list: the
annotations `gang-scheduler.io/gpu-topology` and `gang-scheduler.io/gpu-kubelet-devices`,
and the GPU feature discovery labels added where the Node lacks them.

Each forbidden edit is sent as the agent's service account (its token naming the node)
over HTTP; the edits the agent really makes are made by the real publisher and the real
kubelet reporter, under the same policies.
"""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest

from cache.gpu import COUNT_LABEL, MEMORY_LABEL, PRODUCT_LABEL, TOPOLOGY_ANNOTATION
from cache.kubelet_devices import KUBELET_DEVICES_ANNOTATION
from scheduler.agent import kubelet_api as kubelet
from scheduler.agent.deviceplugin import WHOLE_GPUS_LABEL
from scheduler.agent.podresources import (
    KubeletDeviceReporter,
    KubeReporterApi,
    PodResourcesConfig,
)
from scheduler.agent.publisher import AgentOptions, KubeNodeApi, NodeAgent, RetryPolicy
from tests.agent import PCIE_BOX, FakeNvml, with_gpu
from tests.agent.podresources_server import holding
from tests.deploy.test_admission_policy import MERGE, Cluster, cluster, refused
from tests.factories import node_obj, pod_obj

NODE = "node-a"
NOT_ITS_LABEL = "only adds the GPU labels it publishes"
NOT_ITS_ANNOTATION = "changes no annotation of its Node but"
NOT_ITS_SPEC = "changes nothing of its Node's spec or status"
NOT_ITS_OWNERS = "changes no ownerReferences or finalizers of its Node"


def labelled_node() -> dict[str, Any]:
    """node-a as a real GPU node looks: the kubelet's labels, a role, a dedicated-node
    label, GFD's product label, a taint, and an annotation of someone else's."""
    node = node_obj(
        NODE,
        gpus=2,
        labels={
            "kubernetes.io/hostname": NODE,
            "topology.kubernetes.io/zone": "zone-a",
            "node-role.kubernetes.io/gpu": "",
            "node-restriction.kubernetes.io/tenant": "team-a",
            PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB",
        },
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    node["metadata"]["annotations"] = {
        "node.alpha.kubernetes.io/ttl": "0",
        TOPOLOGY_ANNOTATION: "{}",
    }
    return node


def labels(changes: dict[str, str | None]) -> dict[str, Any]:
    return {"metadata": {"labels": changes}}


def annotations(changes: dict[str, str | None]) -> dict[str, Any]:
    return {"metadata": {"annotations": changes}}


FORBIDDEN_EDITS: list[tuple[str, dict[str, Any], str]] = [
    # The labels NodeRestriction keeps from a kubelet, and more.
    (
        "adds a node-restriction label",
        labels({"node-restriction.kubernetes.io/pii": "true"}),
        NOT_ITS_LABEL,
    ),
    (
        "changes a node-restriction label",
        labels({"node-restriction.kubernetes.io/tenant": "team-b"}),
        NOT_ITS_LABEL,
    ),
    (
        "removes a node-restriction label",
        labels({"node-restriction.kubernetes.io/tenant": None}),
        NOT_ITS_LABEL,
    ),
    (
        "adds a node role",
        labels({"node-role.kubernetes.io/control-plane": ""}),
        NOT_ITS_LABEL,
    ),
    ("removes a node role", labels({"node-role.kubernetes.io/gpu": None}), NOT_ITS_LABEL),
    ("opts in to whole GPUs", labels({WHOLE_GPUS_LABEL: "true"}), NOT_ITS_LABEL),
    ("moves its zone", labels({"topology.kubernetes.io/zone": "zone-b"}), NOT_ITS_LABEL),
    ("adds any other label", labels({"team": "a"}), NOT_ITS_LABEL),
    ("rewrites GFD's product label", labels({PRODUCT_LABEL: "NVIDIA-H100"}), NOT_ITS_LABEL),
    ("removes GFD's product label", labels({PRODUCT_LABEL: None}), NOT_ITS_LABEL),
    ("claims GFD's presence label", labels({"nvidia.com/gpu.present": "true"}), NOT_ITS_LABEL),
    # Annotations other than its two.
    (
        "adds another annotation",
        annotations({"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}),
        NOT_ITS_ANNOTATION,
    ),
    (
        "changes another annotation",
        annotations({"node.alpha.kubernetes.io/ttl": "30"}),
        NOT_ITS_ANNOTATION,
    ),
    (
        "removes another annotation",
        annotations({"node.alpha.kubernetes.io/ttl": None}),
        NOT_ITS_ANNOTATION,
    ),
    # The spec.
    ("removes its taints", {"spec": {"taints": None}}, NOT_ITS_SPEC),
    (
        "adds a taint",
        {"spec": {"taints": [{"key": "evict-others", "effect": "NoExecute"}]}},
        NOT_ITS_SPEC,
    ),
    ("cordons itself", {"spec": {"unschedulable": True}}, NOT_ITS_SPEC),
    ("changes its providerID", {"spec": {"providerID": "aws:///other"}}, NOT_ITS_SPEC),
    ("changes its podCIDR", {"spec": {"podCIDR": "10.0.0.0/24"}}, NOT_ITS_SPEC),
    # Who owns it and what holds its deletion.
    (
        "adds an owner",
        {
            "metadata": {
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Namespace", "name": "team-a", "uid": "u-1"}
                ]
            }
        },
        NOT_ITS_OWNERS,
    ),
    ("adds a finalizer", {"metadata": {"finalizers": ["example.com/keep"]}}, NOT_ITS_OWNERS),
]


async def patch_own_node(c: Cluster, body: dict[str, Any]) -> dict[str, Any]:
    return await c["agent-a"].request_json(
        "PATCH", f"/api/v1/nodes/{NODE}", body=body, content_type=MERGE
    )


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("edit", "body", "message"), FORBIDDEN_EDITS, ids=[e[0] for e in FORBIDDEN_EDITS]
)
async def test_the_agent_cannot_rewrite_what_it_does_not_publish_on_its_own_node(
    tmp_path: Path, edit: str, body: dict[str, Any], message: str
) -> None:
    async with cluster(tmp_path) as c:
        c.api.put_node(labelled_node())
        before = copy.deepcopy(c.api.get_node(NODE))
        await refused(patch_own_node(c, body), message)
        assert c.api.get_node(NODE) == before, edit


@pytest.mark.asyncio
async def test_a_forbidden_key_in_the_same_patch_as_its_own_refuses_the_whole_patch(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        c.api.put_node(labelled_node())
        before = copy.deepcopy(c.api.get_node(NODE))
        mixed = {
            "metadata": {
                "annotations": {TOPOLOGY_ANNOTATION: '{"devices":[]}'},
                "labels": {COUNT_LABEL: "2", "node-role.kubernetes.io/master": ""},
            }
        }
        await refused(patch_own_node(c, mixed), NOT_ITS_LABEL)
        assert c.api.get_node(NODE) == before


class FixedKubelet:
    """The kubelet's pod-resources answer, fixed (the gRPC side has its own tests)."""

    def __init__(self, pods: list[kubelet.PodResources]) -> None:
        self.pods = pods

    async def list(self) -> list[kubelet.PodResources]:
        return self.pods


@pytest.mark.asyncio
async def test_what_the_agent_really_writes_on_its_node_is_allowed(tmp_path: Path) -> None:
    """The publisher (annotation and GFD labels on a node without GFD, then the
    annotation rewritten when a GPU changes) and the kubelet reporter, as the agent's
    service account under the deployed policies: nothing refused, all of it stored."""
    async with cluster(tmp_path) as c:
        node = labelled_node()
        del node["metadata"]["labels"][PRODUCT_LABEL]  # no GFD here: the agent labels it
        del node["metadata"]["annotations"][TOPOLOGY_ANNOTATION]
        c.api.put_node(node)
        api = KubeNodeApi(c["agent-a"])
        options = AgentOptions(node_name=NODE, interval=60, once=True)
        no_retry = RetryPolicy(attempts=1)
        agent = NodeAgent(FakeNvml(PCIE_BOX), options, api, out=io.StringIO(), retry=no_retry)

        assert await agent.run_pass()
        stored = c.api.get_node(NODE)
        assert stored is not None
        meta = stored["metadata"]
        assert TOPOLOGY_ANNOTATION in meta["annotations"]
        assert {COUNT_LABEL, PRODUCT_LABEL, MEMORY_LABEL} <= set(meta["labels"])
        first = meta["annotations"][TOPOLOGY_ANNOTATION]

        # A GPU goes bad: the inventory is rewritten (the labels are left as they are).
        ailing = with_gpu(PCIE_BOX, 1, retired_pending=True)
        agent = NodeAgent(FakeNvml(ailing), options, api, out=io.StringIO(), retry=no_retry)
        assert await agent.run_pass()
        stored = c.api.get_node(NODE)
        assert stored is not None
        assert stored["metadata"]["annotations"][TOPOLOGY_ANNOTATION] != first

        # The kubelet's report of a pod on the node.
        pod = pod_obj("train", gpus=1, node_name=NODE, uid="u-train")
        c.api.put_pod(pod)
        reporter = KubeletDeviceReporter(
            PodResourcesConfig(NODE, tmp_path / "unused.sock", 10.0),
            FixedKubelet([holding("default", "train", "nvidia.com/gpu", PCIE_BOX.gpus[2].uuid)]),
            KubeReporterApi(c["agent-a"]),
            lambda: {gpu.uuid: index for index, gpu in enumerate(PCIE_BOX.gpus)},
        )
        assert await reporter.report()
        stored = c.api.get_node(NODE)
        assert stored is not None
        assert stored["metadata"]["annotations"][KUBELET_DEVICES_ANNOTATION] == '{"u-train":[2]}'
        # Nothing else of the node moved.
        assert stored["spec"] == node["spec"]
        assert stored["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] == "0"
        kept = node["metadata"]["labels"]
        assert {k: stored["metadata"]["labels"].get(k) for k in kept} == kept
        access = c.api.access
        assert access is not None and access.refused == []
