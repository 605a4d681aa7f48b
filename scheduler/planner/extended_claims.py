"""DRA-backed extended resources (KEP-5004, DRAExtendedResource, beta and on by default
in Kubernetes 1.36; docs/dra.md, "Extended resources"): a pod asks for `nvidia.com/gpu:
2` (or any extended resource, or `deviceclass.resource.kubernetes.io/<class>`) and a
DeviceClass names that resource. On a node that advertises the resource as allocatable
the device plugin serves it, as ever; on a node that does not, the pod gets a
ResourceClaim that kube-scheduler would create for it, allocated with the gang's other
claims and created by the binder before the Bindings.

The claim, as kube-scheduler 1.36 builds it (`extendeddynamicresources.go`,
createRequestsAndMappings; no code was copied): one request per container and resource
(`container-<container index>-request-<index of the resource among the container's
sorted request names>`, ExactCount, the class that names the resource); an init
container that is not a sidecar first reuses the requests of the long-lived containers
after it and asks only for the rest; of several such init containers only the largest
request stays (they run one at a time) and their mappings name it; requests sorted by
name. Until it exists the planner knows it as a virtual claim (`DraCache.virtual`)
named `<extended-resources:<pod uid>:<n>>` (not a valid object name, as kube-scheduler's
in-memory `<extended-resources>`), `n` telling apart the sets of resources a node leaves
to DRA.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from cache.dra.claims import EXTENDED_CLAIM_ANNOTATION, Claim, claim_from_api
from cache.dra.view import DeviceView
from cache.extended_requests import ContainerExtended
from cache.node import NodeInfo
from cache.pod import PodInfo


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """What the binder creates for one pod: the claim's requests (name, device class,
    count) and `status.extendedResourceClaimStatus.requestMappings` (container,
    resource, request)."""

    pod_name: str
    pod_uid: str
    requests: tuple[tuple[str, str, int], ...]
    mappings: tuple[tuple[str, str, str], ...]

    def spec_to_api(self) -> dict[str, object]:
        return {
            "devices": {
                "requests": [
                    {
                        "name": name,
                        "exactly": {
                            "deviceClassName": device_class,
                            "allocationMode": "ExactCount",
                            "count": count,
                        },
                    }
                    for name, device_class, count in self.requests
                ]
            }
        }

    def mappings_to_api(self) -> list[dict[str, str]]:
        return [
            {"containerName": c, "resourceName": r, "requestName": q} for c, r, q in self.mappings
        ]


def served_by_dra(pod: PodInfo, node: NodeInfo) -> frozenset[str]:
    """The resources `node` leaves to DRA for `pod`: those a DeviceClass provides that
    the node does not advertise as allocatable (kube-scheduler: allocatable 0)."""
    if not pod.dra_extended:
        return frozenset()
    return frozenset(r for r in pod.dra_extended if node.allocatable.get(r, 0) <= 0)


def non_integer(pod: PodInfo, provided: Mapping[str, str]) -> str:
    """Why the pod cannot be served through DRA: a count of a provided resource that is
    not a whole number of devices ("" when none)."""
    for container in pod.extended_containers:
        for name, _, amount in container.amounts:
            if name in provided and amount.denominator != 1:
                return (
                    f"container {container.name}: resource {name} is provided through DRA "
                    f"by DeviceClass {provided[name]}, and {_shown(amount)} is not a whole "
                    "number of devices"
                )
    return ""


def _shown(amount: Fraction) -> str:
    return f"{float(amount):g}"


def build(pod: PodInfo, resources: frozenset[str], provided: Mapping[str, str]) -> ExtendedClaim:
    """The claim's requests and mappings for `resources` (each provided by a class)."""
    containers = pod.extended_containers
    requests: list[tuple[str, str, int]] = []
    mappings: list[tuple[str, str, str]] = []
    for resource in sorted(resources):
        device_class = provided[resource]
        long_lived: dict[int, tuple[str, str, int]] = {}  # container index -> request
        long_mappings: list[tuple[str, str, str]] = []
        for container in containers:
            if container.init:
                continue
            made, mapped = _container_request(container, resource, device_class, [])
            if made is not None:
                long_lived[container.index] = made
            long_mappings += mapped
        largest: tuple[str, str, int] | None = None
        short_names: set[str] = set()
        short_mappings: list[tuple[str, str, str]] = []
        for container in containers:
            if not container.init:
                continue
            later = [r for i, r in sorted(long_lived.items()) if i >= container.index]
            made, mapped = _container_request(container, resource, device_class, later)
            if made is not None:
                short_names.add(made[0])
                if largest is None or largest[2] < made[2]:
                    largest = made
            short_mappings += mapped
        if largest is not None and len(short_names) > 1:
            short_mappings = [
                (c, r, largest[0] if q in short_names else q) for c, r, q in short_mappings
            ]
        if largest is not None:
            requests.append(largest)
        requests += [long_lived[i] for i in sorted(long_lived)]
        mappings += long_mappings + short_mappings
    requests.sort(key=lambda r: r[0])
    return ExtendedClaim(pod.name, pod.uid, tuple(requests), tuple(mappings))


def _container_request(
    container: ContainerExtended,
    resource: str,
    device_class: str,
    reusable: list[tuple[str, str, int]],
) -> tuple[tuple[str, str, int] | None, list[tuple[str, str, str]]]:
    """One container's request for `resource` (None when it needs none of its own) and
    its mappings, after what `reusable` requests of later long-lived containers give."""
    found = next(((p, a) for n, p, a in container.amounts if n == resource), None)
    if found is None or found[1] <= 0 or found[1].denominator != 1:
        return None, []
    position, amount = found
    wanted = int(amount)
    mappings: list[tuple[str, str, str]] = []
    total = 0
    for name, _, count in reusable:
        total += count
        mappings.append((container.name, resource, name))
        if total >= wanted:
            return None, mappings
    name = f"container-{container.index}-request-{position}"
    mappings.append((container.name, resource, name))
    return (name, device_class, wanted - total), mappings


_VIRTUAL_NAME = re.compile(r"<extended-resources:[^>]*>")


def readable(text: str) -> str:
    """`text` with the made-up claim names as kube-scheduler names its in-memory claim
    (`<extended-resources>`): members made from one template read alike."""
    return _VIRTUAL_NAME.sub("<extended-resources>", text) if "<extended-" in text else text


def virtual_key(pod: PodInfo, variant: int) -> str:
    return f"{pod.namespace}/<extended-resources:{pod.uid}:{variant}>"


def virtual_claim(pod: PodInfo, variant: int, claim: ExtendedClaim) -> Claim:
    """The record the allocator reads for the claim before it exists."""
    name = virtual_key(pod, variant).split("/", 1)[1]
    return claim_from_api(
        {
            "metadata": {
                "namespace": pod.namespace,
                "name": name,
                "uid": name,
                "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod.name,
                        "uid": pod.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": claim.spec_to_api(),
        }
    )


class ExtendedDemand:
    """One pending pod's DRA-backed extended resources for one planning call: on each
    node, the virtual claim of the resources that node leaves to DRA (made up once per
    set of resources, and put where the allocator reads it, `DraCache.virtual`)."""

    __slots__ = ("built", "dra", "pod", "provided", "resources")

    def __init__(
        self,
        pod: PodInfo,
        resources: tuple[str, ...],
        provided: Mapping[str, str],
        dra: DeviceView,
    ) -> None:
        self.pod = pod
        self.resources = resources  # sorted
        self.provided = provided
        self.dra = dra
        self.built: dict[str, ExtendedClaim] = {}  # virtual key -> the claim to create

    def key_on(self, node: NodeInfo) -> str | None:
        """The virtual claim's key on `node`; None when the node's device plugin serves
        every one of the resources."""
        served = served_by_dra(self.pod, node)
        if not served:
            return None
        variant = sum(1 << i for i, r in enumerate(self.resources) if r in served)
        key = virtual_key(self.pod, variant)
        if key not in self.built:
            claim = build(self.pod, served, self.provided)
            self.built[key] = claim
            if key not in self.dra.claims and not self.dra.is_assumed(key):
                self.dra.virtual[key] = virtual_claim(self.pod, variant, claim)
        return key

    def keys_on(self, keys: tuple[str, ...], node: NodeInfo) -> tuple[str, ...]:
        """The pod's claim keys on `node`: its own claims, then the virtual one."""
        key = self.key_on(node)
        return keys if key is None else (*keys, key)
