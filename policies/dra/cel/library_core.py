"""The standard definitions of cel-spec (langdef "Standard Definitions") that the DRA
environment reaches: arithmetic with int64/uint64 overflow errors, comparison (with
Kubernetes' cross-type numeric comparisons), `in`, indexing, size and the type
conversions."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from policies.dra.cel import cost
from policies.dra.cel import types as t
from policies.dra.cel.cost import Meter
from policies.dra.cel.errors import CelEvaluationError
from policies.dra.cel.library import Impl, declare, global_and_member
from policies.dra.cel.values import CelUint, equal, lookup_key

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1


def checked_int(value: int) -> int:
    if value < INT64_MIN or value > INT64_MAX:
        raise CelEvaluationError("integer overflow")
    return value


def checked_uint(value: int) -> CelUint:
    if value < 0 or value > UINT64_MAX:
        raise CelEvaluationError("unsigned integer overflow")
    return CelUint(value)


def _truncated_div(a: int, b: int) -> int:
    # Go divides toward zero; Python's // floors.
    quotient = abs(a) // abs(b)
    return quotient if (a < 0) == (b < 0) else -quotient


def _int_div(_: Meter, a: int, b: int) -> int:
    if b == 0:
        raise CelEvaluationError("division by zero")
    return checked_int(_truncated_div(a, b))


def _int_mod(_: Meter, a: int, b: int) -> int:
    if b == 0:
        raise CelEvaluationError("modulus by zero")
    return a - _truncated_div(a, b) * b


def _uint_div(_: Meter, a: CelUint, b: CelUint) -> CelUint:
    if b.value == 0:
        raise CelEvaluationError("division by zero")
    return CelUint(a.value // b.value)


def _uint_mod(_: Meter, a: CelUint, b: CelUint) -> CelUint:
    if b.value == 0:
        raise CelEvaluationError("modulus by zero")
    return CelUint(a.value % b.value)


def _double_div(_: Meter, a: float, b: float) -> float:
    if b == 0.0:
        if math.isnan(a) or a == 0.0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _double_op(operation: str) -> Impl:
    def run(_: Meter, a: float, b: float) -> float:
        try:
            if operation == "+":
                return a + b
            if operation == "-":
                return a - b
            return a * b
        except OverflowError:  # pragma: no cover - float ops give inf, not errors
            raise CelEvaluationError("floating point overflow") from None

    return run


def _concat_strings(meter: Meter, a: str, b: str) -> str:
    meter.charge(cost.traversal(len(a) + len(b)))
    return a + b


def _concat_bytes(meter: Meter, a: bytes, b: bytes) -> bytes:
    meter.charge(cost.traversal(len(a) + len(b)))
    return a + b


def _concat_lists(meter: Meter, a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    meter.charge(cost.traversal(len(a) + len(b)))
    return a + b


def _declare_arithmetic() -> None:
    declare("_+_", (t.INT, t.INT), t.INT, lambda m, a, b: checked_int(a + b), member=False)
    declare("_-_", (t.INT, t.INT), t.INT, lambda m, a, b: checked_int(a - b), member=False)
    declare("_*_", (t.INT, t.INT), t.INT, lambda m, a, b: checked_int(a * b), member=False)
    declare("_/_", (t.INT, t.INT), t.INT, _int_div, member=False)
    declare("_%_", (t.INT, t.INT), t.INT, _int_mod, member=False)
    declare(
        "_+_",
        (t.UINT, t.UINT),
        t.UINT,
        lambda m, a, b: checked_uint(a.value + b.value),
        member=False,
    )
    declare(
        "_-_",
        (t.UINT, t.UINT),
        t.UINT,
        lambda m, a, b: checked_uint(a.value - b.value),
        member=False,
    )
    declare(
        "_*_",
        (t.UINT, t.UINT),
        t.UINT,
        lambda m, a, b: checked_uint(a.value * b.value),
        member=False,
    )
    declare("_/_", (t.UINT, t.UINT), t.UINT, _uint_div, member=False)
    declare("_%_", (t.UINT, t.UINT), t.UINT, _uint_mod, member=False)
    for symbol in "+-*":
        declare(f"_{symbol}_", (t.DOUBLE, t.DOUBLE), t.DOUBLE, _double_op(symbol), member=False)
    declare("_/_", (t.DOUBLE, t.DOUBLE), t.DOUBLE, _double_div, member=False)
    declare("_+_", (t.STRING, t.STRING), t.STRING, _concat_strings, member=False)
    declare("_+_", (t.BYTES, t.BYTES), t.BYTES, _concat_bytes, member=False)
    list_a = t.list_of(t.A)
    declare("_+_", (list_a, list_a), list_a, _concat_lists, member=False)
    declare("-_", (t.INT,), t.INT, lambda m, a: checked_int(-a), member=False)
    declare("-_", (t.DOUBLE,), t.DOUBLE, lambda m, a: -a, member=False)
    declare("!_", (t.BOOL,), t.BOOL, lambda m, a: not a, member=False)


def _numeric(value: Any) -> int | float:
    return value.value if type(value) is CelUint else value


def _compare(meter: Meter, a: Any, b: Any) -> int:
    if type(a) is str:
        meter.charge(cost.traversal(min(len(a), len(b))))
    left, right = _numeric(a), _numeric(b)
    if left < right:
        return -1
    if left > right:
        return 1
    return 0


def _ordering(test: str) -> Impl:
    def run(meter: Meter, a: Any, b: Any) -> bool:
        if (type(a) is float and math.isnan(a)) or (type(b) is float and math.isnan(b)):
            return False
        order = _compare(meter, a, b)
        if test == "<":
            return order < 0
        if test == "<=":
            return order <= 0
        if test == ">":
            return order > 0
        return order >= 0

    return run


def _declare_comparisons() -> None:
    for symbol in ("<", "<=", ">", ">="):
        run = _ordering(symbol)
        for same in (t.STRING, t.BYTES, t.BOOL):
            declare(f"_{symbol}_", (same, same), t.BOOL, run, member=False)
        # CrossTypeNumericComparisons (Kubernetes 1.28+): 1 < 2.5, 1u < 2.
        for left in t.NUMBERS:
            for right in t.NUMBERS:
                declare(f"_{symbol}_", (left, right), t.BOOL, run, member=False)
    declare("_==_", (t.A, t.A), t.BOOL, lambda m, a, b: _equal(m, a, b), member=False)
    declare("_!=_", (t.A, t.A), t.BOOL, lambda m, a, b: not _equal(m, a, b), member=False)


def _equal(meter: Meter, a: Any, b: Any) -> bool:
    if type(a) is str and type(b) is str:
        meter.charge(cost.traversal(min(len(a), len(b))))
    elif type(a) is tuple or isinstance(a, Mapping):
        meter.charge(cost.traversal(len(a)))
    return equal(a, b)


def _in_list(meter: Meter, value: Any, items: tuple[Any, ...]) -> bool:
    meter.charge(len(items))
    return any(equal(value, item) for item in items)


def _in_map(meter: Meter, value: Any, mapping: Mapping[object, object]) -> bool:
    if type(value) is str:
        return value in mapping
    key = lookup_key(value)
    return key is not None and key in mapping


def index_list(items: tuple[Any, ...], index: Any) -> object:
    kind = type(index)
    if kind is int:
        position = index
    elif kind is CelUint:
        position = index.value
    elif kind is float and math.isfinite(index) and index == int(index):
        position = int(index)
    else:
        raise CelEvaluationError(f"unsupported index value: {index!r}"[:120])
    if not 0 <= position < len(items):
        raise CelEvaluationError(f"index out of range: {position}")
    return items[position]


def index_map(mapping: Mapping[object, object], key: Any) -> object:
    found = mapping.get(key) if type(key) is str else None
    if found is None:
        stored = key if type(key) is str else lookup_key(key)
        if stored is None or stored not in mapping:
            raise CelEvaluationError(f"no such key: {_shown_key(key)}")
        found = mapping[stored]
    return found


def _shown_key(key: Any) -> str:
    text = key if type(key) is str else repr(key)
    return text[:80]


def _declare_collections() -> None:
    list_a = t.list_of(t.A)
    map_ab = t.map_of(t.A, t.B)
    declare("@in", (t.A, list_a), t.BOOL, _in_list, member=False)
    declare("@in", (t.A, map_ab), t.BOOL, _in_map, member=False)
    declare("_[_]", (list_a, t.INT), t.A, lambda m, a, i: index_list(a, i), member=False)
    declare("_[_]", (list_a, t.UINT), t.A, lambda m, a, i: index_list(a, i), member=False)
    declare("_[_]", (list_a, t.DOUBLE), t.A, lambda m, a, i: index_list(a, i), member=False)
    declare("_[_]", (map_ab, t.A), t.B, lambda m, a, k: index_map(a, k), member=False)
    for sized in (t.STRING, t.BYTES, list_a, map_ab):
        global_and_member("size", (sized,), t.INT, lambda m, a: len(a))


_INT_TEXT = re.compile(r"[+-]?[0-9]{1,19}")
_UINT_TEXT = re.compile(r"\+?[0-9]{1,20}")
_DOUBLE_TEXT = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?|[iI][nN][fF](?:inity)?|[nN]a[nN])"
)


def _to_int(_: Meter, value: Any) -> Any:
    kind = type(value)
    if kind is int:
        return value
    if kind is CelUint:
        return checked_int(value.value)
    if kind is float:
        if not math.isfinite(value) or not (-(2.0**63) < value < 2.0**63):
            raise CelEvaluationError("double out of int64 range")
        return int(value)
    if kind is str and _INT_TEXT.fullmatch(value):
        return checked_int(int(value))
    raise CelEvaluationError(f"cannot convert {str(value)[:40]!r} to int")


def _to_uint(_: Meter, value: Any) -> Any:
    kind = type(value)
    if kind is CelUint:
        return value
    if kind is int:
        return checked_uint(value)
    if kind is float:
        if not math.isfinite(value) or not (-1.0 < value < 2.0**64):
            raise CelEvaluationError("double out of uint64 range")
        return CelUint(int(value))
    if kind is str and _UINT_TEXT.fullmatch(value):
        return checked_uint(int(value))
    raise CelEvaluationError(f"cannot convert {str(value)[:40]!r} to uint")


def _to_double(_: Meter, value: Any) -> Any:
    kind = type(value)
    if kind is float:
        return value
    if kind is int or kind is CelUint:
        return float(_numeric(value))
    if kind is str and len(value) <= 64 and _DOUBLE_TEXT.fullmatch(value):
        return float(value)
    raise CelEvaluationError(f"cannot convert {str(value)[:40]!r} to double")


def _format_double(value: float) -> str:
    # strconv.FormatFloat(v, 'g', -1, 64) for the common cases.
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def _to_string(meter: Meter, value: Any) -> Any:
    kind = type(value)
    if kind is str:
        return value
    if kind is bool:
        return "true" if value else "false"
    if kind is int or kind is CelUint:
        return str(_numeric(value))
    if kind is float:
        return _format_double(value)
    if kind is bytes:
        meter.charge(cost.traversal(len(value)))
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise CelEvaluationError("invalid UTF-8 in bytes, cannot convert to string") from None
    raise CelEvaluationError("cannot convert to string")


def _to_bool(_: Meter, value: Any) -> bool:
    if type(value) is bool:
        return value
    text = {
        "1": True,
        "t": True,
        "true": True,
        "TRUE": True,
        "True": True,
        "T": True,
        "0": False,
        "f": False,
        "false": False,
        "FALSE": False,
        "False": False,
        "F": False,
    }
    if type(value) is str and value in text:
        return text[value]
    raise CelEvaluationError(f"cannot convert {str(value)[:40]!r} to bool")


def _declare_conversions() -> None:
    for source in (t.INT, t.UINT, t.DOUBLE, t.STRING):
        declare("int", (source,), t.INT, _to_int, member=False)
        declare("uint", (source,), t.UINT, _to_uint, member=False)
        declare("double", (source,), t.DOUBLE, _to_double, member=False)
    for source in (t.INT, t.UINT, t.DOUBLE, t.STRING, t.BYTES, t.BOOL):
        declare("string", (source,), t.STRING, _to_string, member=False)
    declare("bytes", (t.STRING,), t.BYTES, lambda m, s: s.encode("utf-8"), member=False)
    declare("bytes", (t.BYTES,), t.BYTES, lambda m, b: b, member=False)
    declare("bool", (t.BOOL,), t.BOOL, _to_bool, member=False)
    declare("bool", (t.STRING,), t.BOOL, _to_bool, member=False)
    declare("dyn", (t.A,), t.DYN, lambda m, a: a, member=False)


_declare_arithmetic()
_declare_comparisons()
_declare_collections()
_declare_conversions()
