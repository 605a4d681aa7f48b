"""Field errors as k8s.io/apimachinery/pkg/util/validation/field makes them, and the 422
Invalid answer that carries them (apierrors.NewInvalid).

A validator returns a list of FieldError; `refuse` turns a non-empty list into the
ApiError the real server answers: the message is `<Kind>.<group> "<name>" is invalid:
<error>` for one error and `... is invalid: [<e1>, <e2>]` for several (an aggregate
prints its distinct messages in a bracketed list), and `details.causes` has one cause per
error with its reason (`FieldValueInvalid`, ...), message and field path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.kubeapi.errors import ApiError
from tests.kubeapi.resources import ResourceType


@dataclass(frozen=True)
class FieldError:
    reason: str  # the cause type: FieldValueInvalid, FieldValueRequired, ...
    field: str  # the path: spec.devices.requests[0].name
    body: str  # "Invalid value: \"x\": detail"

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"


Errors = list[FieldError]


def show(value: Any) -> str:
    """A bad value as ErrorBody prints it: a string quoted (%q), numbers and booleans
    bare (%v), anything else as JSON (`null` for nil)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def size(text: str) -> int:
    """len() of a Go string: its UTF-8 bytes (a lone surrogate from JSON counts too)."""
    return len(text.encode("utf-8", "surrogatepass"))


def _with_detail(text: str, detail: str) -> str:
    return f"{text}: {detail}" if detail else text


def required(path: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", path, _with_detail("Required value", detail))


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(
        "FieldValueInvalid", path, _with_detail(f"Invalid value: {show(value)}", detail)
    )


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path, _with_detail("Forbidden", detail))


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", path, f"Duplicate value: {show(value)}")


def not_found(path: str, value: Any) -> FieldError:
    return FieldError("FieldValueNotFound", path, f"Not found: {show(value)}")


def not_supported(path: str, value: Any, supported: list[str]) -> FieldError:
    listed = ", ".join(json.dumps(s) for s in supported)
    return FieldError(
        "FieldValueNotSupported",
        path,
        _with_detail(f"Unsupported value: {show(value)}", f"supported values: {listed}"),
    )


def too_long(path: str, limit: int) -> FieldError:
    unit = "byte" if limit == 1 else "bytes"
    return FieldError("FieldValueTooLong", path, f"Too long: may not be more than {limit} {unit}")


def too_many(path: str, actual: int, limit: int) -> FieldError:
    unit = "item" if limit == 1 else "items"
    return FieldError(
        "FieldValueTooMany", path, f"Too many: {actual}: must have at most {limit} {unit}"
    )


def immutable(path: str, value: Any) -> FieldError:
    """apimachineryvalidation.ValidateImmutableField. EMULATOR GUESS: the value is shown
    as the JSON the client sent; the real server prints its internal Go struct."""
    return invalid(path, value, "field is immutable")


def refuse(rtype: ResourceType, name: str, errors: Errors) -> ApiError:
    messages: list[str] = []
    for error in errors:
        if str(error) not in messages:
            messages.append(str(error))
    text = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    group = f".{rtype.group}" if rtype.group else ""
    causes = [{"reason": e.reason, "message": e.body, "field": e.field} for e in errors]
    return ApiError(
        422,
        "Invalid",
        f'{rtype.kind}{group} "{name}" is invalid: {text}',
        {"name": name, "group": rtype.group, "kind": rtype.kind, "causes": causes},
    )
