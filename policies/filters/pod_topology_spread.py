"""PodTopologySpread (DoNotSchedule constraints), with kube-scheduler's semantics.

Domains: the values of a constraint's topology key on *eligible* nodes, those that
carry every hard constraint's key and pass the constraint's inclusion policies
(nodeAffinityPolicy Honor by default: the pod's nodeSelector and required node
affinity; nodeTaintsPolicy Ignore by default: honoured, only nodes whose NoSchedule
and NoExecute taints the pod tolerates). A domain's count is the pods there in the
pod's namespace, not terminating, that the constraint's selector matches (an empty
selector counts none).

A node passes a constraint when it has the key and

    count(node's domain) + (1 if the pod matches the selector) - global minimum <= maxSkew

where the global minimum is the smallest count over the domains, or 0 when fewer than
minDomains domains exist. Counts follow the gang: each member placed in the plan is
`add`ed, so the skew is judged with the members placed before it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.pod_index import PodIndex
from cache.terms import SpreadConstraint
from policies.filters.node_affinity import NodeAffinity
from policies.filters.taint_toleration import TaintToleration

REASON_SKEW = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = (
    "node(s) didn't match pod topology spread constraints (missing required label)"
)

_NODE_AFFINITY = NodeAffinity()
_TAINTS = TaintToleration()


def count_member(
    pod: PodInfo,
    constraints: Sequence[SpreadConstraint],
    keys: tuple[str, ...],
    counts: list[Counter[str]],
    other: PodInfo,
    node: NodeInfo,
    delta: int,
) -> list[int]:
    """Count `other` on `node` (delta 1) or no longer (-1) in the per-constraint domain
    counts of `pod`'s spread constraints (hard or soft alike); the indexes changed."""
    if other.namespace != pod.namespace or other.deleting:
        return []
    changed = []
    for i, constraint in enumerate(constraints):
        if constraint.selector.empty or not constraint.selector.matches(other.labels):
            continue
        if included(pod, constraint, keys, node):
            value = node.labels[constraint.topology_key]
            counts[i][value] += delta
            if counts[i][value] <= 0:
                del counts[i][value]
            changed.append(i)
    return changed


def included(
    pod: PodInfo, constraint: SpreadConstraint, keys: tuple[str, ...], node: NodeInfo
) -> bool:
    """Whether `node` counts for `constraint`: it has every key, and passes the
    constraint's node inclusion policies for `pod`."""
    labels = node.labels
    for key in keys:
        if key not in labels:
            return False
    if constraint.honor_node_affinity and _NODE_AFFINITY.filter(pod, node) is not None:
        return False
    return not (constraint.honor_taints and _TAINTS.filter(pod, node) is not None)


def domains_signature(pod: PodInfo, constraints: tuple[SpreadConstraint, ...]) -> Hashable:
    """What the eligible domains depend on, for a cache across pods and plans."""
    return (
        tuple((c.topology_key, c.honor_node_affinity, c.honor_taints) for c in constraints),
        tuple(sorted(pod.node_selector.items())),
        pod.required_affinity,
        pod.tolerations,
    )


def eligible_domains(
    pod: PodInfo, constraints: tuple[SpreadConstraint, ...], nodes: Iterable[NodeInfo]
) -> tuple[frozenset[str], ...]:
    """Per constraint, the topology values of the nodes it counts (a pass over every
    node, which is why callers cache it per node-label generation)."""
    keys = tuple(c.topology_key for c in constraints)
    found: list[set[str]] = [set() for _ in constraints]
    for node in nodes:
        labels = node.labels
        if not all(key in labels for key in keys):
            continue
        for i, constraint in enumerate(constraints):
            value = labels[constraint.topology_key]
            if value not in found[i] and included(pod, constraint, keys, node):
                found[i].add(value)
    return tuple(frozenset(values) for values in found)


def hard_constraints(pod: PodInfo) -> tuple[SpreadConstraint, ...]:
    return tuple(c for c in pod.spread if c.hard)


class PodTopologySpreadState:
    __slots__ = ("_minimum", "constraints", "counts", "domains", "keys", "pod")

    def __init__(
        self,
        pod: PodInfo,
        constraints: tuple[SpreadConstraint, ...],
        domains: tuple[frozenset[str], ...],
    ) -> None:
        self.pod = pod
        self.constraints = constraints
        self.keys = tuple(c.topology_key for c in constraints)
        self.domains = domains
        # Per constraint: matching pods per domain value (absent: none).
        self.counts: list[Counter[str]] = [Counter() for _ in constraints]
        self._minimum: list[float | None] = [None] * len(constraints)

    @classmethod
    def compute(
        cls,
        pod: PodInfo,
        constraints: tuple[SpreadConstraint, ...],
        domains: tuple[frozenset[str], ...],
        index: PodIndex,
        nodes: Mapping[str, NodeInfo],
    ) -> PodTopologySpreadState:
        state = cls(pod, constraints, domains)
        for i, constraint in enumerate(constraints):
            if constraint.selector.empty:
                continue
            counts = state.counts[i]
            for placed in index.matching((pod.namespace,), constraint.selector):
                if placed.pod.deleting:
                    continue
                node = nodes.get(placed.node)
                if node is not None and included(pod, constraint, state.keys, node):
                    counts[node.labels[constraint.topology_key]] += 1
        return state

    def clone(self) -> PodTopologySpreadState:
        copy = PodTopologySpreadState(self.pod, self.constraints, self.domains)
        copy.counts = [Counter(c) for c in self.counts]
        return copy

    def add(self, other: PodInfo, node: NodeInfo, delta: int = 1) -> None:
        """A gang member now runs on `node` (delta 1) or no longer does (-1)."""
        for i in count_member(
            self.pod, self.constraints, self.keys, self.counts, other, node, delta
        ):
            self._minimum[i] = None

    def minimum(self, i: int) -> float:
        """The global minimum of constraint i (0 below minDomains domains)."""
        cached = self._minimum[i]
        if cached is not None:
            return cached
        domains = self.domains[i]
        counts = self.counts[i]
        result: float
        if len(domains) < self.constraints[i].min_domains:
            result = 0
        elif not domains:
            result = float("inf")  # nothing to be skewed against
        elif sum(1 for value in counts if value in domains) < len(domains):
            result = 0  # some domain holds no matching pod
        else:
            result = min(counts[value] for value in domains)
        self._minimum[i] = result
        return result

    def filter(self, node: NodeInfo) -> str | None:
        labels = node.labels
        pod_labels = self.pod.labels
        for i, constraint in enumerate(self.constraints):
            value = labels.get(constraint.topology_key)
            if value is None:
                return REASON_MISSING_LABEL
            self_match = 1 if constraint.selector.matches(pod_labels) else 0
            skew = self.counts[i].get(value, 0) + self_match - self.minimum(i)
            if skew > constraint.max_skew:
                return REASON_SKEW
        return None
