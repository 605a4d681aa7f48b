"""Render kustomizations with `kubectl kustomize` (offline) and pick objects out."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


@functools.cache
def _render(path: str) -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to render deploy/ (it is installed on CI machines)")
    done = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"kubectl kustomize {path} failed: {done.stderr.strip()}")
    return done.stdout


def rendered(path: Path = DEPLOY) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize path` renders (a fresh copy on every call)."""
    return [doc for doc in yaml.safe_load_all(_render(str(path))) if doc]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single object of `kind` (and `name`, when given)."""
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def scheduler_config_text(objects: list[dict[str, Any]]) -> str:
    """The config file the Deployment passes to `--config`: the ConfigMap it mounts."""
    deployment = one(objects, "Deployment", "gang-scheduler")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    path = Path(args[args.index("--config") + 1])
    mount = next(m for m in container["volumeMounts"] if path.parent == Path(m["mountPath"]))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    configmap = one(objects, "ConfigMap", volume["configMap"]["name"])
    return str(configmap["data"][path.name])


# The kinds deploy/ renders that have no namespace; every other object must be in the
# release's namespace (a stray one would be created in `default`).
CLUSTER_SCOPED = frozenset(
    {
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)


def assert_namespaced_in(objects: list[dict[str, Any]], namespace: str) -> None:
    """Every namespaced object of `objects` is in `namespace`."""
    for obj in objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == namespace, obj["metadata"]["name"]
