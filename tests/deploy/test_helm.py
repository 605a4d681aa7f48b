"""The Helm chart (deploy/helm/gang-scheduler) is the kustomize base: generated from it by
scripts/helm_chart.py, and rendered here by Helm's own template engine (the
helm-python-sdk package: Helm's Go SDK as a shared library, no helm binary), object by
object equal to `kubectl kustomize` with the default values, with every component on,
and with parts off; values reach the objects they name; a configuration rolls the pods
out under the very ConfigMap name kustomize gives it (docs/integrations.md, "Helm")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from scheduler.process.config import parse_config
from tests.deploy.render import DEPLOY, ROOT, assert_namespaced_in, one, rendered

CHART = DEPLOY / "helm" / "gang-scheduler"
GENERATOR = ROOT / "scripts" / "helm_chart.py"
RELEASE = "gang-scheduler"
Objects = list[dict[str, Any]]


def render(values: dict[str, Any] | None = None, namespace: str = "kube-system") -> Objects:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values, name=RELEASE, namespace=namespace, is_install=True)
    return [doc for text in manifests.values() for doc in yaml.safe_load_all(text) if doc]


def by_key(objects: Objects) -> dict[tuple[str, str], dict[str, Any]]:
    keyed = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(keyed) == len(objects), "two objects of one kind and name"
    return keyed


KEEP = {"helm.sh/resource-policy": "keep"}


def with_helm_policies(kustomize: Objects) -> Objects:
    """kustomize's objects as the chart means them: the CRDs kept by `helm uninstall`
    (the one annotation the chart adds; tests/deploy/test_helm_install.py)."""
    kept = []
    for obj in kustomize:
        obj = dict(obj)
        if obj["kind"] == "CustomResourceDefinition":
            meta = dict(obj["metadata"])
            meta["annotations"] = {**meta.get("annotations", {}), **KEEP}
            obj["metadata"] = meta
        kept.append(obj)
    return kept


def assert_same_objects(chart: Objects, kustomize: Objects) -> None:
    ours, theirs = by_key(chart), by_key(with_helm_policies(kustomize))
    assert sorted(ours) == sorted(theirs)
    for name, obj in theirs.items():
        assert ours[name] == obj, name


def keys_of(*sources: str) -> set[tuple[str, str]]:
    return {
        (doc["kind"], doc["metadata"]["name"])
        for source in sources
        for doc in yaml.safe_load_all((DEPLOY / source).read_text())
        if doc
    }


def kustomize_overlay(tmp_path: Path, components: list[str]) -> Objects:
    """The base with `components`, as an operator's overlay renders it."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    up = Path(os.path.relpath(DEPLOY, overlay))  # kustomize takes relative paths only
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [str(up)],
                "components": [str(up / "components" / name) for name in components],
            }
        )
    )
    return rendered(overlay)


# --- one source --------------------------------------------------------------------------------
def test_the_committed_chart_is_what_the_generator_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_default_values_render_exactly_the_kustomize_base() -> None:
    assert_same_objects(render(), rendered())


def test_every_component_on_renders_the_base_with_every_component(tmp_path: Path) -> None:
    values = {name: {"enabled": True} for name in ("serviceMonitor", "networkPolicy")}
    values["prometheusRule"] = {"enabled": True}
    values["nodeAgent"] = {"dra": {"enabled": True}}
    kustomize = kustomize_overlay(
        tmp_path, ["servicemonitor", "networkpolicy", "alerts", "dra-driver"]
    )
    assert {o["kind"] for o in kustomize} >= {"ServiceMonitor", "NetworkPolicy", "PrometheusRule"}
    chart = render(values)
    assert_same_objects(chart, kustomize)
    # The alert rules' own templates reach Prometheus as written, not eaten by Helm.
    rule = one(chart, "PrometheusRule")
    assert "{{ $value }}" in yaml.safe_dump(rule, width=10_000)


def test_dra_mode_alone_renders_the_base_with_its_component(tmp_path: Path) -> None:
    """nodeAgent.dra.enabled: exactly the overlay with deploy/components/dra-driver
    (--dra, the kubelet's plugin directories and /var/run/cdi, the RBAC)."""
    kustomize = kustomize_overlay(tmp_path, ["dra-driver"])
    chart = render({"nodeAgent": {"dra": {"enabled": True}}})
    assert_same_objects(chart, kustomize)
    (container,) = one(chart, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert container["args"][-2:] == ["--dra", "--no-device-plugin"]


@pytest.mark.parametrize(
    ("values", "sources"),
    [
        ({"nodeAgent": {"enabled": False}}, ("rbac-node-agent.yaml", "node-agent.yaml")),
        ({"admissionPolicies": {"enabled": False}}, ("admission-policy.yaml",)),
        ({"crds": {"install": False}}, ("crd-podgroup.yaml", "crd-elasticquota.yaml")),
    ],
)
def test_a_part_switched_off_leaves_exactly_its_objects_out(
    values: dict[str, Any], sources: tuple[str, ...]
) -> None:
    left_out = keys_of(*sources)
    assert left_out
    expected = [o for o in rendered() if (o["kind"], o["metadata"]["name"]) not in left_out]
    assert_same_objects(render(values), expected)


# --- values ------------------------------------------------------------------------------------
def containers(objects: Objects, kind: str) -> dict[str, Any]:
    (container,) = one(objects, kind)["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_values_reach_the_objects_and_stay_valid() -> None:
    # Helm merges maps with the defaults: a key is dropped by setting it to null.
    resources = {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"cpu": None, "memory": "2Gi"},
    }
    objects = render(
        {
            "image": {
                "repository": "registry.example/gs",
                "tag": "9.9.9",
                "pullPolicy": "Always",
                "pullSecrets": [{"name": "registry"}],
            },
            "scheduler": {
                "replicas": 3,
                "resources": resources,
                "priorityClassName": "high",
                "logLevel": "debug",
                "logFormat": "json",
                "nodeSelector": {"pool": "system"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "affinity": None,
                "podLabels": {"team": "ml", "app.kubernetes.io/name": "not-ours"},
                "podAnnotations": {"example.com/owner": "ml-platform"},
            },
            "nodeAgent": {
                "resources": {"requests": {"cpu": "20m"}},
                "priorityClassName": "n",
                "vgpuUnit": 10,
                "wholeGpus": "on",
                "isolation": "envvar",
                "nodeSelector": {"gpu": "a100"},
                "affinity": None,
                "podAnnotations": {"example.com/owner": "ml-platform"},
            },
        }
    )
    deployment = one(objects, "Deployment", "gang-scheduler")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "high"
    scheduler = containers(objects, "Deployment")
    assert scheduler["image"] == "registry.example/gs:9.9.9"
    assert scheduler["imagePullPolicy"] == "Always"
    assert scheduler["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"memory": "2Gi"},
    }
    assert scheduler["args"][-4:] == ["--log-level", "debug", "--log-format", "json"]
    pod = deployment["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"pool": "system"}
    assert pod["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert "affinity" not in pod["spec"]  # null drops the base's anti-affinity
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    # The chart's labels win: the Deployment's selector must still match its pods.
    assert pod["metadata"]["labels"] == {
        "team": "ml",
        **deployment["spec"]["selector"]["matchLabels"],
    }
    assert pod["metadata"]["annotations"] == {"example.com/owner": "ml-platform"}
    daemonset = one(objects, "DaemonSet")
    agent_pod = daemonset["spec"]["template"]["spec"]
    assert agent_pod["nodeSelector"] == {"gpu": "a100"} and "affinity" not in agent_pod
    assert agent_pod["imagePullSecrets"] == [{"name": "registry"}]
    agent_args = containers(objects, "DaemonSet")["args"]
    for flag, value in (("--vgpu-unit", "10"), ("--whole-gpus", "on"), ("--isolation", "envvar")):
        assert agent_args[agent_args.index(flag) + 1] == value
    agent = containers(objects, "DaemonSet")
    assert agent["image"] == "registry.example/gs:9.9.9"
    assert agent["resources"] == {
        "requests": {"cpu": "20m", "memory": "128Mi"},
        "limits": {"cpu": "200m", "memory": "192Mi"},
    }
    assert one(objects, "DaemonSet")["spec"]["template"]["spec"]["priorityClassName"] == "n"
    for obj in objects:
        kubernetes_validate.validate(obj, "1.32", strict=True)


def test_the_image_tag_defaults_to_the_charts_app_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "gang-scheduler"
    image = containers(render(), "Deployment")["image"]
    assert image == f"ghcr.io/gang-scheduler/gang-scheduler:{chart['appVersion']}"


def kustomize_with_config(tmp_path: Path, text: str) -> Objects:
    """The base with another config file, rendered by kustomize."""
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("helm", "examples", "grafana"))
    (copy / "config" / "config.yaml").write_text(text)
    return rendered(copy)


@pytest.mark.parametrize(
    "text",
    [
        "policy:\n  name: spread\n",
        # Characters Go's JSON encoder escapes (<, >, &) and one beyond ASCII: the hash
        # must be computed over the same bytes as kustomize's.
        "# a <b> & c -> ü\nmetrics:\n  namespaceLabels: true\n",
    ],
)
def test_a_new_configuration_gets_the_configmap_name_kustomize_gives_it(
    tmp_path: Path, text: str
) -> None:
    parse_config(text)  # a configuration the scheduler accepts
    chart = render({"config": text})
    kustomize = kustomize_with_config(tmp_path, text)
    assert_same_objects(chart, kustomize)
    configmap = one(chart, "ConfigMap")
    assert configmap["data"]["config.yaml"] == text
    # A new name: the Deployment's pod template changes, so its pods roll out.
    assert configmap["metadata"]["name"] != one(rendered(), "ConfigMap")["metadata"]["name"]


# --- namespace ---------------------------------------------------------------------------------
def test_another_namespace_needs_the_lease_there_too() -> None:
    with pytest.raises(helm.HelmError, match=r"leaderElection\.leaseNamespace kube-system"):
        render(namespace="gpu-system")


def test_everything_moves_to_the_release_namespace() -> None:
    config = (DEPLOY / "config" / "config.yaml").read_text()
    moved = config.replace("leaseNamespace: kube-system", "leaseNamespace: gpu-system")
    signing = "secretName: gang-scheduler-assignment-key\n  namespace: kube-system"
    assert signing in moved
    moved = moved.replace(signing, signing.replace("kube-system", "gpu-system"))
    assert moved != config
    objects = render(
        {"config": moved, "networkPolicy": {"enabled": True}, "serviceMonitor": {"enabled": True}},
        namespace="gpu-system",
    )
    assert_namespaced_in(objects, "gpu-system")
    text = yaml.safe_dump_all(objects)
    assert "system:serviceaccount:gpu-system:gang-scheduler" in text  # the policies' CEL
    # Only the config's comments still say kube-system (they describe the base).
    rest = [o for o in objects if o["kind"] != "ConfigMap"]
    assert "kube-system" not in yaml.safe_dump_all(rest)
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert {s["namespace"] for s in binding["subjects"]} == {"gpu-system"}


def test_the_signing_key_secrets_follow_the_configuration() -> None:
    """The Secrets the scheduler creates at start (docs/operator-guide.md, "The signing
    key") are named in config: the Roles that grant them and the node agent's
    --assignment-key-secret follow, so renaming them is one change."""
    config = (DEPLOY / "config" / "config.yaml").read_text()
    config = config.replace(
        "secretName: gang-scheduler-assignment-key", "secretName: team-signing-key"
    ).replace(
        "nodeAgentSecretName: gang-scheduler-node-agent-key", "nodeAgentSecretName: team-agent-key"
    )
    assert parse_config(config).assignment_signing.secret_name == "team-signing-key"
    objects = render({"config": config})
    rules = one(objects, "Role", "gang-scheduler-signing-keys")["rules"]
    assert [r.get("resourceNames") for r in rules] == [
        None,  # create: cannot be limited by name
        ["team-signing-key", "team-agent-key"],
        ["team-agent-key"],
    ]
    (agent_rule,) = one(objects, "Role", "gang-scheduler-node-agent-key")["rules"]
    assert agent_rule["resourceNames"] == ["team-agent-key"]
    args = containers(objects, "DaemonSet")["args"]
    assert args[args.index("--assignment-key-secret") + 1] == "kube-system/team-agent-key"


def test_a_config_on_another_port_is_refused() -> None:
    config = (DEPLOY / "config" / "config.yaml").read_text().replace("port: 10269", "port: 9999")
    with pytest.raises(helm.HelmError, match=r"http\.port 9999"):
        render({"config": config})


# --- the chart itself --------------------------------------------------------------------------
def test_helm_lint_finds_nothing_beyond_information() -> None:
    report = helm.lint(CHART, strict=True, namespace="kube-system")
    assert report["errors"] == []
    worst = max((m["severity"] for m in report["messages"]), default=0)
    assert worst <= 1, report["messages"]  # 1: information (an icon is recommended)


def template_files() -> Iterator[Path]:
    yield from sorted((CHART / "templates").glob("*"))


def test_every_template_says_it_is_generated() -> None:
    files = list(template_files())
    assert len(files) >= 8
    for path in files:
        assert path.read_text().startswith("# Generated by scripts/helm_chart.py"), path


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"scheduler": {"replicas": "two"}}, "replicas"),
        ({"scheduler": {"replicas": -1}}, "replicas"),
        ({"nodeAgent": {"enabled": "yes"}}, "enabled"),
        ({"config": {"policy": {"name": "spread"}}}, "config"),
        ({"image": {"tag": 1.2}}, "tag"),
        ({"schedular": {"replicas": 1}}, "schedular"),  # a typo is refused, not ignored
        ({"nodeAgent": {"vgpuUnit": 7}}, "vgpuUnit"),  # not a divisor of 1000
        ({"nodeAgent": {"wholeGpus": "yes"}}, "wholeGpus"),
        ({"scheduler": {"logFormat": "xml"}}, "logFormat"),
        ({"image": {"pullSecrets": ["registry"]}}, "pullSecrets"),
    ],
)
def test_values_of_the_wrong_shape_are_refused(values: dict[str, Any], field: str) -> None:
    with pytest.raises(helm.HelmError, match=field):
        render(values)


def test_the_defaults_pass_the_values_schema() -> None:
    with helm.Chart.load(CHART) as chart:
        assert chart.schema is not None
        chart.validate_schema(None)
        chart.validate_schema({"scheduler": {"replicas": 1}, "networkPolicy": {"enabled": True}})
