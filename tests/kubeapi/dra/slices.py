"""ResourceSlice: the strategy's field dropping and validateResourceSliceSpec
(pkg/registry/resource/resourceslice/strategy.go, pkg/apis/resource/validation, 1.36).

- driver: a CSI-style driver name; pool: name (DNS subdomains joined by '/', at most
  253 bytes), generation >= 0, resourceSliceCount > 0; driver, pool name and nodeName
  immutable on update;
- exactly one of nodeName (non-empty), nodeSelector (exactly one term), allNodes (true)
  and perDeviceNodeSelection (true); sharedCounters and devices not both;
- at most 128 devices (64 when a device has taints or consumesCounters), names unique
  DNS labels; per device at most 32 attributes and capacities together and 48 attribute
  values; attribute and capacity names qualified (`<C identifier>` or
  `<domain>/<C identifier>`), each attribute exactly one of int, bool, string (at most 64
  bytes) and version (semver, at most 64 bytes); at most 16 taints (key, value, effect
  NoSchedule/NoExecute/None); at most 2 consumesCounters (counterSet unique, 1 to 32
  counters); per-device nodeName/nodeSelector/allNodes only with perDeviceNodeSelection;
  bindingConditions / bindingFailureConditions (at most 4 each, both or neither);
  capacity requestPolicy only with allowMultipleAllocations, and then its rules;
- at most 8 sharedCounters, names unique, 1 to 32 counters each.

Feature gates as 1.36 ships them: DRAListTypeAttributes and DRANodeAllocatableResources
are alpha and off, so list-valued attributes (bools, ints, strings, versions) and
nodeAllocatableResourceMappings are dropped on write unless the stored slice already
uses them; the other DRA gates (taints, partitionable devices, binding conditions,
consumable capacity) are on. metadata.generation is 1 on create and grows with each
spec change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.kubeapi.dra import names, quantity
from tests.kubeapi.dra.claim_status import binding_conditions
from tests.kubeapi.dra.claims import TAINT_EFFECTS, each, each_unique
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

DEVICES_MAX = 128
DEVICES_MAX_ADVANCED = 64  # with taints or counter consumption
COUNTER_SETS_MAX = 8
COUNTERS_PER_SET_MAX = 32
CONSUMPTIONS_PER_DEVICE_MAX = 2
COUNTERS_PER_CONSUMPTION_MAX = 32
ATTRIBUTES_AND_CAPACITIES_MAX = 32
ATTRIBUTE_VALUES_MAX = 48
ATTRIBUTE_VALUE_MAX_BYTES = 64
TAINTS_MAX = 16
REQUEST_POLICY_OPTIONS_MAX = 10
_KEY_SHOWN_MAX = names.DOMAIN_MAX + 1 + names.ID_MAX
_LIST_ATTRIBUTES = ("bools", "ints", "strings", "versions")
_SCALAR_ATTRIBUTES = ("int", "bool", "string", "version")
_PLACEMENT = (
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
)
_DEVICE_PLACEMENT = (
    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
    "`perDeviceNodeSelection` is set to true in the ResourceSlice spec"
)


def _uses_list_attributes(spec: Mapping[str, Any] | None) -> bool:
    return any(
        key in attribute
        for device in (spec or {}).get("devices") or []
        for attribute in (device.get("attributes") or {}).values()
        for key in _LIST_ATTRIBUTES
    )


def _uses_allocatable_mappings(spec: Mapping[str, Any] | None) -> bool:
    return any(d.get("nodeAllocatableResourceMappings") for d in (spec or {}).get("devices") or [])


def drop_disabled_fields(spec: dict[str, Any], old: Mapping[str, Any] | None) -> None:
    """dropDisableDRAListTypeAttributesFields and dropDisabledDRANodeAllocatable-
    ResourcesFields, in place."""
    devices = spec.get("devices") or []
    if not _uses_list_attributes(old):
        for device in devices:
            for attribute in (device.get("attributes") or {}).values():
                for key in _LIST_ATTRIBUTES:
                    attribute.pop(key, None)
    if not _uses_allocatable_mappings(old):
        for device in devices:
            device.pop("nodeAllocatableResourceMappings", None)


def default_taints(spec: dict[str, Any], now: str) -> None:
    """SetDefaults_DeviceTaint: timeAdded is now when not given."""
    for device in spec.get("devices") or []:
        for taint in device.get("taints") or []:
            taint.setdefault("timeAdded", now)


def validate(spec: Mapping[str, Any], old: Mapping[str, Any] | None) -> Errors:
    errors = names.driver_name(spec.get("driver", ""), "spec.driver")
    errors += _pool(spec.get("pool") or {}, "spec.pool")
    if old is not None:
        for key, path in (("driver", "spec.driver"), ("nodeName", "spec.nodeName")):
            if spec.get(key) != old.get(key):
                errors.append(immutable(path, spec.get(key)))
        new_pool, old_pool = (s.get("pool") or {} for s in (spec, old))
        if new_pool.get("name", "") != old_pool.get("name", ""):
            errors.append(immutable("spec.pool.name", new_pool.get("name", "")))
    errors += _placement(spec)
    if "sharedCounters" in spec and "devices" in spec:
        errors.append(invalid("spec", "", "only one of `sharedCounters` or `devices` is allowed"))
    devices = spec.get("devices") or []
    advanced = any(d.get("taints") or d.get("consumesCounters") for d in devices)
    per_device = spec.get("perDeviceNodeSelection") is True
    old_devices = {d.get("name"): d for d in (old or {}).get("devices") or []}
    errors += each_unique(
        devices,
        DEVICES_MAX_ADVANCED if advanced else DEVICES_MAX,
        lambda d, p: _device(d, old_devices.get(d.get("name")), p, per_device),
        lambda d: d.get("name", ""),
        "spec.devices",
    )
    errors += each_unique(
        spec.get("sharedCounters") or [],
        COUNTER_SETS_MAX,
        _counter_set,
        lambda s: s.get("name", ""),
        "spec.sharedCounters",
    )
    return errors


def _pool(pool: Mapping[str, Any], path: str) -> Errors:
    errors = names.pool_name(pool.get("name", ""), f"{path}.name")
    count = pool.get("resourceSliceCount", 0)
    if count <= 0:
        errors.append(invalid(f"{path}.resourceSliceCount", count, "must be greater than zero"))
    generation = pool.get("generation", 0)
    if generation < 0:
        errors.append(
            invalid(f"{path}.generation", generation, "must be greater than or equal to zero")
        )
    return errors


def _placement(spec: Mapping[str, Any]) -> Errors:
    errors: Errors = []
    chosen: list[str] = []
    if "nodeName" in spec:
        if spec["nodeName"]:
            chosen.append("`nodeName`")
            errors += names.node_name(spec["nodeName"], "spec.nodeName")
        else:
            errors.append(
                invalid("spec.nodeName", "", "must be either unset or set to a non-empty string")
            )
    if "nodeSelector" in spec:
        chosen.append("`nodeSelector`")
        selector = spec["nodeSelector"]
        errors += names.node_selector(selector, "spec.nodeSelector")
        terms = selector.get("nodeSelectorTerms") or []
        if len(terms) != 1:
            errors.append(
                invalid(
                    "spec.nodeSelector.nodeSelectorTerms",
                    terms,
                    "must have exactly one node selector term",
                )
            )
    for key in ("allNodes", "perDeviceNodeSelection"):
        if key in spec:
            if spec[key]:
                chosen.append(f"`{key}`")
            else:
                errors.append(invalid(f"spec.{key}", False, "must be either unset or set to true"))
    if not chosen:
        errors.append(required("spec", _PLACEMENT))
    elif len(chosen) > 1:
        shown = "{" + ", ".join(chosen) + "}"
        errors.append(invalid("spec", shown, _PLACEMENT + ", but multiple fields are set"))
    return errors


def _device(
    device: Mapping[str, Any], old: Mapping[str, Any] | None, path: str, per_device: bool
) -> Errors:
    errors = names.dns_label(device.get("name", ""), f"{path}.name")
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    together = len(attributes) + len(capacity)
    if together > ATTRIBUTES_AND_CAPACITIES_MAX:
        errors.append(
            invalid(
                path,
                together,
                "the total number of attributes and capacities must not exceed "
                f"{ATTRIBUTES_AND_CAPACITIES_MAX}",
            )
        )
    values = sum(
        sum(len(a.get(k) or []) for k in _LIST_ATTRIBUTES)
        or 1  # a scalar attribute (or an empty one) counts once
        for a in attributes.values()
    )
    if values > ATTRIBUTE_VALUES_MAX:
        errors.append(
            invalid(
                path,
                values,
                f"the total number of attribute values must not exceed {ATTRIBUTE_VALUES_MAX}",
            )
        )
    for key, attribute in attributes.items():
        errors += names.qualified_name(key, f"{path}.attributes")
        errors += _attribute(attribute, f"{path}.attributes[{_shown_key(key)}]")
    shared = device.get("allowMultipleAllocations") is True
    for key, entry in capacity.items():
        errors += names.qualified_name(key, f"{path}.capacity")
        policy = entry.get("requestPolicy")
        where = f"{path}.capacity[{_shown_key(key)}].requestPolicy"
        if policy is not None and not shared:
            errors.append(forbidden(where, "allowMultipleAllocations must be true"))
        elif policy is not None:
            errors += _request_policy(entry.get("value", "0"), policy, where)
    taints = device.get("taints") or []
    if old is None or taints != (old.get("taints") or []):
        errors += each(taints, TAINTS_MAX, _taint, f"{path}.taints")
    errors += each_unique(
        device.get("consumesCounters") or [],
        CONSUMPTIONS_PER_DEVICE_MAX,
        _counter_consumption,
        lambda c: c.get("counterSet", ""),
        f"{path}.consumesCounters",
    )
    errors += _device_placement(device, path, per_device)
    return errors + binding_conditions(
        device.get("bindingConditions") or [], device.get("bindingFailureConditions") or [], path
    )


def _shown_key(key: str) -> str:
    """truncateIfTooLong: a long map key is shown with its middle elided."""
    if len(key) <= _KEY_SHOWN_MAX:
        return key
    keep = _KEY_SHOWN_MAX - 3
    return key[: (keep + 1) // 2] + "..." + key[len(key) - keep // 2 :]


def _attribute(attribute: Mapping[str, Any], path: str) -> Errors:
    errors: Errors = []
    if "string" in attribute:
        errors += _string_value(attribute["string"], f"{path}.string")
    if "version" in attribute:
        errors += _version_value(attribute["version"], f"{path}.version")
    for key in _LIST_ATTRIBUTES:  # only where the stored slice already used them
        if key in attribute and not attribute[key]:
            errors.append(invalid(f"{path}.{key}", [], "must not be empty if specified"))
    for i, item in enumerate(attribute.get("strings") or []):
        errors += _string_value(item, f"{path}.strings[{i}]")
    for i, item in enumerate(attribute.get("versions") or []):
        errors += _version_value(item, f"{path}.versions[{i}]")
    set_fields = [k for k in (*_SCALAR_ATTRIBUTES, *_LIST_ATTRIBUTES) if k in attribute]
    if not set_fields:
        errors.append(invalid(path, "", "exactly one value must be specified"))
    elif len(set_fields) > 1:
        errors.append(invalid(path, dict(attribute), "exactly one value must be specified"))
    return errors


def _string_value(text: str, path: str) -> Errors:
    return (
        [too_long(path, ATTRIBUTE_VALUE_MAX_BYTES)]
        if size(text) > ATTRIBUTE_VALUE_MAX_BYTES
        else []
    )


def _version_value(text: str, path: str) -> Errors:
    errors: Errors = []
    if not names.SEMVER.fullmatch(text):
        errors.append(invalid(path, text, "must be a string compatible with semver.org spec 2.0.0"))
    return errors + _string_value(text, path)


def _taint(taint: Mapping[str, Any], path: str) -> Errors:
    errors = names.label_name(taint.get("key", ""), f"{path}.key")
    if taint.get("value"):
        errors += names.label_value(taint["value"], f"{path}.value")
    effect = taint.get("effect", "")
    if not effect:
        errors.append(required(f"{path}.effect"))
    elif effect not in TAINT_EFFECTS:
        errors.append(not_supported(f"{path}.effect", effect, TAINT_EFFECTS))
    return errors


def _counters(counters: Mapping[str, Any], limit: int, path: str) -> Errors:
    if not counters:
        return [required(path)]
    if len(counters) > limit:
        return [too_many(path, len(counters), limit)]
    errors: Errors = []
    for key in counters:
        errors += names.dns_label(key, path)
    return errors


def _counter_set(counter_set: Mapping[str, Any], path: str) -> Errors:
    name = counter_set.get("name", "")
    errors = names.dns_label(name, f"{path}.name") if name else [required(f"{path}.name")]
    return errors + _counters(
        counter_set.get("counters") or {}, COUNTERS_PER_SET_MAX, f"{path}.counters"
    )


def _counter_consumption(consumption: Mapping[str, Any], path: str) -> Errors:
    name = consumption.get("counterSet", "")
    where = f"{path}.counterSet"
    errors = names.dns_label(name, where) if name else [required(where)]
    counters = consumption.get("counters") or {}
    return errors + _counters(counters, COUNTERS_PER_CONSUMPTION_MAX, f"{path}.counters")


def _device_placement(device: Mapping[str, Any], path: str, per_device: bool) -> Errors:
    keys = [k for k in ("nodeName", "nodeSelector", "allNodes") if k in device]
    if not per_device:
        if keys:
            return [
                invalid(
                    path,
                    None,
                    "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
                    "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
                )
            ]
        return []
    errors: Errors = []
    chosen: list[str] = []
    if "nodeName" in device:
        if device["nodeName"]:
            chosen.append("`nodeName`")
            errors += names.node_name(device["nodeName"], f"{path}.nodeName")
        else:
            errors.append(invalid(f"{path}.nodeName", "", "must not be empty"))
    if "nodeSelector" in device:
        chosen.append("`nodeSelector`")
        errors += names.node_selector(device["nodeSelector"], f"{path}.nodeSelector")
    if "allNodes" in device:
        if device["allNodes"]:
            chosen.append("`allNodes`")
        else:
            errors.append(invalid(f"{path}.allNodes", False, "must be either unset or set to true"))
    if not chosen:
        errors.append(required(path, _DEVICE_PLACEMENT))
    elif len(chosen) > 1:
        errors.append(invalid(path, "{" + ", ".join(chosen) + "}", _DEVICE_PLACEMENT))
    return errors


def _request_policy(capacity: Any, policy: Mapping[str, Any], path: str) -> Errors:
    """validateRequestPolicy: validValues or validRange (not both), with a default that
    fits the capacity. EMULATOR GUESS: a step of zero or less is refused here; the real
    code divides by it."""
    options = policy.get("validValues") or []
    valid_range = policy.get("validRange")
    if options and valid_range is not None:
        return [
            forbidden(
                path,
                'exactly one policy can be specified, cannot specify "validValues" and '
                '"validRange" at the same time',
            )
        ]
    default = policy.get("default")
    if options:
        if default is None:
            return [required(f"{path}.default", "required when validValues is defined")]
        return _valid_values(capacity, default, options, f"{path}.validValues")
    if valid_range is not None:
        if default is None:
            return [required(f"{path}.default", "required when validRange is defined")]
        return _valid_range(capacity, default, valid_range, f"{path}.validRange")
    return []


def _valid_values(capacity: Any, default: Any, options: list[Any], path: str) -> Errors:
    top = quantity.value(capacity)
    errors: Errors = []
    for i in range(len(options) - 1):
        if quantity.value(options[i]) > quantity.value(options[i + 1]):
            errors.append(
                invalid(
                    f"{path}[{i + 1}]",
                    quantity.shown(options[i + 1]),
                    "values must be sorted in ascending order",
                )
            )
    found = False
    if len(options) > REQUEST_POLICY_OPTIONS_MAX:
        errors.append(too_many(path, len(options), REQUEST_POLICY_OPTIONS_MAX))
    else:
        seen: set[int] = set()
        for i, option in enumerate(options):
            if quantity.value(option) > top:
                errors.append(
                    invalid(
                        f"{path}[{i}]",
                        quantity.shown(option),
                        f"option is larger than capacity value: {quantity.shown(capacity)}",
                    )
                )
            if quantity.value(option) == quantity.value(default):
                found = True
            key = quantity.int64_value(option)
            if key in seen:
                errors.append(duplicate(f"{path}[{i}]", str(key)))
            seen.add(key)
    if not found:
        errors.append(
            invalid(
                path,
                quantity.shown(default),
                "default value is not valid according to the requestPolicy",
            )
        )
    return errors


def _valid_range(capacity: Any, default: Any, valid_range: Mapping[str, Any], path: str) -> Errors:
    low = valid_range.get("min")
    if low is None:
        return [required(f"{path}.min", "required when validRange is defined")]
    top, value = quantity.value(capacity), quantity.value
    cap_text, low_text = quantity.shown(capacity), quantity.shown(low)
    errors: Errors = []
    if value(low) > top:
        errors.append(
            invalid(f"{path}.min", low_text, f"min is larger than capacity value: {cap_text}")
        )
    if value(default) < value(low):
        errors.append(
            invalid(f"{path}.min", quantity.shown(default), f"default is less than min: {low_text}")
        )
    high = valid_range.get("max")
    if high is not None:
        high_text = quantity.shown(high)
        if value(low) > value(high):
            errors.append(invalid(f"{path}.max", low_text, f"min is larger than max: {high_text}"))
        if value(high) > top:
            errors.append(
                invalid(f"{path}.max", high_text, f"max is larger than capacity value: {cap_text}")
            )
        if value(default) > value(high):
            errors.append(
                invalid(
                    f"{path}.max", quantity.shown(default), f"default is more than max: {high_text}"
                )
            )
    step = valid_range.get("step")
    if step is not None:
        step_value = quantity.int64_value(step)
        if step_value <= 0:
            return [
                *errors,
                invalid(f"{path}.step", quantity.shown(step), "must be greater than zero"),
            ]
        if value(low) + value(step) > top:
            errors.append(
                invalid(
                    f"{path}.step",
                    quantity.shown(step),
                    f"one step {json.dumps(str(value(low) + value(step)))[1:-1]} is larger than "
                    f"capacity value: {cap_text}",
                )
            )
        for checked in [default] + ([high] if high is not None else []):
            if (quantity.int64_value(checked) - quantity.int64_value(low)) % step_value:
                errors.append(
                    invalid(
                        f"{path}.step",
                        quantity.shown(checked),
                        f"value is not a multiple of a given step ({quantity.shown(step)}) from "
                        f"({low_text})",
                    )
                )
    return errors
