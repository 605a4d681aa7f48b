"""Kubernetes' CEL libraries (k8s.io/apiserver/pkg/cel/library) that the DRA
environment enables and a selector can reach: quantity, semver (version 1: with the
normalizing second argument), lists (isSorted, sum, min, max, indexOf, lastIndexOf);
and cel-go's ext.Sets and ext.Lists version 3 (lists.range, slice, flatten, distinct,
reverse, sort)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

from cache.quantity import QuantityError, parse_quantity
from policies.dra.cel import cost
from policies.dra.cel import types as t
from policies.dra.cel.cost import Meter
from policies.dra.cel.env import Semver, parse_semver
from policies.dra.cel.errors import CelEvaluationError
from policies.dra.cel.library import Impl, declare
from policies.dra.cel.library_core import INT64_MAX, INT64_MIN, checked_int
from policies.dra.cel.values import CelUint, equal, type_name

Q, V, S, N, B, D = t.QUANTITY, t.SEMVER, t.STRING, t.INT, t.BOOL, t.DOUBLE
LIST_A = t.list_of(t.A)


# -- quantity -------------------------------------------------------------------------
def _quantity(meter: Meter, text: str) -> Fraction:
    meter.charge(cost.traversal(len(text)))
    try:
        return parse_quantity(text)
    except QuantityError as error:
        raise CelEvaluationError(f"quantity(): {error}") from None


def _is_quantity(meter: Meter, text: str) -> bool:
    meter.charge(cost.traversal(len(text)))
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _as_quantity(value: Fraction | int) -> Fraction:
    return value if type(value) is Fraction else Fraction(value)


def _quantity_bounded(value: Fraction) -> Fraction:
    # resource.Quantity holds int64 in its scale: results beyond are an overflow.
    if abs(value) > INT64_MAX:
        raise CelEvaluationError("quantity overflow")
    return value


def _as_integer(_: Meter, value: Fraction) -> int:
    if value.denominator != 1 or not INT64_MIN <= value.numerator <= INT64_MAX:
        raise CelEvaluationError("cannot convert value to integer")
    return value.numerator


def _declare_quantity() -> None:
    declare("quantity", (S,), Q, _quantity, member=False)
    declare("isQuantity", (S,), B, _is_quantity, member=False)
    declare("sign", (Q,), N, lambda m, q: (q > 0) - (q < 0), member=True)
    declare("isGreaterThan", (Q, Q), B, lambda m, a, b: a > b, member=True)
    declare("isLessThan", (Q, Q), B, lambda m, a, b: a < b, member=True)
    declare("compareTo", (Q, Q), N, lambda m, a, b: (a > b) - (a < b), member=True)
    for other in (Q, N):
        declare(
            "add",
            (Q, other),
            Q,
            lambda m, a, b: _quantity_bounded(a + _as_quantity(b)),
            member=True,
        )
        declare(
            "sub",
            (Q, other),
            Q,
            lambda m, a, b: _quantity_bounded(a - _as_quantity(b)),
            member=True,
        )
    declare("asInteger", (Q,), N, _as_integer, member=True)
    declare(
        "isInteger", (Q,), B, lambda m, q: q.denominator == 1 and abs(q) <= INT64_MAX, member=True
    )
    declare("asApproximateFloat", (Q,), D, lambda m, q: float(q), member=True)


# -- semver ---------------------------------------------------------------------------
def _normalized(text: str) -> Semver:
    # library/semverlib.go normalizeAndParse: drop a "v", leading zeros, and fill in a
    # missing minor or patch.
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            if not stripped or not stripped[0].isdigit() or not stripped[0].isascii():
                stripped = "0" + stripped
            parts[index] = stripped
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))


def _semver(meter: Meter, text: str, normalize: bool = False) -> Semver:
    meter.charge(cost.traversal(len(text)))
    try:
        return _normalized(text) if normalize else parse_semver(text)
    except ValueError as error:
        raise CelEvaluationError(f"could not parse semver {text[:60]!r}: {error}") from None


def _is_semver(meter: Meter, text: str, normalize: bool = False) -> bool:
    try:
        _semver(meter, text, normalize)
    except CelEvaluationError:
        return False
    return True


def _declare_semver() -> None:
    declare("semver", (S,), V, _semver, member=False)
    declare("semver", (S, B), V, _semver, member=False)
    declare("isSemver", (S,), B, _is_semver, member=False)
    declare("isSemver", (S, B), B, _is_semver, member=False)
    declare("isGreaterThan", (V, V), B, lambda m, a, b: a.compare(b) > 0, member=True)
    declare("isLessThan", (V, V), B, lambda m, a, b: a.compare(b) < 0, member=True)
    declare("compareTo", (V, V), N, lambda m, a, b: a.compare(b), member=True)
    declare("major", (V,), N, lambda m, v: checked_int(v.major), member=True)
    declare("minor", (V,), N, lambda m, v: checked_int(v.minor), member=True)
    declare("patch", (V,), N, lambda m, v: checked_int(v.patch), member=True)


# -- lists ----------------------------------------------------------------------------
_ORDERED = (int, float, CelUint, str, bytes, bool)


def _sort_key(value: Any) -> object:
    return value.value if type(value) is CelUint else value


def _ordered(items: tuple[Any, ...], function: str) -> list[Any]:
    kinds = {type(item) for item in items}
    numeric = kinds <= {int, float, CelUint}
    if kinds and not (numeric or (len(kinds) == 1 and kinds <= set(_ORDERED))):
        shown = ", ".join(sorted(type_name(item) for item in items[:3]))
        raise CelEvaluationError(f"{function}: list elements are not comparable ({shown})")
    if any(type(item) is float and math.isnan(item) for item in items):
        raise CelEvaluationError(f"{function}: list holds NaN")
    return [_sort_key(item) for item in items]


def _is_sorted(meter: Meter, items: tuple[Any, ...]) -> bool:
    meter.charge(len(items))
    keys = _ordered(items, "isSorted")
    return all(a <= b for a, b in itertools.pairwise(keys))


def _sum(meter: Meter, items: tuple[Any, ...]) -> object:
    meter.charge(len(items))
    kinds = {type(item) for item in items}
    if not items:
        return 0
    if kinds == {int}:
        return checked_int(sum(items))
    if kinds == {float}:
        return math.fsum(items)
    if kinds == {CelUint}:
        total = sum(item.value for item in items)
        if total > 2**64 - 1:
            raise CelEvaluationError("unsigned integer overflow")
        return CelUint(total)
    raise CelEvaluationError("sum: list elements are not numbers of one type")


def _extreme(largest: bool) -> Impl:
    def run(meter: Meter, items: tuple[Any, ...]) -> object:
        meter.charge(len(items))
        if not items:
            raise CelEvaluationError(f"{'max' if largest else 'min'} called on empty list")
        keys = _ordered(items, "max" if largest else "min")
        best = 0
        for index in range(1, len(items)):
            better = keys[index] > keys[best] if largest else keys[index] < keys[best]
            if better:
                best = index
        return items[best]

    return run


def _index_of(meter: Meter, items: tuple[Any, ...], wanted: Any) -> int:
    meter.charge(len(items))
    return next((i for i, item in enumerate(items) if equal(item, wanted)), -1)


def _last_index_of(meter: Meter, items: tuple[Any, ...], wanted: Any) -> int:
    meter.charge(len(items))
    for index in range(len(items) - 1, -1, -1):
        if equal(items[index], wanted):
            return index
    return -1


def _contains_all(meter: Meter, items: tuple[Any, ...], wanted: tuple[Any, ...]) -> bool:
    meter.charge(len(items) * len(wanted) + 1)
    return all(any(equal(a, b) for a in items) for b in wanted)


def _intersects(meter: Meter, items: tuple[Any, ...], other: tuple[Any, ...]) -> bool:
    meter.charge(len(items) * len(other) + 1)
    return any(any(equal(a, b) for a in items) for b in other)


def _range(meter: Meter, count: int) -> tuple[Any, ...]:
    meter.charge(cost.LIST_CREATE_COST + max(count, 0))
    return tuple(range(max(count, 0)))


def _slice(meter: Meter, items: tuple[Any, ...], start: int, end: int) -> tuple[Any, ...]:
    meter.charge(1 + max(end - start, 0))
    if start < 0 or end < 0:
        raise CelEvaluationError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise CelEvaluationError(
            f"cannot slice({start}, {end}), start index must be less than or equal to end index"
        )
    if end > len(items):
        raise CelEvaluationError(f"cannot slice({start}, {end}), list is length {len(items)}")
    return items[start:end]


def _flatten(meter: Meter, items: tuple[Any, ...], depth: int = 1) -> tuple[Any, ...]:
    if depth < 0:
        raise CelEvaluationError("level must be non-negative")
    current = items
    for _ in range(min(depth, 100)):
        meter.charge(1 + len(current))
        flat: list[Any] = []
        for item in current:
            if type(item) is tuple:
                meter.charge(len(item))
                flat.extend(item)
            else:
                flat.append(item)
        if len(flat) == len(current) and not any(type(i) is tuple for i in current):
            break
        current = tuple(flat)
    return current


def _distinct(meter: Meter, items: tuple[Any, ...]) -> tuple[Any, ...]:
    meter.charge(len(items) * len(items) + 1)
    kept: list[Any] = []
    for item in items:
        if not any(equal(item, seen) for seen in kept):
            kept.append(item)
    return tuple(kept)


def _sort(meter: Meter, items: tuple[Any, ...]) -> tuple[Any, ...]:
    meter.charge(1 + len(items) * max(1, len(items).bit_length()))
    keys = _ordered(items, "sort")
    order = sorted(range(len(items)), key=lambda i: keys[i])
    return tuple(items[i] for i in order)


def _declare_lists() -> None:
    declare("isSorted", (LIST_A,), B, _is_sorted, member=True)
    declare("sum", (LIST_A,), t.A, _sum, member=True)
    declare("min", (LIST_A,), t.A, _extreme(False), member=True)
    declare("max", (LIST_A,), t.A, _extreme(True), member=True)
    declare("indexOf", (LIST_A, t.A), N, _index_of, member=True)
    declare("lastIndexOf", (LIST_A, t.A), N, _last_index_of, member=True)
    declare("sets.contains", (LIST_A, LIST_A), B, _contains_all, member=False)
    declare(
        "sets.equivalent",
        (LIST_A, LIST_A),
        B,
        lambda m, a, b: _contains_all(m, a, b) and _contains_all(m, b, a),
        member=False,
    )
    declare("sets.intersects", (LIST_A, LIST_A), B, _intersects, member=False)
    declare("lists.range", (N,), t.list_of(N), _range, member=False)
    declare("slice", (LIST_A, N, N), LIST_A, _slice, member=True)
    declare("flatten", (t.list_of(t.DYN),), t.list_of(t.DYN), _flatten, member=True)
    declare("flatten", (t.list_of(t.DYN), N), t.list_of(t.DYN), _flatten, member=True)
    declare("distinct", (LIST_A,), LIST_A, _distinct, member=True)
    declare("reverse", (LIST_A,), LIST_A, lambda m, a: (m.charge(len(a)), a[::-1])[1], member=True)
    declare("sort", (LIST_A,), LIST_A, _sort, member=True)


_declare_quantity()
_declare_semver()
_declare_lists()
