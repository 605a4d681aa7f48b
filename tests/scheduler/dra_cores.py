"""Scheduling cores with DRA objects, for the tests of whole-gang device allocation
(tests/scheduler/test_dra_*.py): nodes, ResourceSlices, DeviceClasses and claims fed
through the core's own entry points, and pods that use claims."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType
from cache.dra.slices import DeviceId
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from tests.dra_builders import DRIVER
from tests.factories import node_obj, pod_obj

MEMORY = f'device.attributes["{DRIVER}"].memory'
KINDS = {
    "ResourceSlice": "resourceslices",
    "DeviceClass": "deviceclasses",
    "ResourceClaim": "resourceclaims",
}


def dra_core(*nodes: str, cpu: str = "64") -> SchedulingCore:
    core = SchedulingCore(build_profile())
    for name in nodes:
        core.apply_node(EventType.ADDED, node_obj(name, cpu=cpu), 0.0)
    return core


def feed(core: SchedulingCore, *objs: dict[str, Any], event: str = "ADDED") -> None:
    for obj in objs:
        core.apply_dra_object(KINDS[obj["kind"]], event, obj, 0.0)


def claiming(
    name: str,
    *claims: str,
    templates: dict[str, str] | None = None,
    gang: str | None = "g",
    size: int = 1,
    cpu: str = "1",
    namespace: str = "ns",
) -> dict[str, Any]:
    """A pod of gang `gang` (of `size`) using the named claims (pod claim name =
    claim name) and, per `templates`, pod claim name -> template."""
    obj = pod_obj(name, namespace=namespace, gang=gang, min_member=size, cpu=cpu)
    entries: list[dict[str, str]] = [{"name": c, "resourceClaimName": c} for c in claims]
    entries += [
        {"name": ref, "resourceClaimTemplateName": template}
        for ref, template in (templates or {}).items()
    ]
    obj["spec"]["resourceClaims"] = entries
    return obj


def add_pods(core: SchedulingCore, *pods: dict[str, Any], now: float = 0.0) -> None:
    for pod in pods:
        core.apply_pod(EventType.ADDED, pod, now)


def devices(plan: Plan, claim: str) -> list[str]:
    """The devices the plan allocates to claim "ns/name"."""
    for entry in plan.claims:
        if entry.key == claim:
            assert entry.allocation is not None, claim
            return [r.device for r in entry.allocation.results]
    raise AssertionError(f"{claim} not in the plan: {[c.key for c in plan.claims]}")


def taken_twice(core: SchedulingCore) -> list[DeviceId]:
    """Devices two claims take (allocated or held), which must never happen unless
    every use of the device is a share (consumable capacity)."""
    seen: dict[DeviceId, str] = {}
    whole: set[DeviceId] = set()
    twice = []
    for key in core.dra.claims:
        allocation = core.dra.allocation_of(key)
        if allocation is None:
            continue
        for device in allocation.charged():
            if (
                device in seen
                and seen[device] != key
                and (device in whole or device in allocation.whole())
            ):
                twice.append(device)
            seen[device] = key
        whole.update(allocation.whole())
    return twice
