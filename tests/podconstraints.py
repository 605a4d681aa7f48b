"""Builders for inter-pod affinity and topology spread tests: pods with labels, terms
and constraints, and clusters of labelled nodes with pods running on them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cache.cluster import ClusterCache, EventType
from cache.snapshot import Snapshot
from tests.factories import node_obj, pod_obj

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def zoned_node(name: str, zone: str | None, **kwargs: Any) -> dict[str, Any]:
    """A node labelled with its hostname and (unless None) its zone."""
    labels = {HOST: name}
    if zone is not None:
        labels[ZONE] = zone
    labels.update(kwargs.pop("labels", {}) or {})
    return node_obj(name, labels=labels, **kwargs)


def labelled_pod(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    affinity: Mapping[str, Any] | None = None,
    spread: Sequence[Mapping[str, Any]] = (),
    deleting: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """A pod with extra labels, an affinity section and topologySpreadConstraints."""
    obj = pod_obj(name, affinity=affinity, **kwargs)
    obj["metadata"]["labels"].update(labels or {})
    if spread:
        obj["spec"]["topologySpreadConstraints"] = [dict(c) for c in spread]
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
    if kwargs.get("node_name"):
        obj["status"]["phase"] = "Running"
    return obj


def term(
    match_labels: Mapping[str, str] | None = None,
    topology_key: str = HOST,
    **extra: Any,
) -> dict[str, Any]:
    """A PodAffinityTerm selecting `match_labels` (None: no labelSelector at all)."""
    body: dict[str, Any] = {"topologyKey": topology_key}
    if match_labels is not None:
        body["labelSelector"] = {"matchLabels": dict(match_labels)}
    body.update(extra)
    return body


def required(kind: str, *terms: Mapping[str, Any]) -> dict[str, Any]:
    """An affinity section with required terms; kind "podAffinity" or "podAntiAffinity"."""
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def preferred(kind: str, *weighted: tuple[int, Mapping[str, Any]]) -> dict[str, Any]:
    return {
        kind: {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": weight, "podAffinityTerm": dict(body)} for weight, body in weighted
            ]
        }
    }


def spread(
    match_labels: Mapping[str, str] | None,
    topology_key: str = ZONE,
    max_skew: int = 1,
    when: str = "DoNotSchedule",
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "maxSkew": max_skew,
        "topologyKey": topology_key,
        "whenUnsatisfiable": when,
    }
    if match_labels is not None:
        body["labelSelector"] = {"matchLabels": dict(match_labels)}
    body.update(extra)
    return body


def cluster(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]] = (),
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> ClusterCache:
    cache = ClusterCache()
    for node in nodes:
        cache.apply_node(EventType.ADDED, node)
    for pod in pods:
        cache.apply_pod(EventType.ADDED, pod)
    for name, labels in (namespaces or {}).items():
        cache.apply_namespace(EventType.ADDED, {"metadata": {"name": name, "labels": dict(labels)}})
    return cache


def snapshot_of(cache: ClusterCache) -> Snapshot:
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    return snapshot
