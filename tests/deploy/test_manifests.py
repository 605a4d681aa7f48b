"""deploy/ renders with kustomize, every object is valid against the Kubernetes schemas
(offline, with the kubernetes-validate package), and the objects agree with the code:
the configuration is one the real loader accepts, the node agent's arguments are ones
the real CLI accepts, ports and the Lease match the configuration."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cache.podgroup import PODGROUP_GROUP, PODGROUP_PLURAL, PODGROUP_VERSION
from cache.resources import MILLI_PER_GPU
from scheduler.agent.allocation import DEFAULT_SCHEDULER_NAMES, VISIBLE_DEVICES_ENV, GpuState
from scheduler.agent.deviceplugin import DevicePluginConfig
from scheduler.agent.isolation import container_answer
from scheduler.cli.main import build_parser, device_plugin_config
from scheduler.process.config import SchedulerConfig, option_paths, parse_config
from tests.deploy.render import (
    DEPLOY,
    assert_namespaced_in,
    one,
    rendered,
    scheduler_config_text,
)

IMAGE = "ghcr.io/gang-scheduler/gang-scheduler"
SCHEDULER_LABELS = {
    "app.kubernetes.io/name": "gang-scheduler",
    "app.kubernetes.io/component": "scheduler",
}


def test_every_rendered_object_is_valid() -> None:
    objects = rendered()
    assert {o["kind"] for o in objects} == {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "DaemonSet",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for obj in objects:
        kubernetes_validate.validate(obj, "1.32", strict=True)
    assert_namespaced_in(objects, "kube-system")


def test_the_podgroup_crd_is_the_api_the_scheduler_reads() -> None:
    crd = one(rendered(), "CustomResourceDefinition", f"{PODGROUP_PLURAL}.{PODGROUP_GROUP}")
    assert crd["metadata"]["name"] == f"{PODGROUP_PLURAL}.{PODGROUP_GROUP}"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == PODGROUP_VERSION and version["subresources"] == {"status": {}}
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["minMember"]["minimum"] == 1
    phases = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"Pending", "Scheduled", "Running", "Failed"} <= set(phases["phase"]["enum"])


# The PodGroup of kubernetes-sigs/scheduler-plugins (apis/scheduling/v1alpha1/types.go,
# PodGroupSpec and PodGroupStatus; its CRD is generated from them): every field, with the
# OpenAPI type its Go type gets. A cluster that has their CRD keeps every field when
# ours replaces it, so both schedulers (and their controller) can share PodGroups.
SCHEDULER_PLUGINS_FIELDS = {
    "spec": {
        "minMember": ("integer", "int32"),
        "minResources": ("object", None),
        "scheduleTimeoutSeconds": ("integer", "int32"),
    },
    "status": {
        "phase": ("string", None),
        "occupiedBy": ("string", None),
        "running": ("integer", "int32"),
        "succeeded": ("integer", "int32"),
        "failed": ("integer", "int32"),
        "scheduleStartTime": ("string", "date-time"),
    },
}
SCHEDULER_PLUGINS_PHASES = {"Pending", "Running", "Scheduling", "Unknown", "Finished", "Failed"}


def test_the_podgroup_crd_holds_every_field_of_scheduler_plugins_podgroup() -> None:
    crd = one(rendered(), "CustomResourceDefinition", f"{PODGROUP_PLURAL}.{PODGROUP_GROUP}")
    assert crd["spec"]["names"]["kind"] == "PodGroup" and crd["spec"]["scope"] == "Namespaced"
    assert {"pg", "pgs"} <= set(crd["spec"]["names"]["shortNames"])
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    for section, fields in SCHEDULER_PLUGINS_FIELDS.items():
        ours = schema[section]["properties"]
        for name, (kind, fmt) in fields.items():
            assert ours[name]["type"] == kind, (section, name)
            assert ours[name].get("format") == fmt, (section, name)
    assert set(schema["status"]["properties"]["phase"]["enum"]) >= SCHEDULER_PLUGINS_PHASES
    resources = schema["spec"]["properties"]["minResources"]["additionalProperties"]
    assert resources["x-kubernetes-int-or-string"] is True


def test_the_configmap_is_a_config_the_real_loader_accepts_with_every_option() -> None:
    text = scheduler_config_text(rendered())
    config = parse_config(text)
    # Shipped at the documented defaults, but for the debug listener (off by default;
    # loopback only, docs/security.md, "Endpoints").
    assert config.http.debug_port == 10270 and config.http.debug_address == "127.0.0.1"
    assert replace(config, http=replace(config.http, debug_port=0)) == SchedulerConfig()
    raw = yaml.safe_load(text)

    def paths(node: Any, prefix: str = "") -> set[str]:
        if isinstance(node, dict) and not prefix.endswith("weights"):
            found: set[str] = set()
            for key, value in node.items():
                found |= paths(value, f"{prefix}.{key}" if prefix else key)
            return found
        return {prefix}

    assert paths(raw) == set(option_paths())  # every option is listed (and documented)


def scheduler_pod() -> dict[str, Any]:
    spec = one(rendered(), "Deployment", "gang-scheduler")["spec"]["template"]["spec"]
    assert isinstance(spec, dict)
    return spec


def test_the_deployment_is_ha_hardened_and_probed() -> None:
    objects = rendered()
    deployment = one(objects, "Deployment", "gang-scheduler")
    config = parse_config(scheduler_config_text(objects))
    assert deployment["spec"]["replicas"] == 2 and config.leader_election.enabled
    assert deployment["spec"]["selector"]["matchLabels"] == SCHEDULER_LABELS
    pod = scheduler_pod()
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    spread = pod["topologySpreadConstraints"][0]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == SCHEDULER_LABELS
    (container,) = pod["containers"]
    assert container["image"].startswith(f"{IMAGE}:")
    assert build_parser().parse_args(container["args"]).handler.__name__ == "_run"
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    (port,) = container["ports"]
    assert port["containerPort"] == config.http.port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory"}
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_the_install_keeps_no_key_and_the_signing_role_names_the_configured_secrets() -> None:
    """No Secret and no key file in deploy/ (the scheduler creates the Secret at its first
    start, issue 26); the Role that lets it names exactly the Secrets the configuration
    reads and writes, in its namespace, and the node agent reads the one the scheduler
    writes for it."""
    objects = rendered()
    assert not [o for o in objects if o["kind"] == "Secret"]
    signing = parse_config(scheduler_config_text(objects)).assignment_signing
    assert signing.key_file == ""
    role = one(objects, "Role", "gang-scheduler-signing-keys")
    assert role["metadata"]["namespace"] == signing.namespace
    names = [r.get("resourceNames") for r in role["rules"] if "get" in r["verbs"]]
    assert names == [[signing.secret_name, signing.node_agent_secret_name]]
    pod = scheduler_pod()
    assert not [v for v in pod["volumes"] if "secret" in v]
    agent_role = one(objects, "Role", "gang-scheduler-node-agent-key")
    agent_names = [r.get("resourceNames") for r in agent_role["rules"]]
    assert agent_names == [[signing.node_agent_secret_name]]
    assert agent_role["metadata"]["namespace"] == signing.namespace
    daemonset = one(objects, "DaemonSet", "gang-scheduler-node-agent")
    (agent,) = daemonset["spec"]["template"]["spec"]["containers"]
    default = f"{signing.namespace}/{signing.node_agent_secret_name}"
    args = agent["args"]
    assert args[args.index("--assignment-key-secret") + 1] == default
    assert DevicePluginConfig(node_name="").key_secret == default  # and so is its default


def test_the_pdb_and_the_service_select_the_scheduler_pods() -> None:
    objects = rendered()
    pdb = one(objects, "PodDisruptionBudget", "gang-scheduler")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == SCHEDULER_LABELS
    service = one(objects, "Service", "gang-scheduler-metrics")
    assert service["spec"]["selector"] == SCHEDULER_LABELS
    (port,) = service["spec"]["ports"]
    (container,) = scheduler_pod()["containers"]
    assert port["targetPort"] == container["ports"][0]["name"]


def test_the_lease_role_names_the_configured_lease() -> None:
    objects = rendered()
    election = parse_config(scheduler_config_text(objects)).leader_election
    role = one(objects, "Role", "gang-scheduler-leader-election")
    assert role["metadata"]["namespace"] == election.lease_namespace
    names = [r.get("resourceNames") for r in role["rules"] if "get" in r["verbs"]]
    assert names == [[election.lease_name]]


def test_the_node_agent_runs_on_gpu_nodes_with_arguments_the_cli_accepts() -> None:
    daemonset = one(rendered(), "DaemonSet", "gang-scheduler-node-agent")
    pod = daemonset["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = terms["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
    ]
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pod["tolerations"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.handler.__name__ == "_node_agent" and args.interval > 0 and not args.once
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    # Root (the kubelet's device-plugin directory is root's), with nothing more.
    assert pod["securityContext"]["runAsUser"] == 0
    assert container["image"] == scheduler_pod()["containers"][0]["image"]


def test_the_node_agent_hands_out_gpus_as_cdi_devices_not_by_environment() -> None:
    """The DaemonSet's device plugin names each container's GPUs to the runtime as CDI
    devices and sets NVIDIA_VISIBLE_DEVICES=void: the runtime gives a container exactly
    its GPUs, and a node whose NVIDIA runtime ignores the variable from unprivileged
    containers (the hardened toolkit) still works. The mode is written in the manifest,
    so a change of the binary's default changes nothing deployed."""
    pod = one(rendered(), "DaemonSet", "gang-scheduler-node-agent")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    arguments = container["args"]
    assert arguments[arguments.index("--isolation") + 1] == "cdi"
    config = device_plugin_config(build_parser().parse_args(arguments))
    assert config is not None and config.isolation == ("cdi",) and config.problems() == []
    gpus = [GpuState(1, "GPU-b", True, 0, 5)]
    answer = container_answer({VISIBLE_DEVICES_ENV: "GPU-b"}, gpus, config.isolation)
    assert answer.envs[VISIBLE_DEVICES_ENV] == "void"
    assert answer.cdi_devices == ("nvidia.com/gpu=GPU-b",)


def test_the_node_agent_mounts_the_kubelets_device_plugin_directory() -> None:
    pod = one(rendered(), "DaemonSet", "gang-scheduler-node-agent")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    assert not args.no_device_plugin
    mount = next(m for m in container["volumeMounts"] if m["name"] == "device-plugins")
    assert mount["mountPath"] == str(args.device_plugin_dir).rstrip("/")
    assert not mount.get("readOnly")
    volume = next(v for v in pod["volumes"] if v["name"] == "device-plugins")
    assert volume["hostPath"] == {"path": mount["mountPath"], "type": "Directory"}


def test_the_node_agent_mounts_the_kubelets_pod_resources_socket_read_only() -> None:
    pod = one(rendered(), "DaemonSet", "gang-scheduler-node-agent")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.pod_resources_interval > 0
    mount = next(m for m in container["volumeMounts"] if m["name"] == "pod-resources")
    assert mount["mountPath"] == str(Path(args.pod_resources_socket).parent)
    assert mount["readOnly"] is True  # a unix socket connects through a read-only mount
    volume = next(v for v in pod["volumes"] if v["name"] == "pod-resources")
    assert volume["hostPath"] == {"path": mount["mountPath"], "type": "Directory"}


def overlay(tmp_path: Path, text: str) -> Path:
    """A kustomization in tmp_path; `{deploy}` is deploy/ relative to it."""
    (tmp_path / "kustomization.yaml").write_text(
        text.format(deploy=os.path.relpath(DEPLOY, tmp_path))
    )
    return tmp_path


def test_the_servicemonitor_component_renders_and_scrapes_the_metrics_service(
    tmp_path: Path,
) -> None:
    path = overlay(
        tmp_path,
        "resources: [{deploy}]\ncomponents: [{deploy}/components/servicemonitor]\n",
    )
    objects = rendered(path)
    monitor = one(objects, "ServiceMonitor")
    # kubernetes-validate has no schema for the Prometheus operator's CRDs: check the
    # fields the operator needs, against the Service they must select.
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = one(objects, "Service", "gang-scheduler-metrics")
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["kube-system"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    for obj in objects:
        if obj["kind"] != "ServiceMonitor":
            kubernetes_validate.validate(obj, "1.32", strict=True)
    assert "ServiceMonitor" not in {o["kind"] for o in rendered()}


def test_the_image_is_overridden_with_kustomize_images(tmp_path: Path) -> None:
    path = overlay(
        tmp_path,
        "resources: [{deploy}]\n"
        "images:\n"
        f"  - name: {IMAGE}\n"
        "    newName: registry.example.internal/ml/gang-scheduler\n"
        "    newTag: 0.1.1\n",
    )
    objects = rendered(path)
    images = {
        c["image"]
        for o in objects
        if o["kind"] in ("Deployment", "DaemonSet")
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example.internal/ml/gang-scheduler:0.1.1"}


@pytest.mark.parametrize("kind", ["Deployment", "DaemonSet"])
def test_workloads_request_and_limit_resources(kind: str) -> None:
    for obj in rendered():
        if obj["kind"] == kind:
            for container in obj["spec"]["template"]["spec"]["containers"]:
                resources = container["resources"]
                assert resources["requests"]["memory"] and resources["limits"]["memory"]
                assert resources["requests"]["cpu"] and resources["limits"]["cpu"]


def test_the_documented_overlays_render(tmp_path: Path) -> None:
    """The operator guide's overlays: the node agent on another label, and a replaced
    configuration (which renames the ConfigMap, so the Deployment rolls)."""
    (tmp_path / "my-config.yaml").write_text("policy: {name: fgd}\n")
    path = overlay(
        tmp_path,
        "resources: [{deploy}]\n"
        "configMapGenerator:\n"
        "  - name: gang-scheduler-config\n"
        "    namespace: kube-system\n"
        "    behavior: replace\n"
        "    files:\n"
        "      - config.yaml=my-config.yaml\n"
        "patches:\n"
        "  - target: {{kind: DaemonSet, name: gang-scheduler-node-agent}}\n"
        "    patch: |-\n"
        "      - op: replace\n"
        "        path: /spec/template/spec/affinity/nodeAffinity/"
        "requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0\n"
        "        value: {{key: accelerator, operator: In, values: [nvidia]}}\n",
    )
    objects = rendered(path)
    for obj in objects:
        kubernetes_validate.validate(obj, "1.32", strict=True)
    assert parse_config(scheduler_config_text(objects)).policy.name == "fgd"
    shipped = one(rendered(), "ConfigMap")["metadata"]["name"]
    assert one(objects, "ConfigMap")["metadata"]["name"] != shipped
    pod = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "accelerator", "operator": "In", "values": ["nvidia"]}
    ]


def test_the_node_agent_counts_shares_and_trusts_the_scheduler_as_the_configmap_says() -> None:
    """The device plugin's unit and trusted schedulers agree with the scheduler's
    configuration, or the two would count nvidia.com/vgpu differently (device-plugin.md)."""
    objects = rendered()
    config = parse_config(scheduler_config_text(objects))
    agent = one(objects, "DaemonSet", "gang-scheduler-node-agent")
    (container,) = agent["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert MILLI_PER_GPU // args.vgpu_unit == config.fractional_gpu.units_per_gpu
    assert config.scheduler_name in (args.trusted_scheduler or DEFAULT_SCHEDULER_NAMES)


def test_the_node_agent_declares_its_metrics_port_and_probes_on_it() -> None:
    pod = one(rendered(), "DaemonSet", "gang-scheduler-node-agent")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    (port,) = container["ports"]
    assert port["containerPort"] == args.metrics_port and port["name"] == "http-metrics"
    assert args.attribution_interval > 0
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    # Liveness must not fire before the agent's own limit (3 intervals + a minute) could.
    liveness = container["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] <= 3 * args.interval + 60
