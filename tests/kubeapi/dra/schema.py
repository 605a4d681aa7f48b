"""The JSON shapes of the resource.k8s.io/v1 types (k8s.io/api/resource/v1/types.go), and a
decoder that does to a request body what the server's JSON decoding into those Go structs
does, before any strategy or validation runs:
- a value of the wrong JSON type (a string where an int64 is, a number for a bool, a
  fractional number for an integer, an object for a list) is refused with 400 BadRequest,
  as the real decoder's `json: cannot unmarshal ...` error is;
- a Quantity is a string or a number matching the quantity syntax, else 400;
- a metav1.Time is an RFC 3339 string, else 400;
- a RawExtension (opaque parameters, device data) is any JSON;
- `null` is the zero value, so the field is left out;
- fields the type does not have are dropped (the server's default fieldValidation=Warn
  drops unknown fields with a warning header; the warning is not emulated).

EMULATOR GUESS: the wording of the 400 message (`<Kind> in version "v1" cannot be handled
as a <Kind>: json: cannot unmarshal <json type> into Go struct field <field> of type
<go type>`) follows the apiserver's; the field path is the JSON one. Empty lists and maps
are kept as sent (the real server stores nil and empty alike and omits them when it
writes `omitempty` fields back).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

_INT64 = range(-(2**63), 2**63)
# apimachinery resource.Quantity: a signed decimal number, then an optional binary or
# decimal SI suffix or a decimal exponent.
QUANTITY = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?")
_QUANTITY_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


class DecodeError(Exception):
    """The body does not fit the Go types; the server answers 400."""


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class Shape(ABC):
    go_type = "interface {}"
    zero: Any = None  # what `null` decodes to inside a list or a map

    @abstractmethod
    def decode(self, value: Any, path: str) -> Any:
        """`value` as the Go type decodes it, or DecodeError naming `path`."""

    def _refuse(self, value: Any, path: str) -> DecodeError:
        shown = "number " + str(value) if _json_type(value) == "number" else _json_type(value)
        return DecodeError(
            f"json: cannot unmarshal {shown} into Go struct field {path} of type {self.go_type}"
        )


class _String(Shape):
    go_type = "string"
    zero = ""

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, str):
            raise self._refuse(value, path)
        return value


class _Int64(Shape):
    go_type = "int64"
    zero = 0

    def decode(self, value: Any, path: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, int) or value not in _INT64:
            raise self._refuse(value, path)
        return value


class _Bool(Shape):
    go_type = "bool"
    zero = False

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, bool):
            raise self._refuse(value, path)
        return value


class _Quantity(Shape):
    go_type = "resource.Quantity"
    zero = "0"

    def decode(self, value: Any, path: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self._refuse(value, path)
        text = value if isinstance(value, str) else repr(value)
        if not QUANTITY.fullmatch(text):
            raise DecodeError(_QUANTITY_MESSAGE)
        return value


class _Time(Shape):
    go_type = "v1.Time"

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, str):
            raise self._refuse(value, path)
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as err:
            raise DecodeError(f'parsing time "{value}" as RFC 3339: cannot parse') from err
        if "T" not in value:  # RFC 3339 needs both date and time
            raise DecodeError(f'parsing time "{value}" as RFC 3339: cannot parse')
        return value


class _Raw(Shape):
    """runtime.RawExtension: kept as it came; validation looks at it later."""

    def decode(self, value: Any, path: str) -> Any:
        _check_finite(value)
        return value


def _check_finite(value: Any) -> None:
    """Python's JSON parser takes NaN and Infinity, which are not JSON: Go's refuses them."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and (item != item or item in (float("inf"), float("-inf"))):
            raise DecodeError(f"invalid character in numeric literal: {item}")
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())


@dataclass(frozen=True)
class ListOf(Shape):
    item: Shape

    @property  # type: ignore[override]
    def go_type(self) -> str:
        return "[]" + self.item.go_type

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise self._refuse(value, path)
        return [_element(self.item, v, path) for v in value]


@dataclass(frozen=True)
class MapOf(Shape):
    item: Shape

    @property  # type: ignore[override]
    def go_type(self) -> str:
        return "map[string]" + self.item.go_type

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, Mapping):
            raise self._refuse(value, path)
        return {k: _element(self.item, v, path) for k, v in value.items()}


def _element(item: Shape, value: Any, path: str) -> Any:
    """One element of a list or a map: Go decodes null into the item type's zero value."""
    if value is None:
        return item.decode({}, path) if isinstance(item, Struct) else item.zero
    return item.decode(value, path)


class Struct(Shape):
    def __init__(self, go_name: str, **fields: Shape) -> None:
        self.go_name = go_name
        self.fields = fields

    @property  # type: ignore[override]
    def go_type(self) -> str:
        return "v1." + self.go_name

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, Mapping):
            raise self._refuse(value, path)
        out: dict[str, Any] = {}
        for key, shape in self.fields.items():
            if value.get(key) is not None:
                out[key] = shape.decode(value[key], f"{path}.{key}" if path else key)
        return out


class OpenStruct(Struct):
    """A struct whose other fields are kept as sent (the object metadata of a claim
    template, whose remaining fields nothing here reads)."""

    def decode(self, value: Any, path: str) -> Any:
        known = super().decode(value, path)
        _check_finite(value)
        return {**{k: v for k, v in value.items() if v is not None}, **known}


STRING, INT64, BOOL, QUANTITY_SHAPE, TIME, RAW = (
    _String(),
    _Int64(),
    _Bool(),
    _Quantity(),
    _Time(),
    _Raw(),
)
STRINGS = ListOf(STRING)

_REQUIREMENT = Struct("NodeSelectorRequirement", key=STRING, operator=STRING, values=STRINGS)
NODE_SELECTOR = Struct(
    "NodeSelector",
    nodeSelectorTerms=ListOf(
        Struct(
            "NodeSelectorTerm",
            matchExpressions=ListOf(_REQUIREMENT),
            matchFields=ListOf(_REQUIREMENT),
        )
    ),
)
_OBJECT_META = OpenStruct(
    "ObjectMeta", labels=MapOf(STRING), annotations=MapOf(STRING), finalizers=STRINGS
)

# --- ResourceSlice ------------------------------------------------------------------
_COUNTER = Struct("Counter", value=QUANTITY_SHAPE)
_ATTRIBUTE = Struct(
    "DeviceAttribute",
    int=INT64,
    bool=BOOL,
    string=STRING,
    version=STRING,
    ints=ListOf(INT64),
    bools=ListOf(BOOL),
    strings=STRINGS,
    versions=STRINGS,
)
_REQUEST_POLICY = Struct(
    "CapacityRequestPolicy",
    default=QUANTITY_SHAPE,
    validValues=ListOf(QUANTITY_SHAPE),
    validRange=Struct(
        "CapacityRequestPolicyRange", min=QUANTITY_SHAPE, max=QUANTITY_SHAPE, step=QUANTITY_SHAPE
    ),
)
_TAINT = Struct("DeviceTaint", key=STRING, value=STRING, effect=STRING, timeAdded=TIME)
DEVICE = Struct(
    "Device",
    name=STRING,
    attributes=MapOf(_ATTRIBUTE),
    capacity=MapOf(Struct("DeviceCapacity", value=QUANTITY_SHAPE, requestPolicy=_REQUEST_POLICY)),
    consumesCounters=ListOf(
        Struct("DeviceCounterConsumption", counterSet=STRING, counters=MapOf(_COUNTER))
    ),
    nodeName=STRING,
    nodeSelector=NODE_SELECTOR,
    allNodes=BOOL,
    taints=ListOf(_TAINT),
    bindsToNode=BOOL,
    bindingConditions=STRINGS,
    bindingFailureConditions=STRINGS,
    allowMultipleAllocations=BOOL,
    nodeAllocatableResourceMappings=MapOf(
        Struct(
            "NodeAllocatableResourceMapping",
            capacityKey=STRING,
            allocationMultiplier=QUANTITY_SHAPE,
        )
    ),
)
SLICE_SPEC = Struct(
    "ResourceSliceSpec",
    driver=STRING,
    pool=Struct("ResourcePool", name=STRING, generation=INT64, resourceSliceCount=INT64),
    nodeName=STRING,
    nodeSelector=NODE_SELECTOR,
    allNodes=BOOL,
    devices=ListOf(DEVICE),
    perDeviceNodeSelection=BOOL,
    sharedCounters=ListOf(Struct("CounterSet", name=STRING, counters=MapOf(_COUNTER))),
)

# --- ResourceClaim ------------------------------------------------------------------
TOLERATION = Struct(
    "DeviceToleration",
    key=STRING,
    operator=STRING,
    value=STRING,
    effect=STRING,
    tolerationSeconds=INT64,
)
_SELECTOR = Struct("DeviceSelector", cel=Struct("CELDeviceSelector", expression=STRING))
_CAPACITY_REQUIREMENTS = Struct("CapacityRequirements", requests=MapOf(QUANTITY_SHAPE))
_OPAQUE = Struct("OpaqueDeviceConfiguration", driver=STRING, parameters=RAW)
_REQUEST_COMMON: dict[str, Shape] = {
    "deviceClassName": STRING,
    "selectors": ListOf(_SELECTOR),
    "allocationMode": STRING,
    "count": INT64,
    "tolerations": ListOf(TOLERATION),
    "capacity": _CAPACITY_REQUIREMENTS,
}
_REQUEST = Struct(
    "DeviceRequest",
    name=STRING,
    exactly=Struct("ExactDeviceRequest", adminAccess=BOOL, **_REQUEST_COMMON),
    firstAvailable=ListOf(Struct("DeviceSubRequest", name=STRING, **_REQUEST_COMMON)),
)
CLAIM_SPEC = Struct(
    "ResourceClaimSpec",
    devices=Struct(
        "DeviceClaim",
        requests=ListOf(_REQUEST),
        constraints=ListOf(
            Struct(
                "DeviceConstraint",
                requests=STRINGS,
                matchAttribute=STRING,
                distinctAttribute=STRING,
            )
        ),
        config=ListOf(Struct("DeviceClaimConfiguration", requests=STRINGS, opaque=_OPAQUE)),
    ),
)
_RESULT = Struct(
    "DeviceRequestAllocationResult",
    request=STRING,
    driver=STRING,
    pool=STRING,
    device=STRING,
    adminAccess=BOOL,
    tolerations=ListOf(TOLERATION),
    bindingConditions=STRINGS,
    bindingFailureConditions=STRINGS,
    shareID=STRING,
    consumedCapacity=MapOf(QUANTITY_SHAPE),
)
_CONDITION = Struct(
    "Condition",
    type=STRING,
    status=STRING,
    observedGeneration=INT64,
    lastTransitionTime=TIME,
    reason=STRING,
    message=STRING,
)
CLAIM_STATUS = Struct(
    "ResourceClaimStatus",
    allocation=Struct(
        "AllocationResult",
        devices=Struct(
            "DeviceAllocationResult",
            results=ListOf(_RESULT),
            config=ListOf(
                Struct(
                    "DeviceAllocationConfiguration",
                    source=STRING,
                    requests=STRINGS,
                    opaque=_OPAQUE,
                )
            ),
        ),
        nodeSelector=NODE_SELECTOR,
        allocationTimestamp=TIME,
    ),
    reservedFor=ListOf(
        Struct(
            "ResourceClaimConsumerReference",
            apiGroup=STRING,
            resource=STRING,
            name=STRING,
            uid=STRING,
        )
    ),
    devices=ListOf(
        Struct(
            "AllocatedDeviceStatus",
            driver=STRING,
            pool=STRING,
            device=STRING,
            shareID=STRING,
            conditions=ListOf(_CONDITION),
            data=RAW,
            networkData=Struct(
                "NetworkDeviceData", interfaceName=STRING, ips=STRINGS, hardwareAddress=STRING
            ),
        )
    ),
)

# --- DeviceClass, ResourceClaimTemplate -------------------------------------------
CLASS_SPEC = Struct(
    "DeviceClassSpec",
    selectors=ListOf(_SELECTOR),
    config=ListOf(Struct("DeviceClassConfiguration", opaque=_OPAQUE)),
    extendedResourceName=STRING,
)
TEMPLATE_SPEC = Struct("ResourceClaimTemplateSpec", metadata=_OBJECT_META, spec=CLAIM_SPEC)


def decode_fields(obj: Mapping[str, Any], shapes: Mapping[str, Shape]) -> dict[str, Any]:
    """The object with `shapes`' top-level fields (spec, status) decoded; apiVersion,
    kind and metadata pass through (the generic code checks them); anything else at the
    top level is dropped as an unknown field."""
    out = {k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}
    for key, shape in shapes.items():
        if obj.get(key) is not None:
            out[key] = shape.decode(obj[key], key)
    return out
