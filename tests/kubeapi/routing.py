"""From an HTTP request to (resource type, namespace, name, subresource, verb).

URL layout as in the API concepts page: /api/v1/... for the core group,
/apis/GROUP/VERSION/... otherwise, `namespaces/NS/` before namespaced resources, an
optional subresource after the name, and the legacy `/watch/` prefix.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.kubeapi import discovery, errors
from tests.kubeapi.resources import ALL_TYPES, CRD_TYPES, ResourceType, find_type

JSON = "application/json"


@dataclass(frozen=True)
class Route:
    rtype: ResourceType
    namespace: str | None  # None: all namespaces (or a cluster-scoped type)
    name: str | None
    subresource: str
    watch_path: bool  # the legacy /watch/ prefix


def path_parts(request: web.Request) -> list[str]:
    return [p for p in request.path.split("/") if p]


def parse_route(parts: list[str], crd_present: bool) -> Route:
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise errors.path_not_found()
    watch_path = bool(rest) and rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise errors.path_not_found()
    rtype = find_type(group, version, rest[0])
    if rtype is None or (rtype in CRD_TYPES and not crd_present):
        raise errors.path_not_found()
    if namespace is not None and not rtype.namespaced:
        raise errors.path_not_found()
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    if subresource and subresource not in rtype.subresources:
        raise errors.path_not_found()
    return Route(rtype, namespace, name, subresource, watch_path)


def verb_of(request: web.Request, route: Route) -> str:
    """The Kubernetes verb (list, watch, get, create, update, patch, delete) or ""."""
    method = request.method
    if method == "GET":
        if route.name is None:
            watch = route.watch_path or flag(request.query.get("watch"))
            return "watch" if watch else "list"
        return "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, "")


def flag(text: str | None) -> bool:
    # Query booleans are parsed with Go's strconv.ParseBool; clients send "true" or "True".
    return text in ("1", "t", "T", "true", "TRUE", "True")


def float_param(name: str, text: str | None) -> float | None:
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError as err:
        raise errors.bad_request(f"invalid {name}: {text}") from err


def json_response(body: bytes, status: int) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON)


def discovery_document(
    parts: list[str],
    host: str,
    crd_present: bool,
    created: str,
    unserved: Collection[ResourceType] = (),
) -> dict[str, Any] | None:
    """The discovery answer for a GET of `parts`, or None when it is not discovery.
    `unserved` types are left out, as the server lists no API that is off."""
    types = [t for t in ALL_TYPES if (t not in CRD_TYPES or crd_present) and t not in unserved]
    if parts == ["version"]:
        return dict(discovery.VERSION_INFO)
    if parts == ["api"]:
        return discovery.api_versions(host)
    if parts == ["api", "v1"]:
        return discovery.api_resource_list("v1", [t for t in types if not t.group])
    groups = discovery.group_versions(types, crd_present)
    if parts == ["apis"]:
        return discovery.api_group_list(groups)
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:
        return discovery.api_group(parts[1], groups[parts[1]])
    if len(parts) == 3 and parts[0] == "apis" and parts[2] in groups.get(parts[1], []):
        served = [t for t in types if (t.group, t.version) == (parts[1], parts[2])]
        return discovery.api_resource_list(f"{parts[1]}/{parts[2]}", served)
    # The PodGroup CRD that `crd_present` stands for; any other CRD is a stored object
    # (created by a test, as Helm does: tests/deploy/test_helm_install.py).
    crd_path = ["apis", discovery.CRD_GROUP, "v1", "customresourcedefinitions"]
    if crd_present and parts == [*crd_path, discovery.CRD_NAME]:
        return discovery.podgroup_crd(created)
    return None
