"""Whether a node binding (a slice's, a device's, an allocation's node selector) reaches
a node, with kube-scheduler's node selector semantics (component-helpers nodeaffinity:
terms ORed, requirements ANDed, an empty term matches nothing, Gt/Lt compare integers,
matchFields only on metadata.name)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cache.dra.slices import ALL_NODES, NODE_NAME, NODE_SELECTOR, NodeBinding
from cache.terms import SelectorTerm, requirement_holds


def terms_reach(terms: Sequence[SelectorTerm], node: str, labels: Mapping[str, str]) -> bool:
    return any(term and all(requirement_holds(req, node, labels) for req in term) for term in terms)


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
