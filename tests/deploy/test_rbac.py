"""The RBAC of deploy/ is exactly what the code uses, derived from the code's behaviour.

The scheduler and the node agent run end to end against the API emulator with the
emulator enforcing the rendered Roles and ClusterRoles of their ServiceAccounts (the
ones the Deployment and the DaemonSet name). The scenarios take every path that writes:
binds, a bind answered 500 (read back, retried), a gang broken by a 409 (its bound
member deleted), FailedScheduling created then its count patched, PodScheduled
conditions, PodGroup status, an event on a PodGroup (its uid read), volumes (a static PV's
claimRef, a claim's selected node, both taken back from a broken gang), DRA claims (the
finalizer, allocation and reservedFor written, then rolled back from a broken gang), the Lease
created, read and renewed; the agent's get and patch of its Node, and its device plugin's list
of the node's pods and the patch marking the one an Allocate served. Then:

- nothing was refused (a verb missing from deploy/ fails the test), and
- every (role, verb, group, resource, resourceNames) the rules grant was used by some
  request (a verb granted and never used fails the test).

Both run under the rendered ValidatingAdmissionPolicies too (tests/kubeapi/admission.py
evaluates their CEL), authenticated as their service accounts (the agent's token names
its node), so the policies refuse nothing the scheduler or the agent needs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from cache.gpu import ASSIGNMENT_ANNOTATION
from scheduler.agent.deviceplugin import SOCKET_NAME, DevicePluginConfig
from scheduler.agent.publisher import AgentOptions, serve
from scheduler.cli.main import build_parser, device_plugin_config
from scheduler.kube.client import ApiError, create_client
from scheduler.kube.runner import run_scheduler
from scheduler.process.config import config_from_mapping
from tests.agent import PCIE_BOX, FakeNvml
from tests.agent.kubelet import FakeKubelet, PluginClient
from tests.agent.plugin_running import handed
from tests.cache.test_quota import quota_obj
from tests.deploy.render import one, rendered, scheduler_config_text
from tests.dra_objects import device_class_obj
from tests.dra_objects import slice_obj as dra_slice_obj
from tests.factories import node_obj, pod_obj, podgroup_obj
from tests.integrations.controllers import native_gang_pod, native_podgroup_obj
from tests.kube.test_dra_writes import stored_as_created
from tests.kubeapi import (
    DEVICE_CLASSES,
    ELASTIC_QUOTAS,
    LEASES,
    NATIVE_PODGROUPS,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODGROUPS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SECRETS,
    STORAGE_CLASSES,
    KubeApiEmulator,
    write_kubeconfig,
)
from tests.kubeapi.admission import (
    NODE_NAME_EXTRA,
    AccessControl,
    Account,
    User,
    admission_policies,
)
from tests.kubeapi.rbac import Attributes, Policy, RbacAuthorizer, Rule, forbidden
from tests.signed import node_agent_secret, node_signed
from tests.volume_objects import pv_obj, pvc_obj, storage_class_obj, with_claims
from tests.waiting import HANG, eventually, free_port

TEST_TIMEOUT = 4 * HANG  # turns a hang into a failure, whatever the speed


def account_policy(kind: str, name: str) -> Policy:
    """The policy of the ServiceAccount the workload `kind/name` runs as."""
    objects = rendered()
    workload = one(objects, kind, name)
    account = workload["spec"]["template"]["spec"]["serviceAccountName"]
    return Policy.for_service_account(objects, workload["metadata"]["namespace"], account)


def deployed_plugin_config() -> DevicePluginConfig:
    """The device plugin's settings from the DaemonSet's arguments, through the CLI."""
    workload = one(rendered(), "DaemonSet", "gang-scheduler-node-agent")
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    config = device_plugin_config(build_parser().parse_args(container["args"]))
    assert config is not None
    return config


def pods_named(api: KubeApiEmulator, prefix: str) -> list[str]:
    return [p["metadata"]["name"] for p in api.pods() if p["metadata"]["name"].startswith(prefix)]


def bound(api: KubeApiEmulator, prefix: str) -> int:
    return sum(
        1
        for p in api.pods()
        if p["spec"].get("nodeName") and p["metadata"]["name"].startswith(prefix)
    )


def deployed_config_with_fast_timings(port: int) -> dict[str, Any]:
    """The ConfigMap's configuration as deployed (lease name and namespace included),
    with timings short enough for a test."""
    config = yaml.safe_load(scheduler_config_text(rendered()))
    config["http"] = {"address": "127.0.0.1", "port": port}
    # A lease no slow machine outlasts: the test is not about expiry.
    config["leaderElection"].update(
        leaseDurationSeconds=600.0, renewDeadlineSeconds=400.0, retryPeriodSeconds=0.25
    )
    config["timeouts"].update(
        initialBackoffSeconds=0.1,
        maxBackoffSeconds=0.3,
        bindTimeoutSeconds=2.0,
        maxUnschedulableSeconds=0.3,
    )
    config["events"]["aggregationWindowSeconds"] = 0.4
    config["client"] = {"qps": 1000, "burst": 1000}
    # Gang inference on (off as deployed): its owner informers use their grants too.
    config["gangInference"] = {"namespaces": ["default"]}
    assert isinstance(config, dict)
    return config


@pytest.mark.asyncio
async def test_the_scheduler_runs_under_exactly_the_deployed_rbac(tmp_path: Path) -> None:
    policy = account_policy("Deployment", "gang-scheduler")
    authorizer = RbacAuthorizer(policy)
    config = config_from_mapping(deployed_config_with_fast_timings(free_port()))

    access = AccessControl(
        {"scheduler": Account(User(policy.user), authorizer)}, admission_policies(rendered())
    )

    async def scenario() -> None:
        # An API server without the watch-list stream: the informers fall back to paged
        # lists, the path that needs `list`. The stream itself is a watch, which the
        # informers' watches use here as well, so both paths run on these grants.
        async with KubeApiEmulator(watch_list=False) as api:
            api.access = access
            for i in range(4):
                api.put_node(node_obj(f"n{i}", gpus=2))
            # The node agents' Secret left by a previous key (a rotation): the scheduler
            # creates its own key's Secret and replaces this one.
            api.put(SECRETS, node_agent_secret(b"a key rotated out long ago, 32B."))
            kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig", token="scheduler")
            stop = asyncio.Event()
            task = asyncio.create_task(
                run_scheduler(config, str(kubeconfig), clock=time.monotonic, stop=stop)
            )
            try:
                # A PodGroup gang; its first bind answers 500: read back, then retried.
                api.put(PODGROUPS, podgroup_obj("train", 2))
                api.fail_next_binds(1, status=500)
                for i in range(2):
                    api.put_pod(pod_obj(f"train-{i}", gang="train", gpus=1))
                await eventually(lambda: bound(api, "train-") == 2, "train bound")
                await eventually(
                    lambda: (
                        (api.get(PODGROUPS, "default", "train") or {})
                        .get("status", {})
                        .get("phase")
                        == "Scheduled"
                    ),
                    "PodGroup status written",
                )
                # An ElasticQuota (listed, watched): its status.used written.
                api.put(ELASTIC_QUOTAS, quota_obj("default", {"nvidia.com/gpu": 8}))
                await eventually(
                    lambda: api.request_count("patch", "elasticquotas", "status") >= 1,
                    "ElasticQuota status written",
                )
                # Kubernetes' own gang API: its PodGroupScheduled condition written.
                api.put(NATIVE_PODGROUPS, native_podgroup_obj("native", 2))
                for i in range(2):
                    api.put_pod(native_gang_pod("native", i, gpus=0))
                await eventually(
                    lambda: (
                        [
                            c.get("status")
                            for c in (api.get(NATIVE_PODGROUPS, "default", "native") or {})
                            .get("status", {})
                            .get("conditions", [])
                        ]
                        == ["True"]
                    ),
                    "native PodGroup status written",
                )
                # A gang broken by a 409: its bound member is deleted.
                api.fail_next_binds(1, status=409, after=1)
                for i in range(2):
                    api.put_pod(pod_obj(f"broken-{i}", gang="broken", min_member=2, gpus=1))
                await eventually(lambda: api.request_count("delete", "pods") >= 1, "undo")
                # A gang that cannot fit: conditions, FailedScheduling, then its count.
                for i in range(2):
                    api.put_pod(pod_obj(f"huge-{i}", gang="huge", min_member=2, gpus=8))
                await eventually(
                    lambda: api.request_count("patch", "events") >= 1, "an event's count"
                )
                # Volumes: a static local PV bound to its claim, a claim given its
                # node, then the same writes taken back when the gang breaks.
                api.put(STORAGE_CLASSES, storage_class_obj("local"))
                api.put(PERSISTENT_VOLUMES, pv_obj("disk-n0", node="n0"))
                api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj("db-data"))
                api.put_pod(with_claims(pod_obj("db", cpu="1"), "db-data"))
                await eventually(lambda: bound(api, "db") == 1, "db bound")
                provisioned = storage_class_obj("csi", provisioner="ebs.csi.aws.com")
                api.put(STORAGE_CLASSES, provisioned)
                api.fail_next_binds(1, status=409, after=1)
                for i in range(2):
                    api.put(PERSISTENT_VOLUME_CLAIMS, pvc_obj(f"v-{i}", storage_class="csi"))
                    api.put_pod(
                        with_claims(pod_obj(f"vol-{i}", gang="vol", min_member=2), f"v-{i}")
                    )
                await eventually(
                    lambda: api.request_count("patch", "persistentvolumeclaims") >= 4,
                    "selected-node written and taken back",
                )
                # DRA: a gang of two with a claim each on n0's slice, its 2nd Binding
                # refused: the claims' finalizer and status written (allocation,
                # reservedFor: resourceclaims/binding too), the unbound member's claim
                # read and rolled back; slices, classes and claims listed and watched.
                api.put(DEVICE_CLASSES, device_class_obj())
                api.put(RESOURCE_SLICES, dra_slice_obj("n0", gpus=2))
                for i in range(2):
                    api.put(RESOURCE_CLAIMS, stored_as_created(f"dra-{i}"))
                api.fail_next_binds(1, status=409, after=1)
                for i in range(2):
                    member = pod_obj(f"dra-{i}", gang="dra", min_member=2)
                    member["spec"]["resourceClaims"] = [
                        {"name": "gpu", "resourceClaimName": f"dra-{i}"}
                    ]
                    api.put_pod(member)
                await eventually(
                    lambda: api.request_count("get", "resourceclaims") >= 1, "claims rolled back"
                )
                # onBindFailure: delete took the bound member away: its controller (this
                # test) creates it again, a new pod (new uid) naming the same claim, and
                # the gang binds on the retry.
                await eventually(lambda: len(pods_named(api, "dra-")) == 1, "member deleted")
                for i in range(2):
                    if not api.get_pod("default", f"dra-{i}"):
                        member = pod_obj(f"dra-{i}", gang="dra", min_member=2)
                        member["metadata"]["uid"] = f"recreated-dra-{i}"
                        member["spec"]["resourceClaims"] = [
                            {"name": "gpu", "resourceClaimName": f"dra-{i}"}
                        ]
                        api.put_pod(member)
                await eventually(lambda: bound(api, "dra-") == 2, "the DRA gang bound")
                # DRA-backed extended resources: a class naming example.com/accel, a
                # node without it reaching two devices, a gang of two asking one each,
                # its 2nd Binding refused: each member's claim created, its status and
                # the pod's extendedResourceClaimStatus written, the unbound member's
                # claim deleted (its finalizer taken off first).
                accel = device_class_obj("accel.example.com")
                accel["spec"]["extendedResourceName"] = "example.com/accel"
                api.put(DEVICE_CLASSES, accel)
                api.put_node(node_obj("x0"))
                api.put(RESOURCE_SLICES, dra_slice_obj("x0", gpus=2))
                api.fail_next_binds(1, status=409, after=1)
                for i in range(2):
                    member = pod_obj(f"accel-{i}", gang="accel", min_member=2)
                    member["spec"]["containers"][0]["resources"]["requests"][
                        "example.com/accel"
                    ] = "1"
                    api.put_pod(member)
                await eventually(
                    lambda: api.request_count("delete", "resourceclaims") >= 1,
                    "an extended-resource claim deleted",
                )
                # A PodGroup that is wrong: a Warning on the PodGroup (its uid read).
                api.put(PODGROUPS, podgroup_obj("bad", 0))
                api.put_pod(pod_obj("bad-0", gang="bad"))
                await eventually(
                    lambda: api.request_count("get", "podgroups") >= 1, "the PodGroup's uid"
                )
                # Priority preemption: a gang evicts a lower one (pods/eviction) and its
                # member is nominated (pods/status) on a node of its own pool.
                api.put_node(node_obj("p0", gpus=2, labels={"pool": "p"}))
                # The victim is one the scheduler bound itself: it evicts no other pod.
                api.put_pod(pod_obj("low-0", gpus=2, node_selector={"pool": "p"}))
                await eventually(lambda: bound(api, "low-") == 1, "the victim bound")
                urgent = pod_obj("urgent-0", gpus=2, priority=100, node_selector={"pool": "p"})
                api.put_pod(urgent)
                await eventually(
                    lambda: api.request_count("create", "pods", "eviction") >= 1, "eviction"
                )
                await eventually(lambda: bound(api, "urgent-") == 1, "the preemptor bound")
            finally:
                stop.set()
                assert await asyncio.wait_for(task, HANG) == 0
            lease = api.get(LEASES, "kube-system", "gang-scheduler")
            assert lease is not None and not lease["spec"].get("holderIdentity")

    await asyncio.wait_for(scenario(), TEST_TIMEOUT)
    assert authorizer.denied == [] and access.refused == []
    unused = policy.grants() - authorizer.used
    assert unused == set(), f"granted but never used: {sorted(map(str, unused))}"
    # What it used, as (verb, resource) where it was used: nothing was needed beyond.
    assert {(a.verb, a.resource) for a in authorizer.allowed} == {
        (g.verb, g.resource) for g in policy.grants()
    }


@pytest.mark.asyncio
async def test_the_node_agent_runs_under_exactly_the_deployed_rbac(tmp_path: Path) -> None:
    """The agent command as the DaemonSet runs it: the publisher gets and patches its
    Node; the device plugin, asked by a (fake) kubelet to Allocate, lists the node's
    pods and marks the one it serves."""
    policy = account_policy("DaemonSet", "gang-scheduler-node-agent")
    authorizer = RbacAuthorizer(policy)
    account = Account(User(policy.user, extra={NODE_NAME_EXTRA: ("gpu-1",)}), authorizer)
    access = AccessControl({"agent": account}, admission_policies(rendered()))
    plugin_dir = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))  # a socket path is short
    async with KubeApiEmulator() as api:
        api.access = access
        node = node_obj("gpu-1")
        node["metadata"]["annotations"] = {}
        api.put_node(node)
        notebook = pod_obj("notebook", vgpu=500, node_name="gpu-1")
        notebook["metadata"]["annotations"] = {ASSIGNMENT_ANNOTATION: "1:500"}
        api.put_pod(node_signed(notebook))
        api.put(SECRETS, node_agent_secret())
        kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig", token="agent")
        kubelet = FakeKubelet(plugin_dir)
        await kubelet.start()
        options = AgentOptions(node_name="gpu-1", kubeconfig=str(kubeconfig), interval=30)
        # The device plugin's options as the DaemonSet gives them (isolation included).
        plugin = replace(deployed_plugin_config(), directory=plugin_dir, watch_interval=0.02)
        agent = asyncio.create_task(serve(options, FakeNvml(PCIE_BOX), plugin))
        client = PluginClient(plugin_dir / SOCKET_NAME)
        try:
            await eventually(lambda: len(kubelet.registrations) == 1, "registration")
            [answer] = await client.allocate([f"{PCIE_BOX.gpus[0].uuid}::{k}" for k in range(500)])
            assert handed(answer) == PCIE_BOX.gpus[1].uuid
            await eventually(lambda: api.request_count("patch", "nodes") == 1, "node patch")
        finally:
            await client.close()
            os.kill(os.getpid(), signal.SIGTERM)  # serve's handler stops both
            assert await asyncio.wait_for(agent, HANG) == 0
            await kubelet.stop()
            shutil.rmtree(plugin_dir, ignore_errors=True)
    assert authorizer.denied == [] and access.refused == []
    assert policy.grants() == authorizer.used


@pytest.mark.asyncio
async def test_whole_gpus_and_the_kubelet_report_run_under_the_deployed_rbac(
    tmp_path: Path,
) -> None:
    """On a node labelled for whole GPUs, the agent serves nvidia.com/gpu (Allocate marks
    the pod) and writes what the kubelet's pod-resources API says on its own Node: no
    request refused by RBAC or by the admission policies."""
    from cache.kubelet_devices import KUBELET_DEVICES_ANNOTATION
    from scheduler.agent.deviceplugin import WHOLE_GPUS_LABEL, WHOLE_SOCKET_NAME
    from tests.agent.podresources_server import FakePodResources, holding

    policy = account_policy("DaemonSet", "gang-scheduler-node-agent")
    authorizer = RbacAuthorizer(policy)
    account = Account(User(policy.user, extra={NODE_NAME_EXTRA: ("gpu-1",)}), authorizer)
    access = AccessControl({"agent": account}, admission_policies(rendered()))
    plugin_dir = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))  # a socket path is short
    uuids = [gpu.uuid for gpu in PCIE_BOX.gpus]
    async with KubeApiEmulator() as api:
        api.access = access
        node = node_obj("gpu-1", labels={WHOLE_GPUS_LABEL: "true"})
        node["metadata"]["annotations"] = {}
        api.put_node(node)
        train = pod_obj("train", gpus=1, node_name="gpu-1", uid="u-train")
        train["metadata"]["annotations"] = {ASSIGNMENT_ANNOTATION: "2:1000"}
        api.put_pod(node_signed(train))
        api.put(SECRETS, node_agent_secret())
        api.put_pod(pod_obj("other", gpus=1, node_name="gpu-1", uid="u-other"))
        pod_resources = FakePodResources(plugin_dir / "pr.sock")
        pod_resources.pods = [holding("default", "other", "nvidia.com/gpu", uuids[3])]
        await pod_resources.start()
        kubeconfig = write_kubeconfig(api.base_url, tmp_path / "kubeconfig", token="agent")
        kubelet = FakeKubelet(plugin_dir)
        await kubelet.start()
        options = AgentOptions(
            node_name="gpu-1",
            kubeconfig=str(kubeconfig),
            interval=30,
            pod_resources_socket=str(pod_resources.socket),
            pod_resources_interval=0.05,
        )
        plugin = replace(deployed_plugin_config(), directory=plugin_dir, watch_interval=0.02)
        agent = asyncio.create_task(serve(options, FakeNvml(PCIE_BOX), plugin))
        client = PluginClient(plugin_dir / WHOLE_SOCKET_NAME)

        def reported() -> str:
            stored = api.get_node("gpu-1") or {}
            annotations = stored["metadata"].get("annotations") or {}
            return str(annotations.get(KUBELET_DEVICES_ANNOTATION, ""))

        try:
            await eventually(lambda: len(kubelet.registrations) == 2, "both registered")
            [answer] = await client.allocate([uuids[0]])
            assert handed(answer) == uuids[2]
            await eventually(lambda: reported() == '{"u-other":[3]}', "the kubelet's report")
        finally:
            await client.close()
            os.kill(os.getpid(), signal.SIGTERM)  # serve's handler stops them all
            assert await asyncio.wait_for(agent, HANG) == 0
            await kubelet.stop()
            await pod_resources.stop()
            shutil.rmtree(plugin_dir, ignore_errors=True)
    assert authorizer.denied == [] and access.refused == []


# The only Secret rules deploy/ may have: the signing keys (scheduler/kube/signing_secret.py,
# scheduler/agent/assignment_keys.py), in kube-system, read and updated by name only.
SIGNING_SECRET_RULES = {
    "gang-scheduler-signing-keys": [
        ((), ("create",)),
        (("gang-scheduler-assignment-key", "gang-scheduler-node-agent-key"), ("get",)),
        (("gang-scheduler-node-agent-key",), ("update",)),
    ],
    "gang-scheduler-node-agent-key": [(("gang-scheduler-node-agent-key",), ("get",))],
}


def test_the_roles_have_no_wildcard_no_other_secrets_and_no_admin_binding() -> None:
    objects = rendered()
    for obj in objects:
        if obj["kind"] in ("Role", "ClusterRole"):
            assert "aggregationRule" not in obj
            name = obj["metadata"]["name"]
            secret_rules = []
            for rule in obj["rules"]:
                for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in rule.get(key, []), (name, key)
                if "secrets" in rule["resources"]:
                    assert rule["resources"] == ["secrets"] and obj["kind"] == "Role"
                    secret_rules.append(
                        (tuple(rule.get("resourceNames", ())), tuple(rule["verbs"]))
                    )
                assert "nonResourceURLs" not in rule
            assert secret_rules == SIGNING_SECRET_RULES.get(name, []), name
            if secret_rules:
                assert obj["metadata"]["namespace"] == "kube-system"
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert obj["roleRef"]["name"] not in ("cluster-admin", "admin", "edit")


# --- the authorizer itself --------------------------------------------------------------
LEASE_ROLE = {
    "kind": "Role",
    "metadata": {"name": "leader", "namespace": "kube-system"},
    "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["mine"],
            "verbs": ["get"],
        },
    ],
}
LEASE_BINDING = {
    "kind": "RoleBinding",
    "metadata": {"name": "leader", "namespace": "kube-system"},
    "roleRef": {"kind": "Role", "name": "leader"},
    "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "kube-system"}],
}


def test_a_role_binding_grants_in_its_namespace_and_names_only() -> None:
    policy = Policy.for_service_account([LEASE_ROLE, LEASE_BINDING], "kube-system", "sa")
    group = "coordination.k8s.io"
    assert policy.grant_for(Attributes("get", group, "leases", "kube-system", "mine"))
    assert not policy.grant_for(Attributes("get", group, "leases", "kube-system", "other"))
    assert not policy.grant_for(Attributes("get", group, "leases", "default", "mine"))
    assert policy.grant_for(Attributes("create", group, "leases", "kube-system", ""))
    assert not policy.grant_for(Attributes("list", group, "leases", "kube-system", ""))
    other = Policy.for_service_account([LEASE_ROLE, LEASE_BINDING], "kube-system", "nobody")
    assert other.grants() == set()


def test_a_subresource_needs_its_own_rule() -> None:
    rule = Rule(("",), ("pods",), ("create", "get"))
    assert rule.allows(Attributes("get", "", "pods", "ml", "p"))
    assert not rule.allows(Attributes("create", "", "pods/binding", "ml", "p"))


def test_a_binding_to_a_missing_role_is_an_error() -> None:
    with pytest.raises(ValueError, match="missing"):
        Policy.for_service_account([LEASE_BINDING], "kube-system", "sa")


@pytest.mark.asyncio
async def test_a_request_the_rules_do_not_grant_gets_403_as_kube_apiserver_words_it(
    tmp_path: Path,
) -> None:
    policy = Policy.for_service_account([LEASE_ROLE, LEASE_BINDING], "kube-system", "sa")
    async with KubeApiEmulator() as api:
        api.authorizer = RbacAuthorizer(policy)
        api.put(LEASES, {"metadata": {"name": "other", "namespace": "kube-system"}, "spec": {}})
        client = await create_client(str(write_kubeconfig(api.base_url, tmp_path / "kc")))
        async with client:
            with pytest.raises(ApiError) as caught:
                await client.request_json(
                    "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/other"
                )
        assert caught.value.status == 403
        assert api.request_count("get", "leases") == 1  # recorded with its 403
    expected = forbidden(
        policy.user, Attributes("get", "coordination.k8s.io", "leases", "kube-system", "other")
    )
    assert (
        str(caught.value.message)
        == expected.body["message"]
        == (
            'leases.coordination.k8s.io "other" is forbidden: User '
            '"system:serviceaccount:kube-system:sa" cannot get resource "leases" in API group '
            '"coordination.k8s.io" in the namespace "kube-system"'
        )
    )
