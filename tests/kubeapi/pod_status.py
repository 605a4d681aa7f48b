"""Pod status fields the API server validates on a status write
(pkg/apis/core/validation/validation.go ValidatePodStatusUpdate, Kubernetes 1.36.2):
here `status.extendedResourceClaimStatus` (DRAExtendedResource, beta and on by default),
which kube-scheduler, and this scheduler, write before binding a pod whose extended
resources DRA serves (validatePodExtendedResourceClaimStatus; no code was copied)."""

from __future__ import annotations

from typing import Any

from tests.kubeapi.dra.fields import Errors, duplicate, invalid, refuse, required
from tests.kubeapi.dra.names import dns_label, dns_subdomain
from tests.kubeapi.resources import PODS

_PATH = "status.extendedResourceClaimStatus"


def _requests_of(spec: dict[str, Any]) -> dict[str, set[str]]:
    """Container name -> the resource names of its requests (init containers first, a
    regular container of the same name wins, as the real map is filled)."""
    found: dict[str, set[str]] = {}
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                requests = (container.get("resources") or {}).get("requests") or {}
                found[str(container.get("name"))] = set(requests)
    return found


def check_extended_claim_status(name: str, pod: dict[str, Any]) -> None:
    """Raise 422 when the pod's extendedResourceClaimStatus is not what the real
    server accepts: at least one mapping; each naming a container of the pod and one
    of that container's requests; request names DNS labels; no mapping twice; a claim
    name that is a DNS subdomain."""
    status = (pod.get("status") or {}).get("extendedResourceClaimStatus")
    if status is None:
        return
    containers = _requests_of(pod.get("spec") or {})
    errors: Errors = []
    mappings = status.get("requestMappings") if isinstance(status, dict) else None
    mappings = mappings if isinstance(mappings, list) else []
    if not mappings:
        errors.append(
            required(f"{_PATH}.requestMappings", "at least one request mapping is required")
        )
    seen: set[tuple[str, str, str]] = set()
    for index, raw in enumerate(mappings):
        entry = raw if isinstance(raw, dict) else {}
        path = f"{_PATH}.requestMappings[{index}]"
        container = str(entry.get("containerName") or "")
        resource = str(entry.get("resourceName") or "")
        request = str(entry.get("requestName") or "")
        if container in containers:
            if resource not in containers[container]:
                errors.append(
                    invalid(
                        f"{path}.resourceName",
                        resource,
                        "must match the extended resource name of an entry in "
                        "spec.initContainers.resources.requests or "
                        "spec.containers.resources.requests",
                    )
                )
        else:
            errors.append(
                invalid(
                    f"{path}.containerName",
                    container,
                    "must match the name of an entry in spec.initContainers.name or "
                    "spec.containers.name",
                )
            )
        # The real code reports this one at the status's path, not the entry's.
        errors += dns_label(request, f"{_PATH}.requestName")
        key = (container, resource, request)
        if key in seen:
            errors += [
                duplicate(f"{path}.containerName", container),
                duplicate(f"{path}.resourceName", resource),
                duplicate(f"{path}.requestName", request),
            ]
        seen.add(key)
    claim = status.get("resourceClaimName") if isinstance(status, dict) else None
    if not claim:
        errors.append(required(f"{_PATH}.resourceClaimName"))
    else:
        errors += dns_subdomain(str(claim), f"{_PATH}.resourceClaimName")
    if errors:
        raise refuse(PODS, name, errors)
