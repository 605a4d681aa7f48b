"""Static types of the checker (cel-go's checker, reduced to what the DRA environment
reaches). `dyn` stands for a type known only at run time (Kubernetes declares each
attribute value as such: int, bool, string or version, decided by the slice)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CelType:
    name: str
    params: tuple[CelType, ...] = ()

    def __str__(self) -> str:
        if self.params:
            return f"{self.name}({', '.join(str(p) for p in self.params)})"
        return self.name

    @property
    def is_param(self) -> bool:
        return self.name.startswith("~")


INT = CelType("int")
UINT = CelType("uint")
DOUBLE = CelType("double")
STRING = CelType("string")
BYTES = CelType("bytes")
BOOL = CelType("bool")
NULL = CelType("null_type")
DYN = CelType("dyn")
TYPE = CelType("type")
QUANTITY = CelType("kubernetes.Quantity")
SEMVER = CelType("kubernetes.Semver")
DEVICE = CelType("kubernetes.DRADevice")
# Type parameters of generic overloads (size(list(A)), _==_(A, A), ...).
A = CelType("~A")
B = CelType("~B")
NUMBERS = (INT, UINT, DOUBLE)


def list_of(element: CelType) -> CelType:
    return CelType("list", (element,))


def map_of(key: CelType, value: CelType) -> CelType:
    return CelType("map", (key, value))


ATTRIBUTE_MAP = map_of(STRING, map_of(STRING, DYN))
CAPACITY_MAP = map_of(STRING, map_of(STRING, QUANTITY))
DEVICE_FIELDS = {
    "driver": STRING,
    "attributes": ATTRIBUTE_MAP,
    "capacity": CAPACITY_MAP,
    "allowMultipleAllocations": BOOL,
}


def bind(param: CelType, actual: CelType, bindings: dict[str, CelType]) -> bool:
    """Whether a value of type `actual` may be passed where `param` is declared,
    recording what type parameters stand for. dyn matches anything both ways."""
    if param.is_param:
        known = bindings.get(param.name)
        if known is None or known == DYN:
            bindings[param.name] = actual
            return True
        if actual == DYN:
            return True
        return join(known, actual) is not None and _assign(known, actual, bindings)
    if param == DYN or actual == DYN:
        return True
    if param.name != actual.name or len(param.params) != len(actual.params):
        return False
    return all(bind(p, a, bindings) for p, a in zip(param.params, actual.params, strict=True))


def _assign(known: CelType, actual: CelType, bindings: dict[str, CelType]) -> bool:
    joined = join(known, actual)
    if joined is None:
        return False
    for name, value in bindings.items():
        if value == known:
            bindings[name] = joined
    return True


def join(left: CelType, right: CelType) -> CelType | None:
    """The type both may be seen as (for == and homogeneous literals), or None."""
    if left == right:
        return left
    if left == DYN or right == DYN:
        return DYN
    if left.name != right.name or len(left.params) != len(right.params):
        return None
    params = []
    for a, b in zip(left.params, right.params, strict=True):
        joined = join(a, b)
        if joined is None:
            return None
        params.append(joined)
    return CelType(left.name, tuple(params))


def substitute(declared: CelType, bindings: dict[str, CelType]) -> CelType:
    if declared.is_param:
        return bindings.get(declared.name, DYN)
    if not declared.params:
        return declared
    return CelType(declared.name, tuple(substitute(p, bindings) for p in declared.params))
