"""NodeAffinity: the pod's nodeSelector and required node affinity.

Semantics are kube-scheduler's (component-helpers nodeaffinity): nodeSelector labels
must match exactly; required affinity terms are ORed, the requirements of a term ANDed,
and a term without requirements matches no node. Gt and Lt compare the label value as
an integer; a label that is not an integer never satisfies them. matchFields support
only `metadata.name`, compared with the node's name.
"""

from __future__ import annotations

from collections.abc import Sequence

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.terms import Requirement, SelectorTerm, requirement_holds

REASON = "node(s) didn't match Pod's node affinity/selector"


def requirement_matches(req: Requirement, node: NodeInfo) -> bool:
    """Whether one matchExpressions (or matchFields) requirement holds on `node`."""
    return requirement_holds(req, node.name, node.labels)


def terms_match(terms: Sequence[SelectorTerm], node: NodeInfo) -> bool:
    """At least one term has all its requirements hold. An empty term matches nothing,
    and so does an empty list of terms. (Loops rather than any()/all(): this runs for
    every node a pod with affinity is tried on, and generators cost.)"""
    for term in terms:
        if not term:
            continue
        for req in term:
            if not requirement_matches(req, node):
                break
        else:
            return True
    return False


class NodeAffinity:
    name: str = "node-affinity"

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        selector = pod.node_selector
        if selector:
            labels = node.labels
            for key, wanted in selector.items():
                if labels.get(key) != wanted:
                    return REASON
        terms = pod.required_affinity
        if terms is not None and not terms_match(terms, node):
            return REASON
        return None
