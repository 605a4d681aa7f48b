"""InterPodAffinity (required terms), with kube-scheduler's semantics.

For an incoming pod, three counts per topology pair (label key, value):
- `affinity`: pods that match ALL of the pod's required affinity terms, counted once
  per term in the domain of the term's topology key where they run;
- `anti`: pods matching one of the pod's required anti-affinity terms;
- `existing_anti`: pods whose own required anti-affinity terms match the incoming pod
  (the symmetry: a running pod's anti-affinity keeps newcomers out of its domain).

A node passes when it has every affinity term's topology key and each such domain
holds a matching pod (or, for "the first pod of a self-affine group", no pod anywhere
matches all terms and the pod matches its own terms); when no anti-affinity term's
domain on the node holds a matching pod; and when no existing pod's anti-affinity
term covers the node. The counts start from the snapshot's pod index and follow the
gang: every member placed in the plan is `add`ed, so members see each other exactly
as they would see running pods.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.pod_index import REQUIRED_ANTI, PodIndex
from cache.terms import PodAffinityTerm

REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

_Pair = tuple[str, str]
_ANTI_ONLY = frozenset({REQUIRED_ANTI})


def matches_all(
    pod: PodInfo, terms: tuple[PodAffinityTerm, ...], namespace_labels: Mapping[str, str]
) -> bool:
    """podMatchesAllAffinityTerms: False for no terms."""
    if not terms:
        return False
    return all(term.matches(pod.namespace, pod.labels, namespace_labels) for term in terms)


def _bump(counts: Counter[_Pair], pair: _Pair, delta: int) -> None:
    value = counts[pair] + delta
    if value:
        counts[pair] = value
    else:
        del counts[pair]


class InterPodAffinityState:
    __slots__ = (
        "affinity",
        "anti",
        "existing_anti",
        "namespace_labels",
        "pod",
        "required",
        "required_anti",
        "self_match",
    )

    def __init__(self, pod: PodInfo) -> None:
        self.pod = pod
        terms = pod.pod_affinity
        self.required = terms.required if terms else ()
        self.required_anti = terms.required_anti if terms else ()
        self.affinity: Counter[_Pair] = Counter()
        self.anti: Counter[_Pair] = Counter()
        self.existing_anti: Counter[_Pair] = Counter()
        self.namespace_labels: Mapping[str, Mapping[str, str]] = {}
        self.self_match = False

    @classmethod
    def compute(
        cls, pod: PodInfo, index: PodIndex, nodes: Mapping[str, NodeInfo]
    ) -> InterPodAffinityState:
        """The state against the pods of a snapshot (PreFilter)."""
        state = cls(pod)
        state.namespace_labels = index.namespace_labels
        own_ns_labels = index.namespace_labels.get(pod.namespace, {})
        state.self_match = matches_all(pod, state.required, own_ns_labels)
        if state.required:
            first = state.required[0]
            for placed in index.matching(index.namespaces_of(first), first.selector):
                node = nodes.get(placed.node)
                if node is not None:
                    state._count_affinity(placed.pod, node, 1)
        for term in state.required_anti:
            key = term.topology_key
            for placed in index.matching(index.namespaces_of(term), term.selector):
                node = nodes.get(placed.node)
                value = node.labels.get(key) if node is not None else None
                if value is not None:
                    state.anti[(key, value)] += 1
        for _, term, owners in index.terms_matching(pod.namespace, pod.labels, _ANTI_ONLY):
            for value, count in owners.items():
                state.existing_anti[(term.topology_key, value)] += count
        return state

    def clone(self) -> InterPodAffinityState:
        copy = InterPodAffinityState(self.pod)
        copy.affinity = Counter(self.affinity)
        copy.anti = Counter(self.anti)
        copy.existing_anti = Counter(self.existing_anti)
        copy.namespace_labels = self.namespace_labels
        copy.self_match = self.self_match
        return copy

    @property
    def active(self) -> bool:
        return bool(self.required or self.required_anti or self.existing_anti)

    # --- the gang's members, placed or taken back (PreFilter AddPod / RemovePod) --------
    def _count_affinity(self, other: PodInfo, node: NodeInfo, delta: int) -> None:
        ns_labels = self.namespace_labels.get(other.namespace, {})
        if matches_all(other, self.required, ns_labels):
            for term in self.required:
                value = node.labels.get(term.topology_key)
                if value is not None:
                    _bump(self.affinity, (term.topology_key, value), delta)

    def add(self, other: PodInfo, node: NodeInfo, delta: int = 1) -> None:
        """`other` now runs on `node` (delta 1) or no longer does (delta -1)."""
        labels = node.labels
        terms = other.pod_affinity
        if terms is not None and terms.required_anti:
            own_ns_labels = self.namespace_labels.get(self.pod.namespace, {})
            for term in terms.required_anti:
                value = labels.get(term.topology_key)
                if value is not None and term.matches(
                    self.pod.namespace, self.pod.labels, own_ns_labels
                ):
                    _bump(self.existing_anti, (term.topology_key, value), delta)
        if self.required:
            self._count_affinity(other, node, delta)
        if self.required_anti:
            ns_labels = self.namespace_labels.get(other.namespace, {})
            for term in self.required_anti:
                value = labels.get(term.topology_key)
                if value is not None and term.matches(other.namespace, other.labels, ns_labels):
                    _bump(self.anti, (term.topology_key, value), delta)

    # --- Filter -------------------------------------------------------------------------
    def filter(self, node: NodeInfo, check_affinity: bool = True) -> str | None:
        """The reason the node fails, None when it passes. `check_affinity` False leaves
        the affinity terms out (a gang member placed ahead of the members it is to
        join; the finished placement is judged whole)."""
        labels = node.labels
        if self.required and check_affinity:
            pods_exist = True
            for term in self.required:
                value = labels.get(term.topology_key)
                if value is None:
                    return REASON_AFFINITY  # every topology key must exist on the node
                if self.affinity.get((term.topology_key, value), 0) <= 0:
                    pods_exist = False
            # The first pod of a group with affinity to itself: nothing matches yet
            # anywhere, so it may start the group wherever its keys exist.
            if not pods_exist and not (not self.affinity and self.self_match):
                return REASON_AFFINITY
        for term in self.required_anti:
            value = labels.get(term.topology_key)
            if value is not None and self.anti.get((term.topology_key, value), 0) > 0:
                return REASON_ANTI_AFFINITY
        existing = self.existing_anti
        if existing:
            if len(existing) < len(labels):
                for key, value in existing:
                    if labels.get(key) == value:
                        return REASON_EXISTING_ANTI_AFFINITY
            else:
                for pair in labels.items():
                    if existing.get(pair, 0) > 0:
                        return REASON_EXISTING_ANTI_AFFINITY
        return None
