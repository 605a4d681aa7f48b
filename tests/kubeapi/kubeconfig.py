"""Kubeconfig files and clients pointing at a KubeApiEmulator (plain HTTP, no auth)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config


def kubeconfig_dict(
    base_url: str, *, namespace: str = "default", token: str | None = None
) -> dict[str, Any]:
    """A kubeconfig with one cluster, one user (credential-less, or with a bearer
    `token` for an emulator with `access`) and one context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": base_url}}],
        "users": [{"name": "emulator", "user": {"token": token} if token else {}}],
        "contexts": [
            {
                "name": "emulator",
                "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace},
            }
        ],
        "current-context": "emulator",
        "preferences": {},
    }


def write_kubeconfig(
    base_url: str,
    path: str | os.PathLike[str],
    *,
    namespace: str = "default",
    token: str | None = None,
) -> Path:
    """Write a kubeconfig for `base_url` that kubernetes_asyncio.config.load_kube_config
    accepts; returns the path."""
    target = Path(path)
    target.write_text(yaml.safe_dump(kubeconfig_dict(base_url, namespace=namespace, token=token)))
    return target


async def api_client(base_url: str) -> client.ApiClient:
    """A kubernetes_asyncio ApiClient configured for the emulator (caller closes it)."""
    configuration = client.Configuration()
    await config.load_kube_config_from_dict(
        kubeconfig_dict(base_url), client_configuration=configuration
    )
    return client.ApiClient(configuration=configuration)
