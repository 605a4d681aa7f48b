"""NodeAffinity: the pod's nodeSelector and required node affinity.

Semantics are kube-scheduler's (component-helpers nodeaffinity): nodeSelector labels
must match exactly; required affinity terms are ORed, the requirements of a term ANDed,
and a term without requirements matches no node. Gt and Lt compare the label value as
an integer; a label that is not an integer never satisfies them. matchFields support
only `metadata.name`, compared with the node's name.
"""

from __future__ import annotations

from collections.abc import Sequence

from cache.limits import small_int
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.terms import Requirement, SelectorTerm

NODE_NAME_FIELD = "metadata.name"
REASON = "node(s) didn't match Pod's node affinity/selector"

# Go's strconv.ParseInt(s, 10, 64) range, which kube-scheduler uses for Gt/Lt.
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def parse_label_int(text: str) -> int | None:
    """The integer a label value spells (optional sign, ASCII digits, within int64), as
    Go's ParseInt reads it; None otherwise. Stricter than int(), which would accept
    spaces, underscores and non-ASCII digits."""
    digits = text[1:] if text.startswith(("+", "-")) else text
    # More than 19 digits is beyond int64 (and int() refuses 4,300+): no need to read it.
    magnitude = small_int(digits, 19)
    if magnitude is None:
        return None
    number = -magnitude if text.startswith("-") else magnitude
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def requirement_matches(req: Requirement, node: NodeInfo) -> bool:
    """Whether one matchExpressions (or matchFields) requirement holds on `node`."""
    value: str | None
    if req.field:
        if req.key != NODE_NAME_FIELD:
            return False
        value = node.name
    else:
        value = node.labels.get(req.key)
    operator = req.operator
    # `None in values` is False and `None not in values` True: an absent label is
    # outside every In list and satisfies every NotIn, as in Kubernetes.
    if operator == "In":
        return value in req.values
    if operator == "NotIn":
        return value not in req.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        have = parse_label_int(value)
        bound = parse_label_int(req.values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


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
