"""Declarations shared by the function libraries: an overload, its runtime type test,
and the registry that the checker and the program consult."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from policies.dra.cel import types as t
from policies.dra.cel.cost import Meter
from policies.dra.cel.env import Semver
from policies.dra.cel.errors import CelEvaluationError
from policies.dra.cel.values import CelUint, type_name

Impl = Callable[..., object]


@dataclass(frozen=True)
class Overload:
    """One signature of a function. A member overload's first parameter is its
    receiver (`"abc".size()`). impl(meter, *arguments) charges the meter for work that
    depends on the size of its arguments and returns the result or raises
    CelEvaluationError."""

    function: str
    member: bool
    params: tuple[t.CelType, ...]
    result: t.CelType
    impl: Impl


FUNCTIONS: dict[str, list[Overload]] = {}


def declare(
    function: str, params: tuple[t.CelType, ...], result: t.CelType, impl: Impl, *, member: bool
) -> None:
    FUNCTIONS.setdefault(function, []).append(Overload(function, member, params, result, impl))


def global_and_member(
    function: str, params: tuple[t.CelType, ...], result: t.CelType, impl: Impl
) -> None:
    declare(function, params, result, impl, member=False)
    declare(function, params, result, impl, member=True)


_RUNTIME_KIND: dict[str, Callable[[object], bool]] = {
    "int": lambda v: type(v) is int,
    "uint": lambda v: type(v) is CelUint,
    "double": lambda v: type(v) is float,
    "string": lambda v: type(v) is str,
    "bytes": lambda v: type(v) is bytes,
    "bool": lambda v: type(v) is bool,
    "null_type": lambda v: v is None,
    "list": lambda v: type(v) is tuple,
    "map": lambda v: isinstance(v, Mapping),
    "kubernetes.Quantity": lambda v: type(v) is Fraction,
    "kubernetes.Semver": lambda v: type(v) is Semver,
}


def accepts(param: t.CelType, value: object) -> bool:
    """Whether a runtime value fits a declared parameter (element types of lists and
    maps are checked by the functions that care)."""
    if param.is_param or param == t.DYN:
        return True
    test = _RUNTIME_KIND.get(param.name)
    return test is not None and test(value)


def no_overload(function: str, args: tuple[object, ...]) -> CelEvaluationError:
    shown = ", ".join(type_name(arg) for arg in args)
    return CelEvaluationError(f"no such overload: {function}({shown})")


def charge_size(meter: Meter, units: int) -> None:
    if units:
        meter.charge(units)
