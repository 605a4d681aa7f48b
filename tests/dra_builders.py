"""resource.k8s.io/v1 objects built field by field for the allocator's tests (tests/dra_objects.py
has the emulator's ready-made ones)."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.example.com"


def device(name: str, **attributes: Any) -> dict[str, Any]:
    """A device with typed attributes: int, bool and str values as written; a value
    ("version", "1.2.3") as a version."""
    attrs: dict[str, Any] = {}
    for key, value in attributes.items():
        if isinstance(value, bool):
            attrs[key] = {"bool": value}
        elif isinstance(value, int):
            attrs[key] = {"int": value}
        elif isinstance(value, tuple):
            attrs[key] = {value[0]: value[1]}
        else:
            attrs[key] = {"string": value}
    return {"name": name, "attributes": attrs}


def slice_obj(
    name: str,
    devices: list[dict[str, Any]],
    node: str | None = "node-1",
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
    driver: str = DRIVER,
    rv: str = "1",
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": driver,
        "pool": {
            "name": pool or node or name,
            "generation": generation,
            "resourceSliceCount": count,
        },
        "devices": devices,
        **spec,
    }
    if node is not None and not any(
        k in spec for k in ("nodeSelector", "allNodes", "perDeviceNodeSelection")
    ):
        body["nodeName"] = node
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "resourceVersion": rv},
        "spec": body,
    }


def class_obj(
    name: str = DRIVER, selectors: tuple[str, ...] | None = None, rv: str = "1", **spec: Any
) -> dict[str, Any]:
    if selectors is None:
        selectors = (f'device.driver == "{DRIVER}"',)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "resourceVersion": rv},
        "spec": {"selectors": [{"cel": {"expression": s}} for s in selectors], **spec},
    }


def exactly(
    name: str = "gpu",
    device_class: str = DRIVER,
    count: int | None = 1,
    selectors: tuple[str, ...] = (),
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": device_class, **extra}
    if count is not None:
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def first_available(name: str, *subs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": list(subs)}


def sub(
    name: str, device_class: str = DRIVER, count: int = 1, selectors: tuple[str, ...] = ()
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "deviceClassName": device_class, "count": count}
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return body


def claim_obj(
    name: str,
    requests: list[dict[str, Any]],
    namespace: str = "ns",
    constraints: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
    allocation: dict[str, Any] | None = None,
    rv: str = "1",
    uid: str | None = None,
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "resourceVersion": rv,
        },
        "spec": {"devices": devices},
    }
    if allocation is not None:
        obj["status"] = {"allocation": allocation}
    return obj


def allocated(
    *devices: tuple[str, str, str], request: str = "gpu", admin: bool = False
) -> dict[str, Any]:
    """A status.allocation holding (driver, pool, device) triples."""
    results = []
    for driver, pool, name in devices:
        entry: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": name}
        if admin:
            entry["adminAccess"] = True
        results.append(entry)
    return {"devices": {"results": results}}


def kubernetes_138765_objects() -> tuple[dict[str, Any], ...]:
    """kubernetes#138765 with whole devices (partitions are refused here): a slice of a
    "big" (80) and a "small" (40) GPU; claim `flexible` asks a whole big GPU or else a
    part (any of 40 and up), claim `strict` only a big one. Pod by pod, the first takes
    the big one and the second fails; a gang search moves the first to its part."""
    memory = f'device.attributes["{DRIVER}"].memory'
    return (
        slice_obj("s", [device("big", memory=80), device("small", memory=40)]),
        class_obj(),
        claim_obj(
            "flexible",
            [
                first_available(
                    "gpu",
                    sub("whole", selectors=(f"{memory} >= 80",)),
                    sub("part", selectors=(f"{memory} >= 40",)),
                )
            ],
        ),
        claim_obj("strict", [exactly(selectors=(f"{memory} >= 80",))]),
    )


def shared_device(
    name: str, policies: dict[str, dict[str, Any]] | None = None, **capacity: str
) -> dict[str, Any]:
    """A device that allows multiple allocations (consumable capacity), with capacities
    (name -> quantity) and, per capacity name, a requestPolicy."""
    body = device(name)
    body["allowMultipleAllocations"] = True
    body["capacity"] = {
        key: {
            "value": value,
            **({"requestPolicy": policies[key]} if key in (policies or {}) else {}),
        }
        for key, value in capacity.items()
    }
    return body


def partition(name: str, counter_set: str = "gpu-0", **counters: str) -> dict[str, Any]:
    """A device that consumes counters of one counter set (a partition of a GPU)."""
    body = device(name)
    body["consumesCounters"] = [
        {"counterSet": counter_set, "counters": {k: {"value": v} for k, v in counters.items()}}
    ]
    return body


def counter_slice(
    name: str,
    sets: dict[str, dict[str, str]],
    node: str = "node-1",
    pool: str | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """A slice holding only sharedCounters (set name -> counter -> quantity)."""
    obj = slice_obj(name, [], node=node, pool=pool, **kw)
    del obj["spec"]["devices"]
    obj["spec"]["sharedCounters"] = [
        {"name": set_name, "counters": {k: {"value": v} for k, v in counters.items()}}
        for set_name, counters in sets.items()
    ]
    return obj


def capacity_request(name: str = "gpu", count: int = 1, **requests: str) -> dict[str, Any]:
    """An `exactly` request asking for capacity (name -> quantity) of each device."""
    return exactly(name, count=count, capacity={"requests": dict(requests)})


def share(
    device_name: str, share_id: str, pool: str = "node-1", request: str = "gpu", **consumed: str
) -> dict[str, Any]:
    """One allocation result: a share of a device, as another scheduler wrote it."""
    return {
        "request": request,
        "driver": DRIVER,
        "pool": pool,
        "device": device_name,
        "shareID": share_id,
        "consumedCapacity": dict(consumed),
    }
