"""deploy/ renders with kustomize and every object is valid against the Kubernetes
schemas (offline, with the kubernetes-validate package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cache.podgroup import PODGROUP_GROUP, PODGROUP_PLURAL, PODGROUP_VERSION

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def rendered() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to render deploy/ (it is installed on CI machines)")
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY)], check=True, capture_output=True, text=True
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def test_every_rendered_object_is_valid() -> None:
    objects = rendered()
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, "1.32", strict=True)


def test_the_podgroup_crd_is_the_api_the_scheduler_reads() -> None:
    (crd,) = [o for o in rendered() if o["kind"] == "CustomResourceDefinition"]
    assert crd["metadata"]["name"] == f"{PODGROUP_PLURAL}.{PODGROUP_GROUP}"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == PODGROUP_VERSION and version["subresources"] == {"status": {}}
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["minMember"]["minimum"] == 1
    phases = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"Pending", "Scheduled", "Running", "Failed"} <= set(phases["phase"]["enum"])
