"""The chart installed, upgraded and uninstalled by Helm's own engine (helm-python-sdk:
Helm's Go SDK, tests/deploy/helm_release.py) against the API emulator over real HTTP,
as an operator's `helm install`, `helm upgrade` and `helm uninstall` would: each step's
objects are in the API, values changed on upgrade reach them, parts switched off are
deleted, and `helm uninstall` leaves the CRDs (so every PodGroup and ElasticQuota)
behind (docs/integrations.md, "Helm")."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from tests.deploy.helm_release import Releases
from tests.deploy.test_helm import CHART, RELEASE, render
from tests.kubeapi import KubeApiEmulator
from tests.kubeapi.kubeconfig import write_kubeconfig
from tests.kubeapi.resources import (
    ALL_TYPES,
    CUSTOM_RESOURCE_DEFINITIONS,
    DEPLOYMENTS,
    SECRETS,
    ResourceType,
)

NAMESPACE = "kube-system"
Key = tuple[str, str, str]  # kind, namespace ("" when cluster-scoped), name


def rtype_of(obj: dict[str, Any]) -> ResourceType:
    (rtype,) = (t for t in ALL_TYPES if (t.api_version, t.kind) == (obj["apiVersion"], obj["kind"]))
    return rtype


def keys(objects: list[dict[str, Any]]) -> set[Key]:
    return {
        (o["kind"], NAMESPACE if rtype_of(o).namespaced else "", o["metadata"]["name"])
        for o in objects
    }


def in_api(api: KubeApiEmulator) -> set[Key]:
    """Every object of a kind the chart holds, except Helm's own release Secrets."""
    kinds = {rtype_of(o) for o in render()}
    return {
        (rtype.kind, o["metadata"].get("namespace", ""), o["metadata"]["name"])
        for rtype in kinds
        for o in api.objects(rtype)
    }


def releases(api: KubeApiEmulator) -> dict[int, dict[str, str]]:
    """revision -> labels of Helm's release Secrets (owner=helm, name, status...)."""
    found = {}
    for secret in api.objects(SECRETS):
        labels = secret["metadata"].get("labels", {})
        if labels.get("owner") == "helm" and labels.get("name") == RELEASE:
            found[int(labels["version"])] = labels
    return found


def stored_release(api: KubeApiEmulator, revision: int) -> dict[str, Any]:
    """The release record Helm stored: base64 (the Secret's data) of base64 of gzip JSON."""
    secret = api.get(SECRETS, NAMESPACE, f"sh.helm.release.v1.{RELEASE}.v{revision}")
    assert secret is not None
    inner = base64.b64decode(base64.b64decode(secret["data"]["release"]))
    record: dict[str, Any] = json.loads(gzip.decompress(inner))
    return record


@pytest_asyncio.fixture
async def api() -> AsyncIterator[KubeApiEmulator]:
    # A fresh cluster: no PodGroup CRD until the chart installs it.
    async with KubeApiEmulator(crd_present=False) as emulator:
        yield emulator


@pytest.mark.asyncio
async def test_install_upgrade_uninstall_through_helms_engine(
    api: KubeApiEmulator, tmp_path: Path
) -> None:
    releases_of = Releases(write_kubeconfig(api.base_url, tmp_path / "kubeconfig"), NAMESPACE)
    try:
        # Helm's calls block: they run in a thread while the emulator serves on this loop.
        installed = await asyncio.to_thread(releases_of.install, CHART, RELEASE)
        assert installed["status"] == "deployed" and installed["revision"] == 1
        chart_objects = render()
        assert in_api(api) == keys(chart_objects)
        crds = api.objects(CUSTOM_RESOURCE_DEFINITIONS)
        assert {c["metadata"]["name"] for c in crds} == {
            "podgroups.scheduling.x-k8s.io",
            "elasticquotas.scheduling.x-k8s.io",
        }
        for crd in crds:
            assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
            # Helm's ownership marks, which a later upgrade checks before touching it.
            assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
            assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
        assert releases(api)[1]["status"] == "deployed"

        # helm upgrade --set scheduler.replicas=3,scheduler.logFormat=json
        #   --set admissionPolicies.enabled=false
        values = {
            "scheduler": {"replicas": 3, "logFormat": "json"},
            "admissionPolicies": {"enabled": False},
        }
        upgraded = await asyncio.to_thread(releases_of.upgrade, CHART, RELEASE, values)
        assert upgraded["status"] == "deployed" and upgraded["revision"] == 2
        deployment = api.get(DEPLOYMENTS, NAMESPACE, "gang-scheduler")
        assert deployment is not None and deployment["spec"]["replicas"] == 3
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["args"][-2:] == ["--log-format", "json"]
        # The policies left the chart, so Helm deleted them; nothing else changed.
        expected = keys(render(values))
        assert not any(kind.startswith("ValidatingAdmissionPolicy") for kind, _, _ in expected)
        assert in_api(api) == expected
        assert {rev: labels["status"] for rev, labels in releases(api).items()} == {
            1: "superseded",
            2: "deployed",
        }
        assert stored_release(api, 2)["config"] == values

        # helm uninstall: everything but the CRDs goes, Helm's history with it.
        await asyncio.to_thread(releases_of.uninstall, RELEASE)
        assert in_api(api) == {
            ("CustomResourceDefinition", "", "podgroups.scheduling.x-k8s.io"),
            ("CustomResourceDefinition", "", "elasticquotas.scheduling.x-k8s.io"),
        }
        assert releases(api) == {}

        # Installing again adopts the kept CRDs (they still carry Helm's ownership).
        again = await asyncio.to_thread(releases_of.install, CHART, RELEASE)
        assert again["status"] == "deployed" and again["revision"] == 1
        assert in_api(api) == keys(chart_objects)
    finally:
        releases_of.close()


def test_the_chart_declares_the_minimum_kubernetes_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == ">=1.30.0-0"
