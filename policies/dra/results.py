"""The allocation result of one claim, in the shape kube-scheduler's allocator writes it
(structured allocator: results, config, nodeSelector)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from cache.dra.claims import AllocatedConfig, Allocation, Claim, DeviceResult
from cache.dra.classes import DeviceClass
from cache.dra.slices import NODE_NAME, NODE_SELECTOR, Device, DeviceId, Slice
from cache.terms import NODE_NAME_FIELD, Requirement, SelectorTerm

FROM_CLASS = "FromClass"
FROM_CLAIM = "FromClaim"


@dataclass(frozen=True, slots=True)
class Picked:
    """One device chosen for a claim: for request `request` (its sub-request `sub`
    when the request is a firstAvailable list) of class `device_class`."""

    result: DeviceResult
    device: Device
    slice: Slice
    device_class: DeviceClass


def build_allocation(
    claim: Claim, picked: Sequence[Picked], chosen_subs: dict[str, str], node: str
) -> Allocation:
    """`claim`'s allocation from the devices picked for it, in the order picked.
    `chosen_subs`: request name -> the sub-request chosen (firstAvailable requests)."""
    return Allocation(
        results=tuple(p.result for p in picked),
        config=_config(claim, picked, chosen_subs),
        node_selector=_node_selector(picked, node),
    )


def _config(
    claim: Claim, picked: Sequence[Picked], chosen_subs: dict[str, str]
) -> tuple[AllocatedConfig, ...]:
    """Class configs first, each class once with every request that used it; then the
    claim's configs that apply to all requests or name a request (or the chosen
    "request/sub-request"). kube-scheduler appends a claim config once per request it
    names; here it appears once, with its own requests list."""
    by_class: dict[str, list[str]] = {}
    classes: dict[str, DeviceClass] = {}
    for p in picked:
        names = by_class.setdefault(p.device_class.name, [])
        classes[p.device_class.name] = p.device_class
        if p.result.request not in names:
            names.append(p.result.request)
    out: list[AllocatedConfig] = []
    for name, requests in by_class.items():
        for config in classes[name].config:
            out.append(AllocatedConfig(FROM_CLASS, tuple(requests), config))
    used = {r.name for r in claim.requests} | {
        f"{request}/{sub}" for request, sub in chosen_subs.items()
    }
    for entry in claim.config:
        if not entry.requests or used.intersection(entry.requests):
            out.append(AllocatedConfig(FROM_CLAIM, entry.requests, entry.config))
    return tuple(out)


def _node_selector(picked: Sequence[Picked], node: str) -> tuple[SelectorTerm, ...] | None:
    """One node by name when any device is local to it; else the merged (single) terms
    of the selector-bound slices and devices; None when every device reaches every
    node."""
    merged: list[Requirement] = []
    for p in picked:
        binding = p.device.binding if p.device.binding is not None else p.slice.binding
        if binding.kind == NODE_NAME or p.device.binds_to_node:
            return ((Requirement(NODE_NAME_FIELD, "In", (node,), field=True),),)
        if binding.kind == NODE_SELECTOR and binding.terms:
            for requirement in binding.terms[0]:
                if requirement not in merged:
                    merged.append(requirement)
    return (tuple(merged),) if merged else None


# Share IDs are name-based UUIDs under this namespace (see share_id).
SHARE_NAMESPACE = uuid.UUID("6f1b0d2e-6a8e-5b7c-9d43-3c1f2a4e8b50")


def share_id(claim: Claim, position: int, device: DeviceId) -> str:
    """The shareID of the claim's result at `position` on `device`: an RFC 4122 UUID in
    its lowercase form, as the API server requires. kube-scheduler draws a random one
    (uuid.NewUUID); here it is name-based (version 5) on the claim's uid and
    resourceVersion, the result's position and the device, so that a plan is
    reproducible (the simulator, the reach memo's property test) while every share is
    still unique: two claims differ in uid, two results of one claim in position, and
    the same claim allocated again after a deallocation in resourceVersion."""
    name = f"{claim.uid or claim.key}/{claim.resource_version}/{position}/{device}"
    return str(uuid.uuid5(SHARE_NAMESPACE, name))
