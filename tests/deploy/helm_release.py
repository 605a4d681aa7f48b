"""Helm's release actions (install, upgrade, uninstall) through helm-python-sdk, with the
two options its Python layer does not pass on but its native library (Helm's Go SDK)
takes, both needed against the API emulator:
- disable_openapi_validation: Helm checks each object against the server's OpenAPI
  schema (/openapi/v3), which the emulator does not serve;
- server_side_apply false: Helm 4 applies server-side by default, which the emulator
  answers 415 (tests/kubeapi/writes.py); client-side, Helm creates, then patches with a
  three-way strategic merge patch, as Helm 3 did and `--server-side=false` does.
Everything else is Helm's own engine: the release storage (Secrets), the diff between
revisions, the deletes, the resource policies.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
from helm_python import _native

# Install takes server_side_apply as a bool, upgrade as "true", "false" or "auto" (Helm
# 4's --server-side, whose default "auto" keeps the release's former method).
OPTIONS: dict[str, dict[str, Any]] = {
    "helm_install": {"disable_openapi_validation": True, "server_side_apply": False},
    "helm_upgrade": {"disable_openapi_validation": True, "server_side_apply": "false"},
}


class Releases:
    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self.config = helm.Config(kubeconfig_path=kubeconfig, namespace=namespace)
        self.namespace = namespace

    def close(self) -> None:
        self.config.close()

    def _write(self, action: str, chart: Path, name: str, values: dict[str, Any] | None) -> Any:
        payload = _native.call_string(
            action,
            self.config._raw(),
            _native.HANDLE(0),  # no cancellation context
            _native.HANDLE(0),  # the chart by path, not a loaded handle
            str(chart),
            name,
            None if values is None else json.dumps(values),
            json.dumps({"namespace": self.namespace, **OPTIONS[action]}),
        )
        return json.loads(payload)

    def install(self, chart: Path, name: str, values: dict[str, Any] | None = None) -> Any:
        return self._write("helm_install", chart, name, values)

    def upgrade(self, chart: Path, name: str, values: dict[str, Any] | None = None) -> Any:
        return self._write("helm_upgrade", chart, name, values)

    def uninstall(self, name: str) -> Any:
        return self.config.uninstall(name)
