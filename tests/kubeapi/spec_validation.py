"""Field validation of the fields the scheduler reads for constraints and volumes, as
the real API server refuses them (pkg/apis/core/validation, pkg/apis/storage/
validation), so that a test never passes because the emulator stored what a real
server would refuse:

- pods: a container port's `containerPort` in 1-65535, `hostPort` 0 or 1-65535 (with
  `hostNetwork`, equal to the containerPort), `protocol` TCP, UDP or SCTP; a preferred
  node affinity term's `weight` in 1-100; a volume's name a unique DNS-1123 label and
  its `persistentVolumeClaim.claimName` present;
- PersistentVolumeClaims: `accessModes` present and each a known mode;
- CSINodes: a driver's `allocatable.count` at least 0;
- StorageClasses: each allowedTopologies expression with a key and at least one value.

A field of the wrong JSON type (a string or a fraction for an int32, a number outside
int32) fails decoding, which the real server answers 400 BadRequest before validation.
EMULATOR GUESS: the messages follow field.ErrorList's shape but not word for word; only
the first error is reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tests.kubeapi import errors
from tests.kubeapi.resources import (
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    STORAGE_CLASSES,
    ResourceType,
)

_INT32 = (-(2**31), 2**31 - 1)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
PROTOCOLS = ("TCP", "UDP", "SCTP")
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")


class _Invalid(Exception):
    """A field the real server's validation refuses (422)."""


def _int32(value: object, path: str) -> int | None:
    """A decoded int32 field (None when absent); a value that cannot decode is 400."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not _INT32[0] <= value <= _INT32[1]:
        raise errors.bad_request(
            f"json: cannot unmarshal {type(value).__name__} {value!r} into Go struct field "
            f"{path} of type int32"
        )
    return value


def _items(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _pod(obj: Mapping[str, Any]) -> None:
    spec = obj.get("spec") or {}
    host_network = spec.get("hostNetwork") is True
    for kind in ("initContainers", "containers"):
        taken: set[tuple[str, object, int]] = set()  # AccumulateUniqueHostPorts
        for container in _items(spec.get(kind)):
            for i, port in enumerate(_items(container.get("ports"))):
                where = f"spec.{kind}[{container.get('name')}].ports[{i}]"
                number = _int32(port.get("containerPort"), "ContainerPort.containerPort")
                host = _int32(port.get("hostPort"), "ContainerPort.hostPort") or 0
                if number is None or number == 0:
                    raise _Invalid(f"{where}.containerPort: Required value")
                if not 0 < number <= 65535:
                    raise _Invalid(
                        f"{where}.containerPort: Invalid value: {number}: must be between 1 "
                        "and 65535, inclusive"
                    )
                if host and not 0 < host <= 65535:
                    raise _Invalid(
                        f"{where}.hostPort: Invalid value: {host}: must be between 1 and "
                        "65535, inclusive"
                    )
                if host_network and host != number:
                    raise _Invalid(
                        f"{where}.hostPort: Invalid value: {host}: must match "
                        "`containerPort` when `hostNetwork` is true"
                    )
                protocol = port.get("protocol", "TCP")
                if protocol not in PROTOCOLS:
                    raise _Invalid(
                        f'{where}.protocol: Unsupported value: "{protocol}": supported values: '
                        + ", ".join(f'"{p}"' for p in PROTOCOLS)
                    )
                if host:
                    key = (str(port.get("hostIP") or ""), protocol, host)
                    if key in taken:
                        raise _Invalid(f'{where}.hostPort: Duplicate value: "{host}/{protocol}"')
                    taken.add(key)
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    for i, term in enumerate(_items(preferred)):
        weight = _int32(term.get("weight"), "PreferredSchedulingTerm.weight")
        if weight is None or not 1 <= weight <= 100:
            raise _Invalid(
                "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
                f"[{i}].weight: Invalid value: {weight}: must be in the range 1-100"
            )
    names: set[str] = set()
    for volume in _items(spec.get("volumes")):
        name = volume.get("name")
        if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
            # ValidateVolumes: IsDNS1123Label (an ephemeral volume's claim is named
            # <pod>-<volume>, so this also keeps that name a valid object name).
            raise _Invalid(
                f"spec.volumes[{len(names)}].name: Invalid value: {str(name)[:64]!r}: a "
                "lowercase RFC 1123 label must consist of lower case alphanumeric "
                "characters or '-', and must start and end with an alphanumeric character"
            )
        if name in names:
            raise _Invalid(f'spec.volumes[{len(names)}].name: Duplicate value: "{name}"')
        names.add(name)
        claim = volume.get("persistentVolumeClaim")
        if isinstance(claim, Mapping) and not claim.get("claimName"):
            raise _Invalid(
                f"spec.volumes[{volume.get('name')}].persistentVolumeClaim.claimName: "
                "Required value"
            )


def _claim(obj: Mapping[str, Any]) -> None:
    modes = (obj.get("spec") or {}).get("accessModes")
    if not modes:
        raise _Invalid("spec.accessModes: Required value: at least 1 access mode is required")
    for mode in modes if isinstance(modes, list) else [modes]:
        if mode not in ACCESS_MODES:
            raise _Invalid(
                f'spec.accessModes: Unsupported value: "{mode}": supported values: '
                + ", ".join(f'"{m}"' for m in ACCESS_MODES)
            )


def _csinode(obj: Mapping[str, Any]) -> None:
    for i, driver in enumerate(_items((obj.get("spec") or {}).get("drivers"))):
        allocatable = driver.get("allocatable") or {}
        count = _int32(allocatable.get("count"), "VolumeNodeResources.count")
        if count is not None and count < 0:
            raise _Invalid(
                f"spec.drivers[{i}].allocatable.count: Invalid value: {count}: must be "
                "greater than or equal to 0"
            )


def _storage_class(obj: Mapping[str, Any]) -> None:
    for i, term in enumerate(_items(obj.get("allowedTopologies"))):
        for j, expr in enumerate(_items(term.get("matchLabelExpressions"))):
            where = f"allowedTopologies[{i}].matchLabelExpressions[{j}]"
            if not expr.get("key"):
                raise _Invalid(f"{where}.key: Required value")
            if not expr.get("values"):
                raise _Invalid(f"{where}.values: Required value: must specify as least one value")


_VALIDATORS: dict[ResourceType, Callable[[Mapping[str, Any]], None]] = {
    PODS: _pod,
    PERSISTENT_VOLUME_CLAIMS: _claim,
    CSI_NODES: _csinode,
    STORAGE_CLASSES: _storage_class,
}


def validate(rtype: ResourceType, obj: Mapping[str, Any]) -> None:
    """Raise the real server's answer (400 or 422) for an object it would not store."""
    check = _VALIDATORS.get(rtype)
    if check is None:
        return
    try:
        check(obj)
    except _Invalid as why:
        name = str((obj.get("metadata") or {}).get("name") or "")
        raise errors.invalid(rtype, name, str(why)) from None
