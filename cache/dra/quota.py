"""DRA devices as ElasticQuota resources (docs/quotas.md, "DRA devices").

Names, per DeviceClass:
- `<class>.deviceclass.resource.k8s.io/devices`: the devices of that class a
  namespace's claims are allocated, one per allocation result, whole or a share. It is
  the name Kubernetes' own ResourceQuota counts DRA devices under (1.36,
  `corev1.ResourceClaimsPerClass`), so one limit reads the same in both objects.
- `<class>.deviceclass.resource.k8s.io/capacity.<capacity>`: what the shares of that
  class consume of a device capacity (`consumedCapacity` of results with a `shareID`,
  keyed as the device's capacity is written: `memory`, `dra.example.com/memory`).
  ResourceQuota has no such name; this one keeps ResourceQuota's prefix so a reader
  finds both together.

Amounts are kept in thousandths (as cpu), so `devices: 1.5` and `capacity.memory:
20Gi` compare exactly. Usage of a claim is charged once, to its namespace, whoever
allocated it and however many pods share it. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from cache.dra.claims import Allocation, Claim

# As Kubernetes' corev1.ResourceClaimsPerClass (staging/src/k8s.io/api/core/v1/types.go).
DEVICE_CLASS_DOMAIN = ".deviceclass.resource.k8s.io/"
DEVICES = "devices"
CAPACITY = "capacity."
MILLI = 1000

# A DeviceClass name is a DNS subdomain (the API server validates it as such).
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_CLASS_NAME = 253
# A capacity name: a C identifier, or a DNS subdomain, a slash and a C identifier.
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_CAPACITY_NAME = 253 + 1 + 32


def devices_resource(device_class: str) -> str:
    return f"{device_class}{DEVICE_CLASS_DOMAIN}{DEVICES}"


def capacity_resource(device_class: str, capacity: str) -> str:
    return f"{device_class}{DEVICE_CLASS_DOMAIN}{CAPACITY}{capacity}"


def is_dra_resource(name: str) -> bool:
    """Whether a quota resource name is in the DRA family (well formed or not)."""
    return DEVICE_CLASS_DOMAIN in name


def dra_resource_problem(name: str) -> str:
    """Why a resource name of the DRA family is not one this scheduler counts ("" when
    it is): a DeviceClass name that is not a DNS subdomain, or a suffix other than
    `devices` and `capacity.<name>`."""
    device_class, _, what = name.partition(DEVICE_CLASS_DOMAIN)
    if not device_class or len(device_class) > MAX_CLASS_NAME or not _SUBDOMAIN.match(device_class):
        return "the DeviceClass name is not a DNS subdomain"
    if what == DEVICES:
        return ""
    if what.startswith(CAPACITY):
        capacity = what[len(CAPACITY) :]
        if len(capacity) <= MAX_CAPACITY_NAME and _is_capacity_name(capacity):
            return ""
        return "the capacity name is not a qualified name"
    return f"only {DEVICES} and {CAPACITY}<name> are counted per DeviceClass"


def _is_capacity_name(name: str) -> bool:
    domain, slash, ident = name.partition("/")
    if not slash:
        return bool(_IDENTIFIER.match(name))
    return (
        len(domain) <= MAX_CLASS_NAME
        and bool(_SUBDOMAIN.match(domain))
        and bool(_IDENTIFIER.match(ident))
    )


def request_classes(claim: Claim) -> dict[str, str]:
    """Result request name ("req" or "req/sub") -> the DeviceClass it asks for."""
    classes: dict[str, str] = {}
    for request in claim.requests:
        if request.exactly is not None:
            classes[request.name] = request.exactly.device_class
        for sub in request.first_available:
            classes[f"{request.name}/{sub.name}"] = sub.device_class
    return classes


def claim_usage(claim: Claim, allocation: Allocation) -> dict[str, int]:
    """What an allocated claim counts against its namespace's quota, in thousandths:
    one device per result of its class, and for a share its consumed capacity.
    Results with admin access take nothing from others and count nothing; a result
    whose request the claim does not name (a spec that could not be read) has no class
    and counts nothing (its devices are still taken on their nodes)."""
    classes = request_classes(claim)
    usage: dict[str, int] = {}
    for result in allocation.results:
        device_class = classes.get(result.request)
        if result.admin_access or not device_class:
            continue
        name = devices_resource(device_class)
        usage[name] = usage.get(name, 0) + MILLI
        if result.share_id:
            for capacity, amount in result.consumed:
                if amount <= 0:
                    continue
                name = capacity_resource(device_class, capacity)
                usage[name] = usage.get(name, 0) + math.ceil(amount * MILLI)
    return usage


def total_usage(usages: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """The sum of claims' usages (claim key -> usage), each claim once."""
    total: dict[str, int] = {}
    for usage in usages.values():
        for name, amount in usage.items():
            total[name] = total.get(name, 0) + amount
    return total
