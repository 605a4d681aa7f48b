"""Whether a node binding (a slice's, a device's, an allocation's node selector) reaches
a node, with kube-scheduler's node selector semantics (component-helpers nodeaffinity:
terms ORed, requirements ANDed, an empty term matches nothing, Gt/Lt compare integers,
matchFields only on metadata.name)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cache.dra.slices import ALL_NODES, NODE_NAME, NODE_SELECTOR, NodeBinding
from cache.limits import small_int
from cache.terms import Requirement, SelectorTerm

NODE_NAME_FIELD = "metadata.name"


def _label_int(text: str) -> int | None:
    digits = text[1:] if text.startswith(("+", "-")) else text
    magnitude = small_int(digits, 19)
    if magnitude is None:
        return None
    return -magnitude if text.startswith("-") else magnitude


def _holds(req: Requirement, node: str, labels: Mapping[str, str]) -> bool:
    if req.field:
        if req.key != NODE_NAME_FIELD:
            return False
        value: str | None = node
    else:
        value = labels.get(req.key)
    operator = req.operator
    if operator == "In":
        return value in req.values
    if operator == "NotIn":
        return value not in req.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        have, bound = _label_int(value), _label_int(req.values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def terms_reach(terms: Sequence[SelectorTerm], node: str, labels: Mapping[str, str]) -> bool:
    return any(term and all(_holds(req, node, labels) for req in term) for term in terms)


def binding_reaches(binding: NodeBinding, node: str, labels: Mapping[str, str]) -> bool:
    """NodeMatches: by name, by selector, or every node. Any other binding (none set,
    or perDeviceNodeSelection, which its devices answer) reaches no node here."""
    if binding.kind == NODE_NAME:
        return binding.node_name == node
    if binding.kind == ALL_NODES:
        return True
    if binding.kind == NODE_SELECTOR:
        return terms_reach(binding.terms, node, labels)
    return False
