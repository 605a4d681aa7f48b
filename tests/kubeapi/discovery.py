"""Discovery documents (/version, /api, /apis, APIResourceList) for the served types.

Only the legacy (non-aggregated) JSON discovery: kubernetes_asyncio's typed APIs never
ask for discovery; the dynamic client and kubectl accept this form.
"""

from __future__ import annotations

from typing import Any

from tests.kubeapi.resources import (
    CRD_TYPES,
    PODGROUP_GROUP,
    PODGROUP_VERSION,
    PODGROUPS,
    ResourceType,
)

# The release whose behaviour the emulator follows (resource.k8s.io/v1 as 1.36 serves
# it: tests/kubeapi/dra/). gitCommit, buildDate and goVersion are the emulator's own, not
# those of a real build.
VERSION_INFO: dict[str, str] = {
    "major": "1",
    "minor": "36",
    "gitVersion": "v1.36.2",
    "gitCommit": "kubeapi-emulator",
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_ITEM_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
CRD_GROUP = "apiextensions.k8s.io"
CRD_NAME = f"{PODGROUPS.plural}.{PODGROUP_GROUP}"


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def group_versions(types: list[ResourceType], crd_present: bool) -> dict[str, list[str]]:
    """group -> served versions, for every non-core group."""
    groups: dict[str, list[str]] = {CRD_GROUP: ["v1"]}
    for rtype in types:
        if not rtype.group or (rtype in CRD_TYPES and not crd_present):
            continue
        versions = groups.setdefault(rtype.group, [])
        if rtype.version not in versions:
            versions.append(rtype.version)
    return groups


def api_group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def api_group_list(groups: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [api_group(name, versions) for name, versions in sorted(groups.items())],
    }


def _resource_entries(rtype: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": rtype.plural,
        "singularName": rtype.singular,
        "namespaced": rtype.namespaced,
        "kind": rtype.kind,
        "verbs": _ITEM_VERBS,
    }
    if rtype.short_names:
        main["shortNames"] = list(rtype.short_names)
    entries = [main]
    for sub in sorted(rtype.subresources):
        kind, verbs = (
            ("Binding", ["create"])
            if sub == "binding"
            else ("Eviction", ["create"])
            if sub == "eviction"
            else (rtype.kind, ["get", "patch", "update"])
        )
        entries.append(
            {
                "name": f"{rtype.plural}/{sub}",
                "singularName": "",
                "namespaced": rtype.namespaced,
                "kind": kind,
                "verbs": verbs,
            }
        )
    return entries


def api_resource_list(group_version: str, types: list[ResourceType]) -> dict[str, Any]:
    resources: list[dict[str, Any]] = []
    for rtype in types:
        resources.extend(_resource_entries(rtype))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def podgroup_crd(created: str) -> dict[str, Any]:
    """The CustomResourceDefinition of PodGroup, as GET would show it (trimmed)."""
    names = {
        "plural": PODGROUPS.plural,
        "singular": PODGROUPS.singular,
        "kind": PODGROUPS.kind,
        "listKind": f"{PODGROUPS.kind}List",
        "shortNames": list(PODGROUPS.short_names),
    }
    return {
        "kind": "CustomResourceDefinition",
        "apiVersion": f"{CRD_GROUP}/v1",
        "metadata": {
            "name": CRD_NAME,
            "uid": "00000000-0000-4000-8000-00000000c4d0",
            "resourceVersion": "1",
            "creationTimestamp": created,
        },
        "spec": {
            "group": PODGROUP_GROUP,
            "names": names,
            "scope": "Namespaced",
            "versions": [
                {
                    "name": PODGROUP_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
        "status": {
            "conditions": [
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}
            ],
            "acceptedNames": names,
            "storedVersions": [PODGROUP_VERSION],
        },
    }
