"""resource.Quantity values as numbers, for the comparisons a capacity's request policy
needs (the schema has already checked the syntax).

EMULATOR GUESS: the value is compared as a 28-digit decimal (the real Quantity is exact),
and printed as it was written (the real server prints the canonical form, `1Gi` for
`1024Mi`)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from tests.kubeapi.dra.schema import QUANTITY

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def value(quantity: Any) -> Decimal:
    text = quantity if isinstance(quantity, str) else repr(quantity)
    match = QUANTITY.fullmatch(text)
    if match is None:
        return Decimal(0)
    number, suffix = match.group(1), match.group(2) or ""
    sign = -1 if text.startswith("-") else 1
    try:
        amount = Decimal(number) * sign
        if suffix in _BINARY:
            return amount * (Decimal(2) ** _BINARY[suffix])
        if suffix in _DECIMAL:
            return amount.scaleb(_DECIMAL[suffix])
        return amount.scaleb(int(suffix[1:]))
    except (ArithmeticError, ValueError):  # beyond the decimal context: not comparable
        return Decimal(0)


def int64_value(quantity: Any) -> int:
    """Quantity.Value(): rounded up to an integer, held in an int64."""
    amount = value(quantity)
    if amount >= 2**63:
        return 2**63 - 1
    if amount < -(2**63):
        return -(2**63)
    return math.ceil(amount)


def shown(quantity: Any) -> str:
    return quantity if isinstance(quantity, str) else repr(quantity)
