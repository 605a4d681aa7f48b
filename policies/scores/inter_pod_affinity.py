"""InterPodAffinity scoring (preferred terms), with kube-scheduler's semantics.

PreScore sums weights per topology pair (label key, value):
- each of the pod's preferred affinity terms adds its weight for every pod it selects
  (in the domain where that pod runs), each preferred anti-affinity term subtracts it;
- symmetry: each running pod's required affinity terms that select the incoming pod add
  hardPodAffinityWeight (1), its preferred affinity terms their weight, its preferred
  anti-affinity terms subtract theirs.
A node's raw score is the sum over the pairs its labels carry. NormalizeScore maps the
raw scores of the nodes compared onto 0..100: 100 x (raw - min) / (max - min), 0 for
all when they are equal. The gang's members placed in the plan count as running pods.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.pod_index import PREFERRED, PREFERRED_ANTI, REQUIRED, PodIndex
from cache.terms import PodAffinityTerm
from policies.interface import MAX_SCORE

HARD_POD_AFFINITY_WEIGHT = 1
_SYMMETRIC = frozenset({REQUIRED, PREFERRED, PREFERRED_ANTI})
_Pair = tuple[str, str]


class PreferredAffinityState:
    __slots__ = ("keys", "namespace_labels", "pod", "preferred", "preferred_anti", "scores")

    def __init__(self, pod: PodInfo, namespace_labels: Mapping[str, Mapping[str, str]]) -> None:
        self.pod = pod
        terms = pod.pod_affinity
        self.preferred = terms.preferred if terms else ()
        self.preferred_anti = terms.preferred_anti if terms else ()
        self.namespace_labels = namespace_labels
        self.scores: Counter[_Pair] = Counter()
        self.keys: Counter[str] = Counter()  # topology keys with a pair, to look up

    @classmethod
    def compute(
        cls, pod: PodInfo, index: PodIndex, nodes: Mapping[str, NodeInfo]
    ) -> PreferredAffinityState:
        state = cls(pod, index.namespace_labels)
        for terms, sign in ((state.preferred, 1), (state.preferred_anti, -1)):
            for term in terms:
                key = term.topology_key
                for placed in index.matching(index.namespaces_of(term), term.selector):
                    node = nodes.get(placed.node)
                    value = node.labels.get(key) if node is not None else None
                    if value is not None:
                        state._bump((key, value), sign * term.weight)
        for kind, term, owners in index.terms_matching(pod.namespace, pod.labels, _SYMMETRIC):
            weight = _symmetric_weight(kind, term)
            for value, count in owners.items():
                state._bump((term.topology_key, value), weight * count)
        return state

    def clone(self) -> PreferredAffinityState:
        copy = PreferredAffinityState(self.pod, self.namespace_labels)
        copy.scores = Counter(self.scores)
        copy.keys = Counter(self.keys)
        return copy

    @property
    def active(self) -> bool:
        return bool(self.preferred or self.preferred_anti or self.scores)

    def _bump(self, pair: _Pair, delta: int) -> None:
        if not delta:
            return
        had = pair in self.scores
        value = self.scores[pair] + delta
        if value:
            self.scores[pair] = value
            if not had:
                self.keys[pair[0]] += 1
        else:
            del self.scores[pair]
            if had:
                self.keys[pair[0]] -= 1
                if not self.keys[pair[0]]:
                    del self.keys[pair[0]]

    def add(self, other: PodInfo, node: NodeInfo, delta: int = 1) -> None:
        """A gang member runs on `node` (delta 1) or no longer does (-1)."""
        labels = node.labels
        ns_labels = self.namespace_labels.get(other.namespace, {})
        for terms, sign in ((self.preferred, 1), (self.preferred_anti, -1)):
            for term in terms:
                value = labels.get(term.topology_key)
                if value is not None and term.matches(other.namespace, other.labels, ns_labels):
                    self._bump((term.topology_key, value), delta * sign * term.weight)
        affinity = other.pod_affinity
        if affinity is None:
            return
        own_ns_labels = self.namespace_labels.get(self.pod.namespace, {})
        for kind, terms in (
            (REQUIRED, affinity.required),
            (PREFERRED, affinity.preferred),
            (PREFERRED_ANTI, affinity.preferred_anti),
        ):
            for term in terms:
                value = labels.get(term.topology_key)
                if value is not None and term.matches(
                    self.pod.namespace, self.pod.labels, own_ns_labels
                ):
                    self._bump((term.topology_key, value), delta * _symmetric_weight(kind, term))

    def raw(self, node: NodeInfo) -> int:
        labels = node.labels
        total = 0
        for key in self.keys:
            value = labels.get(key)
            if value is not None:
                total += self.scores.get((key, value), 0)
        return total


def _symmetric_weight(kind: str, term: PodAffinityTerm) -> int:
    if kind == REQUIRED:
        return HARD_POD_AFFINITY_WEIGHT
    return term.weight if kind == PREFERRED else -term.weight


def normalize(raw: Sequence[int]) -> list[float]:
    """NormalizeScore: the nodes compared onto 0..100 (kube-scheduler truncates to an
    integer)."""
    if not raw:
        return []
    low, high = min(raw), max(raw)
    if high <= low:
        return [0.0] * len(raw)
    return [float(int(MAX_SCORE * (value - low) / (high - low))) for value in raw]
