"""What each container of a pod asks of extended resources, as DRA-backed extended
resources (KEP-5004, DRAExtendedResource, beta and on in Kubernetes 1.36) need it:
kube-scheduler names the requests of the claim it creates for the pod after the
container's index and the resource's index among that container's requests
(`container-<i>-request-<j>`), and maps each back to its container
(`status.extendedResourceClaimStatus.requestMappings`). Read from kube-scheduler's
`dynamicresources/extendeddynamicresources.go` (createRequestsAndMappings) and
`util.IsDRAExtendedResourceName`; no code was copied.

Pure, no I/O. Kept on the pod record only for pods that ask for such a resource.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from cache.quantity import parse_quantity

# The implicit extended resource every DeviceClass stands for:
# deviceclass.resource.kubernetes.io/<class name> (resource.k8s.io/v1
# ResourceDeviceClassPrefix).
DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
REQUESTS_PREFIX = "requests."
# A qualified name (apimachinery IsQualifiedName): an optional DNS-subdomain prefix and
# a name of at most 63 alphanumerics, '-', '_', '.', starting and ending alphanumeric.
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Containers read per pod (the API server has no limit of its own; a pod with more is
# not served through DRA beyond these, which never matters in practice).
MAX_CONTAINERS = 512


def _qualified(name: str) -> bool:
    prefix, slash, rest = name.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return False
    return bool(_NAME.match(rest if slash else name))


def is_native(name: str) -> bool:
    """In the kubernetes.io namespace (an unprefixed name is implicitly in it)."""
    return "/" not in name or "kubernetes.io/" in name


def is_extended_resource_name(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName: not native, not `requests.`-prefixed, and a
    qualified name once prefixed with `requests.` (as quota names it)."""
    if is_native(name) or name.startswith(REQUESTS_PREFIX):
        return False
    return _qualified(REQUESTS_PREFIX + name)


def is_dra_extended_name(name: str) -> bool:
    """A resource a DeviceClass may stand for: an extended resource name, or the
    implicit `deviceclass.resource.kubernetes.io/<class>`."""
    return is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)


@dataclass(frozen=True, slots=True)
class ContainerExtended:
    """One container's requests of resources a DeviceClass may stand for.

    `index`: the container's position among init containers then containers; `init`:
    an init container that is not a sidecar (it runs alone, before the others);
    `amounts`: resource -> (its index among the container's sorted request names, the
    amount as an exact fraction: a count that is not an integer is kept so that it can
    be refused by name)."""

    name: str
    index: int
    init: bool
    amounts: tuple[tuple[str, int, Fraction], ...]


def _requests(container: Mapping[str, Any]) -> dict[str, object]:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    merged: dict[str, object] = {}
    for level in ("limits", "requests"):  # a missing request defaults to its limit
        values = resources.get(level)
        if isinstance(values, Mapping):
            merged.update({str(k): v for k, v in values.items()})
    return merged


def container_extended(spec: Mapping[str, Any]) -> tuple[ContainerExtended, ...]:
    """Every container that asks for a resource a DeviceClass may stand for, in
    kube-scheduler's order (init containers, then containers). Never raises: an amount
    that does not parse is left out (the pod's requests carry that problem already)."""
    found: list[ContainerExtended] = []
    inits = spec.get("initContainers")
    regular = spec.get("containers")
    containers: list[tuple[object, bool]] = [
        (c, True) for c in (inits if isinstance(inits, list) else [])
    ] + [(c, False) for c in (regular if isinstance(regular, list) else [])]
    for index, (raw, is_init) in enumerate(containers[:MAX_CONTAINERS]):
        if not isinstance(raw, Mapping):
            continue
        requests = _requests(raw)
        if not any(is_dra_extended_name(name) for name in requests):
            continue
        names = sorted(requests)
        amounts = []
        for position, name in enumerate(names):
            if not is_dra_extended_name(name):
                continue
            try:
                amount = parse_quantity(requests[name])
            except (ValueError, TypeError, ArithmeticError):
                continue
            amounts.append((name, position, amount))
        sidecar = raw.get("restartPolicy") == "Always"
        found.append(
            ContainerExtended(
                name=str(raw.get("name") or ""),
                index=index,
                init=is_init and not sidecar,
                amounts=tuple(amounts),
            )
        )
    return tuple(found)


def asked(containers: Sequence[ContainerExtended]) -> frozenset[str]:
    """The resources these containers ask for (a positive amount)."""
    return frozenset(name for c in containers for name, _, amount in c.amounts if amount > 0)
