"""A write of a ResourceClaim's status (resourceclaims/status): the status strategy and
ValidateResourceClaimStatusUpdate (pkg/registry/resource/resourceclaim/strategy.go,
pkg/apis/resource/validation/validation.go, Kubernetes 1.36).

- reservedFor: at most 256 entries (ResourceClaimReservedForMaxSize), each with
  resource, name and uid, no uid twice; not without an allocation; no new entry once
  the claim is being deleted.
- allocation: set once, then immutable (it may only be removed, which deallocates); a
  new one is validated: at most 32 results, each naming a request (or
  request/subrequest) of the claim, a driver, a pool and a device; config entries (at
  most 64, source FromClaim or FromClass); the node selector's shape.
- devices (driver-written device status): each an allocated device, at most 8
  conditions; entries of devices that are no longer allocated are dropped by the server
  (dropDeallocatedStatusDevices).

EMULATOR GUESS / not emulated: metav1 conditions are only counted, not validated
(ValidateConditions); networkData's interface name and hardware address lengths and IP
list are checked, its IP syntax is not; adminAccess results are accepted without the
namespace label check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.kubeapi.dra import claims, names
from tests.kubeapi.dra.claims import RequestNames, each, each_unique, request_ref, request_refs
from tests.kubeapi.dra.fields import (
    Errors,
    duplicate,
    forbidden,
    immutable,
    invalid,
    not_supported,
    required,
    size,
    too_long,
    too_many,
)

RESERVED_FOR_MAX = 256
RESULTS_MAX = 32
ALLOCATION_CONFIG_MAX = 2 * claims.CONFIG_MAX  # class + claim
BINDING_CONDITIONS_MAX = 4
DEVICE_CONDITIONS_MAX = 8
DEVICE_DATA_MAX = 10 * 1024
INTERFACE_NAME_MAX = 256
HARDWARE_ADDRESS_MAX = 128
IPS_MAX = 16


def device_key(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """structured.SharedDeviceID: driver, pool, device and the share, if any."""
    return (
        entry.get("driver", ""),
        entry.get("pool", ""),
        entry.get("device", ""),
        entry.get("shareID", ""),
    )


def allocated(status: Mapping[str, Any]) -> set[tuple[str, str, str, str]]:
    allocation = status.get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return {device_key(r) for r in results}


def drop_deallocated_devices(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """dropDeallocatedStatusDevices: status.devices entries of a device the old status
    had allocated and the new one does not are dropped."""
    gone = allocated(old) - allocated(new)
    kept = [d for d in new.get("devices") or [] if device_key(d) not in gone]
    if kept:
        new["devices"] = kept
    else:
        new.pop("devices", None)


def validate_update(
    new: Mapping[str, Any], old: Mapping[str, Any], known: RequestNames, deleting: bool
) -> Errors:
    reserved = new.get("reservedFor") or []
    errors = each_unique(
        reserved, RESERVED_FOR_MAX, _consumer, lambda c: c.get("uid", ""), "status.reservedFor"
    )
    devices_now = allocated(new)
    errors += each_unique(
        new.get("devices") or [],
        -1,
        lambda d, p: _device_status(d, p, devices_now),
        lambda d: "/".join(device_key(d)),
        "status.devices",
    )
    allocation, old_allocation = new.get("allocation"), old.get("allocation")
    if reserved:
        if allocation is None:
            errors.append(
                forbidden("status.reservedFor", "may not be specified when `allocated` is not set")
            )
        elif deleting:
            before = [_consumer_identity(c) for c in old.get("reservedFor") or []]
            if any(_consumer_identity(c) not in before for c in reserved):
                errors.append(
                    forbidden(
                        "status.reservedFor",
                        "new entries may not be added while `deallocationRequested` or "
                        "`deletionTimestamp` are set",
                    )
                )
    if old_allocation is not None and allocation is not None:
        if allocation != old_allocation:
            errors.append(immutable("status.allocation", allocation))
    elif allocation is not None:
        errors += _allocation(allocation, "status.allocation", known)
    return errors


def _consumer_identity(consumer: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(consumer.get(k, "") for k in ("apiGroup", "resource", "name", "uid"))


def _consumer(consumer: Mapping[str, Any], path: str) -> Errors:
    return [required(f"{path}.{k}") for k in ("resource", "name", "uid") if not consumer.get(k)]


def _allocation(allocation: Mapping[str, Any], path: str, known: RequestNames) -> Errors:
    devices = allocation.get("devices") or {}
    where = f"{path}.devices"
    errors = each(
        devices.get("results") or [],
        RESULTS_MAX,
        lambda r, p: _result(r, p, known),
        f"{where}.results",
    )
    errors += each(
        devices.get("config") or [],
        ALLOCATION_CONFIG_MAX,
        lambda c, p: _allocation_config(c, p, known),
        f"{where}.config",
    )
    if "nodeSelector" in allocation:
        errors += names.node_selector(allocation["nodeSelector"], f"{path}.nodeSelector")
    return errors


def _result(result: Mapping[str, Any], path: str, known: RequestNames) -> Errors:
    errors = request_ref(result.get("request", ""), f"{path}.request", known)
    errors += names.driver_name(result.get("driver", ""), f"{path}.driver")
    errors += names.pool_name(result.get("pool", ""), f"{path}.pool")
    errors += names.dns_label(result.get("device", ""), f"{path}.device")
    errors += binding_conditions(
        result.get("bindingConditions") or [], result.get("bindingFailureConditions") or [], path
    )
    if "shareID" in result:
        errors += names.uid(result["shareID"], f"{path}.shareID")
    return errors


def _allocation_config(config: Mapping[str, Any], path: str, known: RequestNames) -> Errors:
    source = config.get("source", "")
    errors: Errors = []
    if not source:
        errors.append(required(f"{path}.source"))
    elif source not in ("FromClaim", "FromClass"):
        errors.append(not_supported(f"{path}.source", source, ["FromClaim", "FromClass"]))
    errors += request_refs(config.get("requests") or [], f"{path}.requests", known)
    return errors + claims.configuration(config, path)


def binding_conditions(conditions: list[str], failures: list[str], path: str) -> Errors:
    """validateDeviceBindingParameters (a device in a slice, a result in an allocation)."""
    errors: Errors = []
    for key, values in (("bindingConditions", conditions), ("bindingFailureConditions", failures)):
        errors += each(values, BINDING_CONDITIONS_MAX, names.label_name, f"{path}.{key}")
    for i, condition in enumerate(conditions):
        if condition in conditions[:i]:
            errors.append(duplicate(f"{path}.bindingConditions[{i}]", condition))
    for i, condition in enumerate(failures):
        if condition in failures[:i]:
            errors.append(duplicate(f"{path}.bindingFailureConditions[{i}]", condition))
        if condition in conditions:
            errors.append(
                invalid(
                    f"{path}.bindingFailureConditions[{i}]",
                    condition,
                    "bindingFailureConditions must not overlap with bindingConditions",
                )
            )
    if failures and not conditions:
        errors.append(
            invalid(
                f"{path}.bindingConditions",
                conditions,
                "bindingConditions are required to use bindingFailureConditions",
            )
        )
    if conditions and not failures:
        errors.append(
            invalid(
                f"{path}.bindingFailureConditions",
                failures,
                "bindingFailureConditions are required to use bindingConditions",
            )
        )
    return errors


def _device_status(
    device: Mapping[str, Any], path: str, devices_now: set[tuple[str, str, str, str]]
) -> Errors:
    errors = names.driver_name(device.get("driver", ""), f"{path}.driver")
    errors += names.pool_name(device.get("pool", ""), f"{path}.pool")
    errors += names.dns_label(device.get("device", ""), f"{path}.device")
    if "shareID" in device:
        errors += names.uid(device["shareID"], f"{path}.shareID")
    if device_key(device) not in devices_now:
        shown = "/".join(device_key(device)[:3])
        errors.append(invalid(path, shown, "must be an allocated device in the claim"))
    conditions = device.get("conditions") or []
    if len(conditions) > DEVICE_CONDITIONS_MAX:
        errors.append(too_many(f"{path}.conditions", len(conditions), DEVICE_CONDITIONS_MAX))
    if device.get("data") is not None:
        errors += claims.raw_object(device["data"], f"{path}.data", DEVICE_DATA_MAX)
    network = device.get("networkData") or {}
    if size(network.get("interfaceName", "")) > INTERFACE_NAME_MAX:
        errors.append(too_long(f"{path}.networkData.interfaceName", INTERFACE_NAME_MAX))
    if size(network.get("hardwareAddress", "")) > HARDWARE_ADDRESS_MAX:
        errors.append(too_long(f"{path}.networkData.hardwareAddress", HARDWARE_ADDRESS_MAX))
    errors += each_unique(
        network.get("ips") or [], IPS_MAX, lambda ip, p: [], str, f"{path}.networkData.ips"
    )
    return errors
