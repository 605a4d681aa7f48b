"""Pending pods by reason, the opt-in per-namespace series (metrics.namespaceLabels), and
the process and Python collectors on the scheduler's own registry (docs/metrics.md)."""

from __future__ import annotations

from typing import Any

import pytest

from cache.cluster import EventType
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from scheduler.process.config import ConfigError, MetricsConfig, parse_config
from scheduler.process.metrics import (
    METRIC_LABELS,
    OTHER_NAMESPACES,
    PENDING_REASONS,
    SchedulerMetrics,
)
from tests.cache.test_quota import quota_obj
from tests.factories import node_obj, pod_obj
from tests.scrape import PROCESS_SERIES, parse

ADDED, DELETED = EventType.ADDED, EventType.DELETED
BY_REASON = "gang_scheduler_pending_pods_by_reason"
NS_PENDING = "gang_scheduler_namespace_pending_pods"
NS_QUOTA = "gang_scheduler_namespace_quota_amount"
NS_QUOTA_GANGS = "gang_scheduler_namespace_quota_pending_gangs"


def value(metrics: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def gated(obj: dict[str, Any], *gates: str) -> dict[str, Any]:
    obj["spec"]["schedulingGates"] = [{"name": gate} for gate in gates]
    return obj


def with_claim(obj: dict[str, Any]) -> dict[str, Any]:
    # Kubernetes 1.35's workloadRef alone is refused with a message naming the field:
    # an invalid spec (DRA claims, refused before, are allocated now).
    obj["spec"]["workloadRef"] = {"name": "train", "podGroup": "workers"}
    return obj


def every_reason() -> SchedulingCore:
    """One node of 2 GPUs and pods waiting for each reason there is."""
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n0", gpus=2), 0)
    pods = [pod_obj(f"part-{i}", namespace="team-a", gang="part", min_member=4) for i in range(3)]
    pods.append(gated(pod_obj("held", namespace="team-a"), "kueue.x-k8s.io/admission"))
    pods.append(with_claim(pod_obj("claims", namespace="team-b")))
    pods += [pod_obj(f"huge-{i}", namespace="team-b", gang="huge", gpus=4) for i in range(2)]
    for pod in pods:
        core.apply_pod(ADDED, pod, 0)
    core.refresh(0)
    while (attempt := core.schedule_next(0)) is not None:
        assert not isinstance(attempt.result, Plan)  # nothing here fits or may be tried
    # A gang that becomes ready after the loop ran: queued, not yet tried.
    for i in range(2):
        core.apply_pod(ADDED, pod_obj(f"next-{i}", namespace="team-c", gang="next"), 1)
    core.refresh(1)
    return core


# --- pending pods by reason (always on) ------------------------------------------------------
def test_every_pending_pod_has_one_reason_and_they_sum_to_the_pending_pods() -> None:
    metrics = SchedulerMetrics()
    metrics.observe_core(every_reason())
    by_reason = {reason: value(metrics, BY_REASON, reason=reason) for reason in PENDING_REASONS}
    assert by_reason == {
        "incomplete_gang": 3,
        "gated": 1,
        "invalid": 1,
        "queued": 2,
        "backoff": 0,
        "unschedulable": 2,
    }
    assert sum(v or 0 for v in by_reason.values()) == value(metrics, "gang_scheduler_pending_pods")


def test_a_change_that_could_help_moves_the_unschedulable_to_backoff() -> None:
    core = every_reason()
    core.apply_node(ADDED, node_obj("n1", gpus=8), 2)  # room for "huge": retried after backoff
    core.refresh(2)
    metrics = SchedulerMetrics()
    metrics.observe_core(core)
    assert value(metrics, BY_REASON, reason="unschedulable") == 0
    assert value(metrics, BY_REASON, reason="backoff") == 2


def test_reserved_members_no_longer_count_as_pending() -> None:
    core = every_reason()
    attempt = core.schedule_next(1)  # "next" fits: reserved while its binds are in flight
    assert attempt is not None and isinstance(attempt.result, Plan)
    metrics = SchedulerMetrics()
    metrics.observe_core(core)
    assert value(metrics, BY_REASON, reason="queued") == 0
    assert value(metrics, "gang_scheduler_pending_pods") == 7


def test_every_reason_exists_from_the_start() -> None:
    metrics = SchedulerMetrics()
    for reason in PENDING_REASONS:
        assert value(metrics, BY_REASON, reason=reason) == 0


# --- per-namespace series: off by default -----------------------------------------------------
def test_no_namespace_label_by_default() -> None:
    metrics = SchedulerMetrics()
    metrics.observe_core(every_reason())
    text = metrics.exposition().decode()
    assert "namespace=" not in text
    # As label values: the DRA gauge's help text names its own "_other" driver bucket.
    assert '"team-a"' not in text and f'"{OTHER_NAMESPACES}"' not in text
    assert "namespace" not in METRIC_LABELS


def namespaced(max_namespaces: int = 20) -> SchedulerMetrics:
    return SchedulerMetrics(namespace_labels=True, max_namespaces=max_namespaces)


def test_pending_pods_by_namespace_and_reason() -> None:
    metrics = namespaced()
    metrics.observe_core(every_reason())
    assert value(metrics, NS_PENDING, namespace="team-a", reason="incomplete_gang") == 3
    assert value(metrics, NS_PENDING, namespace="team-a", reason="gated") == 1
    assert value(metrics, NS_PENDING, namespace="team-b", reason="invalid") == 1
    assert value(metrics, NS_PENDING, namespace="team-b", reason="unschedulable") == 2
    assert value(metrics, NS_PENDING, namespace="team-c", reason="queued") == 2
    # Only the reasons a namespace has: no zero series per namespace and reason.
    assert value(metrics, NS_PENDING, namespace="team-c", reason="gated") is None
    assert value(metrics, NS_PENDING, namespace=OTHER_NAMESPACES, reason="queued") is None


def test_namespaces_beyond_the_top_n_are_summed_into_other() -> None:
    core = SchedulingCore(build_profile())
    waiting = {"big": 5, "mid": 3, "small": 2, "tiny": 1}
    for namespace, count in waiting.items():
        for i in range(count):
            pod = pod_obj(f"p-{i}", namespace=namespace, gang="g", min_member=10)
            core.apply_pod(ADDED, pod, 0)
    core.refresh(0)
    metrics = namespaced(max_namespaces=2)
    metrics.observe_core(core)
    series = {
        sample.labels["namespace"]: sample.value
        for family in metrics.registry.collect()
        if family.name == NS_PENDING
        for sample in family.samples
    }
    assert series == {"big": 5, "mid": 3, OTHER_NAMESPACES: 3}

    # A namespace whose pods are gone leaves no stale series; "small" takes its place.
    for i in range(5):
        core.apply_pod(DELETED, pod_obj(f"p-{i}", namespace="big", gang="g", min_member=10), 1)
    core.refresh(1)
    metrics.observe_core(core)
    names = {
        sample.labels["namespace"]
        for family in metrics.registry.collect()
        if family.name == NS_PENDING
        for sample in family.samples
    }
    assert names == {"mid", "small", OTHER_NAMESPACES}


def test_per_quota_gauges_by_the_quotas_namespace() -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n0", gpus=8), 0)
    core.apply_elasticquota(ADDED, quota_obj("ns", {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 2}), 0)
    core.apply_elasticquota(ADDED, quota_obj("idle", {"cpu": 4}, {"nvidia.com/gpu": 6}), 0)
    for i in range(3):
        core.apply_pod(ADDED, pod_obj(f"run-{i}", namespace="ns", gpus=1, node_name="n0"), 0)
    for i in range(2):
        core.apply_pod(ADDED, pod_obj(f"w-{i}", namespace="ns", gang="w", gpus=4), 0)
    core.refresh(0)
    metrics = namespaced()
    metrics.observe_core(core)
    gpu = "gpu_milli"
    assert value(metrics, NS_QUOTA, namespace="ns", type="used", resource=gpu) == 3000
    assert value(metrics, NS_QUOTA, namespace="ns", type="min", resource=gpu) == 2000
    assert value(metrics, NS_QUOTA, namespace="ns", type="max", resource=gpu) == 8000
    assert value(metrics, NS_QUOTA, namespace="ns", type="borrowed", resource=gpu) == 1000
    assert value(metrics, NS_QUOTA, namespace="idle", type="min", resource=gpu) == 6000
    assert value(metrics, NS_QUOTA, namespace="idle", type="max", resource="cpu_milli") == 4000
    assert value(metrics, NS_QUOTA_GANGS, namespace="ns", state="borrowing") == 1
    assert value(metrics, NS_QUOTA_GANGS, namespace="ns", state="guaranteed") == 0
    assert value(metrics, NS_QUOTA_GANGS, namespace="idle", state="borrowing") == 0
    # The cluster-wide totals are the same with or without the namespace series.
    plain = SchedulerMetrics()
    plain.observe_core(core)
    for kind in ("used", "min", "max", "borrowed"):
        total = value(plain, "gang_scheduler_quota_amount", type=kind, resource=gpu)
        per_ns = sum(
            value(metrics, NS_QUOTA, namespace=ns, type=kind, resource=gpu) or 0
            for ns in ("ns", "idle")
        )
        assert total == per_ns, kind


def test_quota_namespaces_beyond_the_top_n_are_summed_into_other() -> None:
    core = SchedulingCore(build_profile())
    for name, gpus in (("a", 1), ("b", 2), ("c", 3)):
        core.apply_elasticquota(ADDED, quota_obj(name, {}, {"nvidia.com/gpu": gpus}), 0)
    core.apply_pod(ADDED, pod_obj("w", namespace="c", gang="w", min_member=2), 0)
    core.refresh(0)
    metrics = namespaced(max_namespaces=1)
    metrics.observe_core(core)
    # "c" has the pending pod; "a" and "b" are summed.
    assert value(metrics, NS_QUOTA, namespace="c", type="min", resource="gpu_milli") == 3000
    assert value(metrics, NS_QUOTA, namespace=OTHER_NAMESPACES, type="min", resource="gpu_milli")
    assert (
        value(metrics, NS_QUOTA, namespace=OTHER_NAMESPACES, type="min", resource="gpu_milli")
        == 3000
    )
    assert value(metrics, NS_QUOTA, namespace="a", type="min", resource="gpu_milli") is None


def test_namespace_series_labels_are_the_documented_ones() -> None:
    metrics = namespaced()
    metrics.observe_core(every_reason())
    for sample in parse(metrics.exposition().decode()):
        assert set(sample[1]) - {"le", "namespace"} <= METRIC_LABELS, sample


# --- process and Python collectors ------------------------------------------------------------
def test_process_and_python_collectors_are_on_the_registry() -> None:
    samples = parse(SchedulerMetrics().exposition().decode())
    names = {name for name, _, _ in samples}
    for wanted in PROCESS_SERIES:
        assert wanted in names, wanted
    for sample in samples:
        assert set(sample[1]) - {"le"} <= METRIC_LABELS, sample


# --- configuration ----------------------------------------------------------------------------
def test_the_metrics_section_is_read_and_checked() -> None:
    assert parse_config("").metrics == MetricsConfig(namespace_labels=False, max_namespaces=20)
    config = parse_config("metrics:\n  namespaceLabels: true\n  maxNamespaces: 5\n")
    assert config.metrics == MetricsConfig(namespace_labels=True, max_namespaces=5)
    with pytest.raises(ConfigError, match=r"metrics\.namespaceLabels"):
        parse_config("metrics:\n  namespaceLabels: yes please\n")
    with pytest.raises(ConfigError, match=r"metrics\.maxNamespaces"):
        parse_config("metrics:\n  maxNamespaces: 0\n")
