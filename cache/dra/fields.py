"""Reading the fields of resource.k8s.io/v1 objects: bounded, typed, never trusting.

Every reader raises ValueError (or another of jsonobj.MALFORMED) with the field's name
when a value is not what the API server would have stored; the record parsers turn that
into a problem on the record. The bounds are the API server's own validation limits
(k8s.io/api/resource/v1 types.go), so a real object always passes; anything beyond
them is hostile or broken and is refused before it is iterated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, NamedTuple

from cache.jsonobj import mapping
from cache.limits import shown
from cache.quantity import QuantityError, parse_quantity
from cache.terms import Requirement, SelectorTerm, parse_required_affinity

# --- bounds (resource.k8s.io/v1 validation) ----------------------------------------------
MAX_DEVICES_PER_SLICE = 128  # ResourceSliceMaxDevices
MAX_ATTRIBUTES_AND_CAPACITIES = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
MAX_TAINTS = 16  # DeviceTaintsMaxLength
MAX_COUNTER_SETS = 8  # ResourceSliceMaxCounterSets
MAX_ATTRIBUTE_TEXT = 64  # DeviceAttributeMaxValueLength
MAX_REQUESTS = 32  # DeviceRequestsMaxSize
MAX_CONSTRAINTS = 32  # DeviceConstraintsMaxSize
MAX_CONFIG = 32  # DeviceConfigMaxSize
MAX_SELECTORS = 32  # DeviceSelectorsMaxSize
MAX_SUBREQUESTS = 8  # FirstAvailableDeviceRequestMaxSize
MAX_TOLERATIONS = 16  # DeviceTolerationsMaxLength
MAX_RESERVED_FOR = 256  # ResourceClaimReservedForMaxSize
MAX_RESULTS = 32  # AllocationResultsMaxSize: devices in one claim's allocation
MAX_CEL_TEXT = 10 * 1024  # CELSelectorExpressionMaxLength
MAX_OPAQUE_TEXT = 10 * 1024  # OpaqueParametersMaxLength
# Names (device, pool, driver, request, class, node): DNS subdomains at most; a longer
# one is not a name the API server stores.
MAX_NAME = 253
# Node selector requirements in one slice or device selector: the API sets no number;
# each is matched per node a slice is read for, so far more than any driver writes is
# refused.
MAX_NODE_REQUIREMENTS = 64
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

TAINT_EFFECTS = frozenset({"None", "NoSchedule", "NoExecute"})
# Taint effects that keep a device from being allocated (allocator: taintPreventsAllocation).
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def text(value: object, what: str, limit: int = MAX_NAME, required: bool = False) -> str:
    """A string field: "" when absent; refused when not a string or too long."""
    if value is None or value == "":
        if required:
            raise ValueError(f"{what} is required")
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    if len(value) > limit:
        raise ValueError(f"{what} is longer than {limit} characters")
    return value


def flag(value: object, what: str) -> bool | None:
    """An optional boolean (*bool): None when absent."""
    if value is None:
        return None
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be a boolean, not {shown(value)}")
    return value


def int64(value: object, what: str, low: int = INT64_MIN) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, not {shown(value)}")
    if not low <= value <= INT64_MAX:
        raise ValueError(f"{what} {shown(value)} is out of range")
    return value


def items(value: object, what: str, limit: int) -> list[Any]:
    """A list field: [] when absent; refused when not a list or longer than `limit`
    (checked before a single element is read)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list, not {type(value).__name__}")
    if len(value) > limit:
        raise ValueError(f"{what} has {len(value)} entries, more than {limit}")
    return value


def entries(value: object, what: str, limit: int) -> Mapping[str, Any]:
    """A map field: {} when absent; refused when not a map or larger than `limit`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a map, not {type(value).__name__}")
    if len(value) > limit:
        raise ValueError(f"{what} has {len(value)} entries, more than {limit}")
    return value


def qualified(name: object, driver: str, what: str) -> str:
    """An attribute or capacity name, fully qualified: a bare identifier belongs to the
    driver's domain, as the API documents it ("model" of gpu.example.com is
    "gpu.example.com/model")."""
    key = text(name, what, limit=MAX_NAME + 1 + 32, required=True)
    domain, slash, ident = key.partition("/")
    if not slash:
        return f"{driver}/{key}"
    if not domain or not ident or "/" in ident:
        raise ValueError(f"{what} {shown(key)} is not a qualified name")
    return key


def split_qualified(name: str) -> tuple[str, str]:
    """("domain", "id") of a fully qualified name."""
    domain, _, ident = name.partition("/")
    return domain, ident


# --- attributes -----------------------------------------------------------------------------
class Attribute(NamedTuple):
    """A typed attribute value: `kind` is "int", "bool", "string" or "version" (a
    semantic version, kept as its text). Equality compares kind and value, as the
    allocator's constraints compare them (an int 1 never equals a bool true)."""

    kind: str
    value: int | bool | str


_SCALAR_KINDS = {"int": "int", "bool": "bool", "string": "string", "version": "version"}
_LIST_KINDS = ("ints", "bools", "strings", "versions")


def attribute(raw: object, what: str) -> Attribute:
    """One DeviceAttribute: exactly one of int, bool, string, version. The list forms
    (ints, bools, strings, versions: DRAListTypeAttributes, alpha in 1.36 and off by
    default) are refused by name."""
    body = mapping(raw)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what} must be a map, not {type(raw).__name__}")
    listed = [kind for kind in _LIST_KINDS if body.get(kind) is not None]
    if listed:
        raise ValueError(
            f"{what}.{listed[0]}: list-type attributes (DRAListTypeAttributes, alpha) "
            "are not supported"
        )
    present = [kind for kind in _SCALAR_KINDS if body.get(kind) is not None]
    if len(present) != 1:
        raise ValueError(f"{what} must have exactly one of int, bool, string, version")
    kind = present[0]
    value = body[kind]
    if kind == "int":
        return Attribute("int", int64(value, f"{what}.int"))
    if kind == "bool":
        checked = flag(value, f"{what}.bool")
        return Attribute("bool", bool(checked))
    if kind == "version":
        return Attribute("version", semver_text(value, f"{what}.version"))
    return Attribute("string", text(value, f"{what}.string", limit=MAX_ATTRIBUTE_TEXT))


def semver_text(value: object, what: str) -> str:
    """A semantic version 2.0.0 string (what API validation accepts), kept as text."""
    raw = text(value, what, limit=MAX_ATTRIBUTE_TEXT, required=True)
    core, _, _ = raw.partition("+")
    core, _, _ = core.partition("-")
    parts = core.split(".")
    if len(parts) != 3 or not all(
        part.isascii() and part.isdigit() and (part == "0" or not part.startswith("0"))
        for part in parts
    ):
        raise ValueError(f"{what} {shown(raw)} is not a semantic version")
    return raw


# --- taints and tolerations ----------------------------------------------------------------
class DeviceTaint(NamedTuple):
    key: str
    value: str
    effect: str


class DeviceToleration(NamedTuple):
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" tolerates every effect
    seconds: int | None  # tolerationSeconds, passed through to the result

    def tolerates(self, taint: DeviceTaint) -> bool:
        """resourceclaim.ToleratesTaint."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value

    def to_api(self) -> dict[str, Any]:
        body: dict[str, Any] = {"operator": self.operator}
        if self.key:
            body["key"] = self.key
        if self.value:
            body["value"] = self.value
        if self.effect:
            body["effect"] = self.effect
        if self.seconds is not None:
            body["tolerationSeconds"] = self.seconds
        return body


def taints(raw: object, what: str) -> tuple[DeviceTaint, ...]:
    result = []
    for index, item in enumerate(items(raw, what, MAX_TAINTS)):
        body = mapping(item)
        effect = text(body.get("effect"), f"{what}[{index}].effect", required=True)
        if effect not in TAINT_EFFECTS:
            raise ValueError(f"{what}[{index}].effect {shown(effect)} is not a taint effect")
        result.append(
            DeviceTaint(
                text(body.get("key"), f"{what}[{index}].key", required=True),
                text(body.get("value"), f"{what}[{index}].value"),
                effect,
            )
        )
    return tuple(result)


def tolerations(raw: object, what: str) -> tuple[DeviceToleration, ...]:
    result = []
    for index, item in enumerate(items(raw, what, MAX_TOLERATIONS)):
        body = mapping(item)
        where = f"{what}[{index}]"
        operator = text(body.get("operator"), f"{where}.operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise ValueError(f"{where}.operator {shown(operator)} is neither Equal nor Exists")
        effect = text(body.get("effect"), f"{where}.effect")
        if effect and effect not in TAINT_EFFECTS:
            raise ValueError(f"{where}.effect {shown(effect)} is not a taint effect")
        seconds = body.get("tolerationSeconds")
        result.append(
            DeviceToleration(
                text(body.get("key"), f"{where}.key"),
                operator,
                text(body.get("value"), f"{where}.value"),
                effect,
                None if seconds is None else int64(seconds, f"{where}.tolerationSeconds"),
            )
        )
    return tuple(result)


# --- node selectors ------------------------------------------------------------------------
def node_selector(raw: object, what: str) -> tuple[SelectorTerm, ...]:
    """A core/v1 NodeSelector (terms ORed, requirements ANDed), bounded."""
    body = mapping(raw)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what} must be a map, not {type(raw).__name__}")
    terms = items(body.get("nodeSelectorTerms"), f"{what}.nodeSelectorTerms", 8)
    size = 0
    for term in terms:
        term = mapping(term)
        for part in ("matchExpressions", "matchFields"):
            size += len(items(term.get(part), f"{what}.{part}", MAX_NODE_REQUIREMENTS))
            for req in term.get(part) or ():
                items(mapping(req).get("values"), f"{what}.{part}.values", MAX_NODE_REQUIREMENTS)
    if size > MAX_NODE_REQUIREMENTS:
        raise ValueError(f"{what} has more than {MAX_NODE_REQUIREMENTS} requirements")
    parsed = parse_required_affinity(
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": dict(body)}}
    )
    return parsed or ()


def selector_to_api(terms: tuple[SelectorTerm, ...]) -> dict[str, Any]:
    """A NodeSelector in the API's JSON form."""
    out = []
    for term in terms:
        expressions = [_requirement_to_api(r) for r in term if not r.field]
        fields = [_requirement_to_api(r) for r in term if r.field]
        entry: dict[str, Any] = {}
        if expressions:
            entry["matchExpressions"] = expressions
        if fields:
            entry["matchFields"] = fields
        out.append(entry)
    return {"nodeSelectorTerms": out}


def _requirement_to_api(req: Requirement) -> dict[str, Any]:
    body: dict[str, Any] = {"key": req.key, "operator": req.operator}
    if req.values:
        body["values"] = list(req.values)
    return body


# --- opaque configuration --------------------------------------------------------------------
class OpaqueConfig(NamedTuple):
    """DeviceConfiguration.opaque: driver and parameters, the parameters kept as their
    canonical JSON text (bounded by OpaqueParametersMaxLength), passed through to the
    allocation result untouched."""

    driver: str
    parameters: str

    def to_api(self) -> dict[str, Any]:
        return {"opaque": {"driver": self.driver, "parameters": json.loads(self.parameters)}}


def opaque_config(raw: object, what: str) -> OpaqueConfig:
    body = mapping(raw)
    opaque = body.get("opaque")
    if opaque is None:
        # A future kind of configuration: unknown, so refused rather than dropped.
        unknown = sorted(str(key) for key in body if key not in ("requests",))
        raise ValueError(f"{what}: only opaque configuration is supported (has {shown(unknown)})")
    opaque = mapping(opaque)
    driver = text(opaque.get("driver"), f"{what}.opaque.driver", required=True)
    try:
        encoded = json.dumps(opaque.get("parameters"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as error:
        raise ValueError(f"{what}.opaque.parameters are not JSON: {error}") from None
    if len(encoded) > MAX_OPAQUE_TEXT:
        raise ValueError(f"{what}.opaque.parameters are longer than {MAX_OPAQUE_TEXT} bytes")
    return OpaqueConfig(driver, encoded)


# --- consumable capacity and counters (KEP-5075, KEP-4815) ---------------------------------
MAX_COUNTERS = 32  # ResourceSliceMaxCountersPerCounterSet, ...PerDeviceCounterConsumption
MAX_COUNTER_CONSUMPTIONS = 2  # ResourceSliceMaxDeviceCounterConsumptionsPerDevice
MAX_POLICY_VALUES = 10  # CapacityRequestPolicyDiscreteMaxOptions


class RequestPolicy(NamedTuple):
    """A device capacity's requestPolicy: how much one share consumes. `valid_values`
    ascending (the API server refuses them unsorted); `minimum` set when validRange is."""

    default: Fraction | None = None
    valid_values: tuple[Fraction, ...] = ()
    minimum: Fraction | None = None
    maximum: Fraction | None = None
    step: Fraction | None = None


class CounterSet(NamedTuple):
    """A sharedCounters entry, or a device's consumption of one (consumesCounters)."""

    name: str
    counters: Mapping[str, Fraction]


def quantity(value: object, what: str) -> Fraction:
    try:
        return parse_quantity(value)
    except QuantityError as error:
        raise ValueError(f"{what}: {error}") from None


def request_policy(raw: object, what: str) -> RequestPolicy | None:
    """A capacity's requestPolicy, None when absent. Shapes the API server refuses
    (validValues and validRange together, unsorted values, a range without min, a step
    that is not positive) raise, so the device is never shared under a policy read
    wrongly."""
    if raw is None:
        return None
    body = mapping(raw)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what} must be a map, not {type(raw).__name__}")
    default = None if body.get("default") is None else quantity(body["default"], f"{what}.default")
    raw_values = items(body.get("validValues"), f"{what}.validValues", MAX_POLICY_VALUES)
    values = tuple(quantity(v, f"{what}.validValues[{i}]") for i, v in enumerate(raw_values))
    if list(values) != sorted(values):
        raise ValueError(f"{what}.validValues must be sorted in ascending order")
    valid_range = body.get("validRange")
    if values and valid_range is not None:
        raise ValueError(f"{what} sets both validValues and validRange")
    if valid_range is None:
        return RequestPolicy(default, values)
    span = mapping(valid_range)
    if span.get("min") is None:
        raise ValueError(f"{what}.validRange.min is required")
    low = quantity(span["min"], f"{what}.validRange.min")
    high = None if span.get("max") is None else quantity(span["max"], f"{what}.validRange.max")
    step = None if span.get("step") is None else quantity(span["step"], f"{what}.validRange.step")
    if step is not None and math.ceil(step) <= 0:
        # The allocator divides by the step's integer value.
        raise ValueError(f"{what}.validRange.step must be positive")
    return RequestPolicy(default, (), low, high, step)


def counter_sets(raw: object, what: str, limit: int) -> tuple[CounterSet, ...]:
    """sharedCounters (`name`) or consumesCounters (`counterSet`): each set's counters as
    exact quantities (any quantity, negative included, is valid to the API server)."""
    key = "name" if what.endswith("sharedCounters") else "counterSet"
    found: list[CounterSet] = []
    for index, item in enumerate(items(raw, what, limit)):
        body = mapping(item)
        where = f"{what}[{index}]"
        name = text(body.get(key), f"{where}.{key}", limit=63, required=True)
        counters = entries(body.get("counters"), f"{where}.counters", MAX_COUNTERS)
        if not counters:
            raise ValueError(f"{where}.counters is required")
        found.append(
            CounterSet(
                name,
                {
                    text(counter, f"{where}.counters key", limit=63, required=True): quantity(
                        mapping(value).get("value"), f"{where}.counters[{counter}].value"
                    )
                    for counter, value in counters.items()
                },
            )
        )
    if len({s.name for s in found}) != len(found):
        raise ValueError(f"{what} names a counter set twice")
    return tuple(found)


def format_quantity(value: Fraction) -> str:
    """A quantity as the API accepts it: an integer plainly, else in thousandths,
    millionths or billionths (rounded up to a billionth, Kubernetes' finest unit)."""
    for suffix, scale in (("", 1), ("m", 10**3), ("u", 10**6)):
        scaled = value * scale
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    return f"{math.ceil(value * 10**9)}n"
