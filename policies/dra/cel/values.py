"""CEL runtime values as Python objects.

int -> int, uint -> CelUint, double -> float, string -> str, bytes -> bytes, bool ->
bool, null -> None, list -> tuple, map -> dict, quantity -> fractions.Fraction,
semver -> env.Semver. Python's bool is an int and 1 == True, so
every comparison goes through `equal` (CEL's heterogeneous equality), and map keys
other than strings are stored as tagged tuples (`map_key`) so that `{1: "a", true:
"b"}` keeps two entries and 1, 1u and 1.0 find the same one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from policies.dra.cel.env import Semver


@dataclass(frozen=True, slots=True)
class CelUint:
    value: int

    def __str__(self) -> str:
        return str(self.value)


def type_name(value: object) -> str:
    kind = type(value)
    if kind is bool:
        return "bool"
    if kind is int:
        return "int"
    if kind is CelUint:
        return "uint"
    if kind is float:
        return "double"
    if kind is str:
        return "string"
    if kind is bytes:
        return "bytes"
    if value is None:
        return "null_type"
    if kind is tuple:
        return "list"
    if kind is dict or isinstance(value, Mapping):
        return "map"
    if kind is Fraction:
        return "kubernetes.Quantity"
    if kind is Semver:
        return "kubernetes.Semver"
    return kind.__name__


def _number(value: object) -> int | float | None:
    kind = type(value)
    if kind is int or kind is float:
        return value  # type: ignore[return-value]
    if kind is CelUint:
        return value.value  # type: ignore[attr-defined,no-any-return]
    return None


def equal(left: object, right: object) -> bool:
    """CEL `==`: values of different kinds are unequal, except numbers, which compare
    by value across int, uint and double (NaN equals nothing)."""
    left_kind, right_kind = type(left), type(right)
    if left_kind is right_kind:
        if left_kind is tuple:
            pairs = zip(left, right, strict=False)  # type: ignore[call-overload]
            return len(left) == len(right) and all(equal(a, b) for a, b in pairs)  # type: ignore[arg-type]
        if left_kind is dict:
            return _maps_equal(left, right)  # type: ignore[arg-type]
        return left == right
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return _maps_equal(left, right)
    left_number, right_number = _number(left), _number(right)
    if left_number is None or right_number is None:
        return False
    return left_number == right_number


def _maps_equal(left: Mapping[object, object], right: Mapping[object, object]) -> bool:
    if len(left) != len(right):
        return False
    for key, value in left.items():
        if key not in right or not equal(value, right[key]):
            return False
    return True


def map_key(value: object) -> object:
    """The dict key a CEL map key is stored under; ValueError if the kind may not be a
    map key (only int, uint, bool and string may)."""
    kind = type(value)
    if kind is str:
        return value
    if kind is bool:
        return ("bool", value)
    if kind is int:
        return ("num", value)
    if kind is CelUint:
        return ("num", value.value)  # type: ignore[attr-defined]
    raise ValueError(f"unsupported key type: {type_name(value)}")


def lookup_key(value: object) -> object | None:
    """The dict key to look a value up by (a double finds the equal integer key);
    None where no key can match."""
    if type(value) is float:
        if math.isfinite(value) and value == int(value):
            return ("num", int(value))
        return None
    try:
        return map_key(value)
    except ValueError:
        return None


def key_value(stored: object) -> object:
    """The CEL value of a stored dict key (inverse of map_key)."""
    if type(stored) is tuple:
        _tag, raw = stored
        return raw  # int keys come back as int: uint-ness of a key is not kept
    return stored
