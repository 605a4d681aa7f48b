"""Kubernetes resource quantities ("500m", "4Gi", "1e3") as exact numbers.

The grammar is the one of k8s.io/apimachinery resource.Quantity: a signed decimal
number followed by a binary suffix (Ki..Ei), a decimal suffix (n, u, m, k, M..E) or
a decimal exponent (e3, E-2).
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from cache.limits import MAX_QUANTITY, MAX_QUANTITY_TEXT, shown

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?:[eE](?P<exp>[+-]?\d+))|(?P<dec>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """A quantity string that Kubernetes would not accept."""


def parse_quantity(value: object) -> Fraction:
    """Parse a quantity as it appears in JSON (string or number) into an exact Fraction.
    Its magnitude is at most MAX_QUANTITY (int64, as Kubernetes stores quantities)."""
    number = _parse(value)
    if abs(number) > MAX_QUANTITY:
        raise QuantityError(
            f"quantity {shown(value)} is beyond the largest Kubernetes quantity (2^63-1)"
        )
    return number


def _parse(value: object) -> Fraction:
    if isinstance(value, bool):
        raise QuantityError(f"quantity {value!r} is a boolean, not a number")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"quantity {value!r} is not finite")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity {shown(value)} is neither a string nor a number")
    if len(value) > MAX_QUANTITY_TEXT:
        # Fraction() of 5,000 digits raises, of 4,000 costs a big-number conversion.
        raise QuantityError(
            f"quantity {shown(value)} is longer than {MAX_QUANTITY_TEXT} characters"
        )
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"quantity {shown(value)} is not a Kubernetes quantity")
    number = Fraction(match["num"])
    if match["bin"]:
        return number * _BINARY[match["bin"]]
    if match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > 30:
            raise QuantityError(f"quantity {shown(value)} has an exponent out of range")
        return number * Fraction(10) ** exponent
    return number * _DECIMAL[match["dec"] or ""]


def to_milli(value: object) -> int:
    """A quantity in thousandths, rounded up as Kubernetes rounds CPU requests."""
    if type(value) is str:
        return _milli_of_text(value)
    return math.ceil(parse_quantity(value) * 1000)


def to_units(value: object) -> int:
    """A quantity in whole units, rounded up (memory in bytes, device counts)."""
    if type(value) is str:
        return _units_of_text(value)
    return math.ceil(parse_quantity(value))


# A cluster's pods repeat a few quantity strings ("500m", "1Gi", "1") hundreds of
# thousands of times, and parsing one through Fraction costs microseconds: the results
# are kept (a malformed string raises each time; exceptions are not cached).
@functools.lru_cache(maxsize=4096)
def _milli_of_text(text: str) -> int:
    return math.ceil(parse_quantity(text) * 1000)


@functools.lru_cache(maxsize=4096)
def _units_of_text(text: str) -> int:
    return math.ceil(parse_quantity(text))
