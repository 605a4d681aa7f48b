"""The pods on each node of a snapshot, indexed for inter-pod affinity and topology
spread: by (namespace, label key, label value), by namespace, and every existing pod's
affinity terms grouped by term with where their owners run.

Maintained incrementally by `Snapshot.put`/`remove` (a node's pods change with the
node), so that asking "which pods match this selector" or "whose anti-affinity terms
match this pod" costs the answers, not a scan of every pod in the cluster.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from cache.pod import PodInfo
from cache.terms import LabelSelector, PodAffinityTerm

# Which list of the owner's terms a term comes from.
REQUIRED = "required"
REQUIRED_ANTI = "required_anti"
PREFERRED = "preferred"
PREFERRED_ANTI = "preferred_anti"
TERM_KINDS = (REQUIRED, REQUIRED_ANTI, PREFERRED, PREFERRED_ANTI)

_LabelKey = tuple[str, str, str]  # (namespace, label key, label value)
_TermKey = tuple[str, PodAffinityTerm]  # (kind, term)
_K = TypeVar("_K")


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """A pod and the node it runs on (or is assumed or tentatively placed on)."""

    pod: PodInfo
    node: str


def first_positive(selector: LabelSelector) -> tuple[str, tuple[str, ...]] | None:
    """A requirement every matching object must satisfy with one of a few label values
    (an `In`): the key and values to look up in an index. None when there is none."""
    for req in selector.requirements:
        if req.operator == "In":
            return req.key, req.values
    return None


class PodIndex:
    def __init__(self) -> None:
        self.on_node: dict[str, tuple[PodInfo, ...]] = {}
        self._by_label: dict[_LabelKey, dict[str, PlacedPod]] = {}
        self._by_namespace: dict[str, dict[str, PlacedPod]] = {}
        # Existing pods' affinity terms: (kind, term) -> Counter of the topology values
        # (the owner's node's label value of term.topology_key) the owners run in.
        self._terms: dict[_TermKey, Counter[str]] = {}
        self._terms_by_label: dict[tuple[str, str], set[_TermKey]] = {}
        self._terms_unindexed: set[_TermKey] = set()
        self._kinds: Counter[str] = Counter()  # distinct terms held, per kind
        # Namespace name -> its labels (namespaceSelector reads them).
        self.namespace_labels: dict[str, Mapping[str, str]] = {}

    # --- maintenance ------------------------------------------------------------------
    def set_node(
        self,
        name: str,
        pods: tuple[PodInfo, ...],
        old_labels: Mapping[str, str] | None,
        labels: Mapping[str, str] | None,
    ) -> None:
        """The node's pods are now `pods` (and its labels `labels`; None: the node is
        gone). Only the difference is re-indexed unless the labels changed."""
        old = self.on_node.get(name, ())
        removed: Iterable[PodInfo]
        added: Iterable[PodInfo]
        if old_labels == labels and len(pods) >= len(old) and all(map(operator.is_, old, pods)):
            # The same records first, pods only added after them (a bind): the common
            # case, without building the two identity sets below.
            removed, added = (), pods[len(old) :]
        elif old_labels == labels:
            kept = {id(p) for p in pods}
            fresh = {id(p) for p in old}
            removed = [p for p in old if id(p) not in kept]
            added = [p for p in pods if id(p) not in fresh]
        else:
            removed, added = old, pods
        for pod in removed:
            self._unindex(pod, name, old_labels or {})
        for pod in added:
            self._index(pod, name, labels or {})
        if pods and labels is not None:
            self.on_node[name] = pods
        else:
            self.on_node.pop(name, None)

    def _index(self, pod: PodInfo, node: str, node_labels: Mapping[str, str]) -> None:
        placed = PlacedPod(pod, node)
        ns = pod.namespace
        self._by_namespace.setdefault(ns, {})[pod.uid] = placed
        for key, value in string_labels(pod):
            self._by_label.setdefault((ns, key, value), {})[pod.uid] = placed
        for term_key, value in _terms_of(pod, node_labels):
            counts = self._terms.get(term_key)
            if counts is None:
                counts = self._terms[term_key] = Counter()
                self._kinds[term_key[0]] += 1
                positive = first_positive(term_key[1].selector)
                if positive is None:
                    self._terms_unindexed.add(term_key)
                else:
                    for label_value in positive[1]:
                        self._terms_by_label.setdefault((positive[0], label_value), set()).add(
                            term_key
                        )
            counts[value] += 1

    def _unindex(self, pod: PodInfo, node: str, node_labels: Mapping[str, str]) -> None:
        ns = pod.namespace
        _discard(self._by_namespace, ns, pod.uid)
        for key, value in string_labels(pod):
            _discard(self._by_label, (ns, key, value), pod.uid)
        for term_key, value in _terms_of(pod, node_labels):
            counts = self._terms[term_key]
            counts[value] -= 1
            if counts[value] <= 0:
                del counts[value]
            if not counts:
                del self._terms[term_key]
                self._kinds[term_key[0]] -= 1
                positive = first_positive(term_key[1].selector)
                if positive is None:
                    self._terms_unindexed.discard(term_key)
                else:
                    for label_value in positive[1]:
                        bucket = self._terms_by_label[(positive[0], label_value)]
                        bucket.discard(term_key)
                        if not bucket:
                            del self._terms_by_label[(positive[0], label_value)]

    # --- queries ----------------------------------------------------------------------
    def namespaces_of(self, term: PodAffinityTerm) -> Iterable[str]:
        """The namespaces a term reaches: its names, plus every namespace (known or with
        pods) whose labels its namespace selector matches."""
        selector = term.namespace_selector
        if selector is None:
            return term.namespaces
        known = set(self.namespace_labels) | set(self._by_namespace)
        return {
            ns
            for ns in known
            if ns in term.namespaces or selector.matches(self.namespace_labels.get(ns, {}))
        }

    def matching(self, namespaces: Iterable[str], selector: LabelSelector) -> Iterator[PlacedPod]:
        """Pods in one of `namespaces` whose labels `selector` matches."""
        if selector.nothing:
            return
        positive = first_positive(selector)
        for ns in namespaces:
            if positive is None:
                pool: Iterable[PlacedPod] = self._by_namespace.get(ns, {}).values()
            else:
                key, values = positive
                buckets = [self._by_label.get((ns, key, v)) for v in values]
                pool = [placed for bucket in buckets if bucket for placed in bucket.values()]
            for placed in pool:
                if selector.matches(placed.pod.labels):
                    yield placed

    def terms_matching(
        self, namespace: str, labels: Mapping[str, str], kinds: frozenset[str]
    ) -> Iterator[tuple[str, PodAffinityTerm, Counter[str]]]:
        """Existing pods' terms of these kinds that select a pod with this namespace and
        these labels, each with the topology values its owners run in."""
        namespace_labels = self.namespace_labels.get(namespace, {})
        candidates: set[_TermKey] = set(self._terms_unindexed)
        for key, value in labels.items():
            if not isinstance(value, str):
                continue
            bucket = self._terms_by_label.get((key, value))
            if bucket:
                candidates |= bucket
        for term_key in candidates:
            kind, term = term_key
            if kind in kinds and term.matches(namespace, labels, namespace_labels):
                yield kind, term, self._terms[term_key]

    def has_terms(self, kinds: frozenset[str]) -> bool:
        return any(self._kinds[kind] > 0 for kind in kinds)


def string_labels(pod: PodInfo) -> Iterator[tuple[str, str]]:
    """The pod's labels that a selector can match (a malformed object's other values
    match nothing, and are left out of the index)."""
    for key, value in pod.labels.items():
        if isinstance(key, str) and isinstance(value, str):
            yield key, value


def terms_with_kind(pod: PodInfo) -> Iterator[tuple[str, PodAffinityTerm]]:
    affinity = pod.pod_affinity
    if affinity is None:
        return
    for kind, terms in (
        (REQUIRED, affinity.required),
        (REQUIRED_ANTI, affinity.required_anti),
        (PREFERRED, affinity.preferred),
        (PREFERRED_ANTI, affinity.preferred_anti),
    ):
        for term in terms:
            yield kind, term


def _terms_of(pod: PodInfo, node_labels: Mapping[str, str]) -> Iterator[tuple[_TermKey, str]]:
    """The pod's terms whose topology key its node has, with the node's value there."""
    for kind, term in terms_with_kind(pod):
        value = node_labels.get(term.topology_key)
        if value is not None:
            yield (kind, term), value


def _discard(index: dict[_K, dict[str, PlacedPod]], key: _K, uid: str) -> None:
    bucket = index.get(key)
    if bucket is None:
        return
    bucket.pop(uid, None)
    if not bucket:
        del index[key]
