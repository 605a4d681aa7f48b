"""Taints, tolerations and node selector terms as immutable records.

Field names follow the Kubernetes API (core/v1 Taint, Toleration,
NodeSelectorRequirement); parse functions take the API's JSON form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def describe(self) -> str:
        return f"{{{self.key}: {self.value}}}" if self.value else f"{{{self.key}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "Equal" or "Exists"
    value: str
    effect: str  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        # An empty key with Exists tolerates everything.
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions entry (or matchFields on metadata.name when `field`)."""

    key: str
    operator: str
    values: tuple[str, ...]
    field: bool = False


# A node selector term is a tuple of requirements (ANDed); terms are ORed.
SelectorTerm = tuple[Requirement, ...]


def parse_taints(raw: Sequence[Mapping[str, Any]] | None) -> tuple[Taint, ...]:
    return tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))
        for t in raw or ()
    )


def parse_tolerations(raw: Sequence[Mapping[str, Any]] | None) -> tuple[Toleration, ...]:
    result = []
    for item in raw or ():
        operator = str(item.get("operator") or "Equal")
        if operator not in ("Equal", "Exists"):
            raise ValueError(f"toleration operator {operator!r} is neither Equal nor Exists")
        result.append(
            Toleration(
                str(item.get("key", "") or ""),
                operator,
                str(item.get("value", "") or ""),
                str(item.get("effect", "") or ""),
            )
        )
    return tuple(result)


def _parse_requirement(raw: Mapping[str, Any], field: bool) -> Requirement:
    operator = str(raw.get("operator", ""))
    if operator not in OPERATORS:
        raise ValueError(f"node selector operator {operator!r} is not one of {sorted(OPERATORS)}")
    values = tuple(str(v) for v in raw.get("values") or ())
    if operator in ("Gt", "Lt") and (len(values) != 1 or not _is_int(values[0])):
        raise ValueError(f"node selector operator {operator} needs exactly one integer value")
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"node selector operator {operator} needs at least one value")
    return Requirement(str(raw.get("key", "")), operator, values, field)


def _is_int(text: str) -> bool:
    return text.lstrip("+-").isdigit()


def parse_required_affinity(
    affinity: Mapping[str, Any] | None,
) -> tuple[SelectorTerm, ...] | None:
    """The pod's requiredDuringSchedulingIgnoredDuringExecution node selector terms.

    None when the pod has no required node affinity. As in Kubernetes, terms are ORed,
    and a term with no requirements matches no node.
    """
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = []
    for term in required.get("nodeSelectorTerms") or ():
        requirements = [_parse_requirement(r, False) for r in term.get("matchExpressions") or ()]
        requirements += [_parse_requirement(r, True) for r in term.get("matchFields") or ()]
        terms.append(tuple(requirements))
    return tuple(terms)
