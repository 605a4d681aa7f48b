"""The structural-schema validation apiextensions applies to a custom resource's spec,
for the PodGroup CRD served here (deploy/crd-podgroup.yaml, read from that file): a
value of the wrong type, an int32 out of range, under `minimum`, a list over
`maxItems`, a string over `maxLength` or out of `enum` is refused 422, worded as
kube-apiserver words it (`spec.x: Invalid value: 0: spec.x in body should be greater
than or equal to 1`).

EMULATOR GUESS: only those keywords (the ones deploy/ uses in a spec); unknown spec
fields are kept (the real server prunes them); the first error is reported.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

from tests.kubeapi import errors
from tests.kubeapi.pruning import CRD_FILE
from tests.kubeapi.resources import PODGROUPS

_JSON_TYPES = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool}
_INT32 = (-(2**31), 2**31 - 1)


@functools.cache
def podgroup_spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_FILE.read_text())
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert isinstance(spec, dict)
    return spec


class _Invalid(Exception):
    pass


def validate_podgroup(obj: dict[str, Any]) -> None:
    """Raise the 422 the real server answers for a PodGroup spec its schema refuses."""
    if "spec" not in obj:
        return
    try:
        _check(obj["spec"], podgroup_spec_schema(), "spec")
    except _Invalid as why:
        name = str((obj.get("metadata") or {}).get("name") or "")
        raise errors.invalid(PODGROUPS, name, str(why)) from None


def _shown(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _check(value: Any, schema: dict[str, Any], path: str) -> None:
    if schema.get("x-kubernetes-int-or-string") and isinstance(value, (int, str)):
        return
    kind = schema.get("type")
    wanted = _JSON_TYPES.get(kind) if isinstance(kind, str) else None
    if wanted is not None and (
        not isinstance(value, wanted) or (wanted is int and isinstance(value, bool))
    ):
        raise _Invalid(
            f"{path}: Invalid value: {_shown(type(value).__name__)}: {path} in body must be "
            f"of type {kind}: {_shown(type(value).__name__)}"
        )
    if kind == "integer":
        if schema.get("format") == "int32" and not _INT32[0] <= value <= _INT32[1]:
            raise errors.bad_request(f"{path}: cannot unmarshal {value} into an int32")
        least = schema.get("minimum")
        if least is not None and value < least:
            raise _Invalid(
                f"{path}: Invalid value: {value}: {path} in body should be greater than or "
                f"equal to {least}"
            )
    if kind == "string":
        longest = schema.get("maxLength")
        if longest is not None and len(value.encode()) > longest:
            raise _Invalid(f"{path}: Too long: may not be more than {longest} bytes")
    if "enum" in schema and value not in schema["enum"]:
        raise _Invalid(f"{path}: Unsupported value: {_shown(value)}")
    if kind == "array":
        most = schema.get("maxItems")
        if most is not None and len(value) > most:
            raise _Invalid(f"{path}: Too many: {len(value)}: must have at most {most} items")
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _check(item, items, f"{path}[{i}]")
    if kind == "object":
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                _check(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                _check(item, extra, f"{path}.{key}")
