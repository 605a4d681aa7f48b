"""Prometheus metrics: events counted, gauges read from the core, buckets, exposition."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from cache.cluster import EventType
from cache.gpu import TOPOLOGY_ANNOTATION, GpuDevice, format_topology
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from scheduler.process.metrics import (
    ATTEMPT_BUCKETS,
    BIND_BUCKETS,
    CONTENT_TYPE,
    WAIT_BUCKETS,
    SchedulerMetrics,
)
from tests.factories import node_obj, pod_obj

ADDED, DELETED = EventType.ADDED, EventType.DELETED


def node_with_devices(name: str, devices: list[GpuDevice]) -> dict[str, Any]:
    """A node whose node agent published these devices (models, health), links unknown."""
    obj = node_obj(name, gpus=len(devices))
    obj["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = format_topology(devices, None)
    return obj


def small_cluster() -> SchedulingCore:
    """Two A100 boxes, a T4 box with one unhealthy device, a box mixing models, an
    over-committed V100, a GPU node with no model, a CPU node; pods bound and pending."""
    core = SchedulingCore(build_profile())
    nodes = [
        node_obj("a100-1", gpus=8, model="A100"),
        node_obj("a100-2", gpus=8, model="A100"),
        node_with_devices(
            "t4-1", [GpuDevice(i, f"GPU-t4-{i}", "T4", 15360, 0, healthy=i != 3) for i in range(4)]
        ),
        node_with_devices(
            "mixed",
            [GpuDevice(0, "GPU-m-0", "A100", 81920, 0), GpuDevice(1, "GPU-m-1", "T4", 15360, 0)],
        ),
        node_obj("v100", gpus=1, model="V100"),
        node_obj("anonymous", gpus=2),
        node_obj("cpu-1"),
    ]
    for node in nodes:
        core.apply_node(ADDED, node, 0)
    bound = [
        pod_obj("trainer", gpus=2, node_name="a100-1", phase="Running"),
        pod_obj("nb-1", vgpu=300, node_name="t4-1", phase="Running"),
        pod_obj("nb-2", vgpu=500, node_name="t4-1", phase="Running"),
        # Two whole-GPU pods of another scheduler on a one-GPU node: over-committed.
        pod_obj("other-1", gpus=1, node_name="v100", phase="Running", scheduler="x"),
        pod_obj("other-2", gpus=1, node_name="v100", phase="Running", scheduler="x"),
    ]
    pending = [pod_obj(f"waits-{i}", gang="waits", min_member=4, gpus=1) for i in range(3)]
    pending += [pod_obj(f"ready-{i}", gang="ready", min_member=2, gpus=1) for i in range(2)]
    pending.append(pod_obj("alone", cpu="2"))
    for pod in bound + pending:
        core.apply_pod(ADDED, pod, 0)
    core.refresh(0)
    return core


def value(metrics: SchedulerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def gpu(metrics: SchedulerMetrics, model: str) -> tuple[float | None, ...]:
    return tuple(
        value(metrics, f"gang_scheduler_gpu_{kind}", model=model)
        for kind in (
            "capacity_gpus",
            "capacity_milli",
            "allocated_gpus",
            "allocated_milli",
            "unhealthy_gpus",
        )
    )


# --- gauges read from the core ----------------------------------------------------------------
def test_observe_core_sets_every_state_gauge() -> None:
    core = small_cluster()
    metrics = SchedulerMetrics()
    metrics.observe_core(core)
    assert value(metrics, "gang_scheduler_pending_pods") == 6
    assert value(metrics, "gang_scheduler_pending_gangs") == 3
    assert value(metrics, "gang_scheduler_incomplete_gangs") == 1
    assert value(metrics, "gang_scheduler_queue_gangs", state="active") == 2
    assert value(metrics, "gang_scheduler_queue_gangs", state="unschedulable") == 0
    assert value(metrics, "gang_scheduler_cache_size", type="nodes") == 7
    assert value(metrics, "gang_scheduler_cache_size", type="pods") == 11
    assert value(metrics, "gang_scheduler_cache_size", type="assumed_pods") == 0
    assert value(metrics, "gang_scheduler_cache_size", type="podgroups") == 0
    # (devices, milli, allocated devices, allocated milli, unhealthy)
    assert gpu(metrics, "A100") == (17, 17000, 2, 2000, 0)
    # nb-1 (300) and nb-2 (500) share the tightest device that fits: one device in use.
    assert gpu(metrics, "T4") == (5, 5000, 1, 800, 1)
    # Over-committed: the device counts once, 1000 milli.
    assert gpu(metrics, "V100") == (1, 1000, 1, 1000, 0)
    assert gpu(metrics, "unknown") == (2, 2000, 0, 0, 0)


def test_gauges_follow_plans_and_a_node_leaving() -> None:
    core = small_cluster()
    metrics = SchedulerMetrics()
    placed = 0
    while (attempt := core.schedule_next(1)) is not None:
        assert isinstance(attempt.result, Plan)
        placed += len(attempt.result.placements)
    assert placed == 3  # gang "ready" and the pod alone; binds in flight
    metrics.observe_core(core)
    assert value(metrics, "gang_scheduler_cache_size", type="assumed_pods") == 3
    assert value(metrics, "gang_scheduler_pending_pods") == 3
    assert value(metrics, "gang_scheduler_pending_gangs") == 1
    assert value(metrics, "gang_scheduler_incomplete_gangs") == 1
    assert value(metrics, "gang_scheduler_queue_gangs", state="active") == 0
    # Reserved GPUs count as allocated: the gang fills the two-GPU node with no model.
    assert gpu(metrics, "unknown") == (2, 2000, 2, 2000, 0)

    for name in ("t4-1", "mixed"):
        core.apply_node(DELETED, {"metadata": {"name": name}}, 2)
    metrics.observe_core(core)
    assert gpu(metrics, "T4") == (None,) * 5  # no stale series for a model that is gone
    assert "T4" not in metrics.exposition().decode()
    assert gpu(metrics, "A100")[0] == 16


def test_observe_core_on_an_empty_core() -> None:
    metrics = SchedulerMetrics()
    metrics.observe_core(SchedulingCore(build_profile()))
    assert value(metrics, "gang_scheduler_pending_pods") == 0
    assert value(metrics, "gang_scheduler_cache_size", type="nodes") == 0
    assert "gang_scheduler_gpu_capacity_gpus{" not in metrics.exposition().decode()


# --- events reported by the adapter -------------------------------------------------------------
def test_attempts_binds_relists_and_leader() -> None:
    metrics = SchedulerMetrics()
    metrics.attempt("scheduled", 0.003)
    metrics.attempt("scheduled", 0.2)
    metrics.attempt("unschedulable", 1.5)
    metrics.bound(0.004, since_created=42.0)
    metrics.bound(0.02, since_created=-3.0)  # clock skew counts as 0
    metrics.bound(0.03)
    metrics.gang_bound(7.5)
    metrics.bind_failed("conflict")
    metrics.bind_failed("timeout")
    metrics.bind_failed("timeout")
    metrics.relisted("pods")
    metrics.set_leader(True)
    metrics.cycle_completed()
    metrics.cycle_completed()

    assert value(metrics, "gang_scheduler_scheduling_cycles_total") == 2
    attempts = "gang_scheduler_schedule_attempts_total"
    assert value(metrics, attempts, result="scheduled") == 2
    assert value(metrics, attempts, result="unschedulable") == 1
    assert value(metrics, attempts, result="error") == 0  # exists before it happens
    duration = "gang_scheduler_scheduling_attempt_duration_seconds"
    assert value(metrics, f"{duration}_bucket", result="scheduled", le="0.005") == 1
    assert value(metrics, f"{duration}_bucket", result="scheduled", le="0.25") == 2
    assert value(metrics, f"{duration}_sum", result="unschedulable") == 1.5
    assert value(metrics, "gang_scheduler_bind_duration_seconds_count") == 3
    e2e = "gang_scheduler_pod_scheduling_duration_seconds"
    assert value(metrics, f"{e2e}_count") == 2
    assert value(metrics, f"{e2e}_bucket", le="0.01") == 1
    assert value(metrics, f"{e2e}_bucket", le="60.0") == 2
    assert value(metrics, "gang_scheduler_gang_wait_duration_seconds_sum") == 7.5
    failures = "gang_scheduler_bind_failures_total"
    assert value(metrics, failures, reason="timeout") == 2
    assert value(metrics, failures, reason="conflict") == 1
    assert value(metrics, failures, reason="not_found") == 0
    relists = "gang_scheduler_informer_relists_total"
    assert value(metrics, relists, resource="pods") == 1
    assert value(metrics, relists, resource="podgroups") == 0
    assert value(metrics, "gang_scheduler_leader") == 1
    metrics.set_leader(False)
    assert value(metrics, "gang_scheduler_leader") == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.attempt("done", 1.0), "unknown attempt result 'done'"),
        (lambda m: m.bind_failed("oops"), "unknown bind failure reason 'oops'"),
        (lambda m: m.relisted("leases"), "unknown resource 'leases'"),
    ],
)
def test_unknown_label_values_are_refused(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(SchedulerMetrics())


# --- buckets and exposition --------------------------------------------------------------------
def test_histogram_buckets() -> None:
    text = SchedulerMetrics().exposition().decode()

    def buckets(name: str, labels: str = "") -> list[str]:
        """The `le` bounds of one histogram series, in exposition order."""
        found = []
        for line in text.splitlines():
            if line.startswith(f"{name}_bucket{{") and labels in line:
                match = re.search(r'le="([^"]+)"', line)
                assert match is not None
                found.append(match[1])
        return found

    def expected(bounds: tuple[float, ...]) -> list[str]:
        return [repr(float(b)) for b in bounds] + ["+Inf"]

    attempt = "gang_scheduler_scheduling_attempt_duration_seconds"
    assert buckets(attempt, 'result="scheduled"') == expected(ATTEMPT_BUCKETS)
    assert buckets("gang_scheduler_bind_duration_seconds") == expected(BIND_BUCKETS)
    assert buckets("gang_scheduler_pod_scheduling_duration_seconds") == expected(WAIT_BUCKETS)
    assert buckets("gang_scheduler_gang_wait_duration_seconds") == expected(WAIT_BUCKETS)
    # Bind latency tops out at the default bind timeout; waits reach a day.
    assert BIND_BUCKETS[-1] == 10.0 and WAIT_BUCKETS[-1] == 86400.0
    assert list(ATTEMPT_BUCKETS) == sorted(ATTEMPT_BUCKETS)


def test_exposition_names_every_metric() -> None:
    metrics = SchedulerMetrics()
    metrics.observe_core(small_cluster())
    text = metrics.exposition().decode()
    for name in (
        "gang_scheduler_pending_pods",
        "gang_scheduler_pending_gangs",
        "gang_scheduler_incomplete_gangs",
        "gang_scheduler_queue_gangs",
        "gang_scheduler_schedule_attempts_total",
        "gang_scheduler_scheduling_cycles_total",
        "gang_scheduler_scheduling_attempt_duration_seconds",
        "gang_scheduler_pod_scheduling_duration_seconds",
        "gang_scheduler_gang_wait_duration_seconds",
        "gang_scheduler_bind_duration_seconds",
        "gang_scheduler_bind_failures_total",
        "gang_scheduler_cache_size",
        "gang_scheduler_informer_relists_total",
        "gang_scheduler_gpu_capacity_gpus",
        "gang_scheduler_gpu_capacity_milli",
        "gang_scheduler_gpu_allocated_gpus",
        "gang_scheduler_gpu_allocated_milli",
        "gang_scheduler_gpu_unhealthy_gpus",
        "gang_scheduler_leader",
    ):
        assert f"\n{name}" in text, name
    assert 'gang_scheduler_gpu_capacity_gpus{model="A100"} 17.0' in text
    # Every metric name is ours, or prometheus_client's process and Python collectors'.
    names = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert all(name.startswith(("gang_scheduler_", "process_", "python_")) for name in names)


def steady(body: bytes) -> list[bytes]:
    """The exposition without the samples that move between two scrapes by themselves
    (the process's CPU time and memory, the garbage collector's counts)."""
    return [line for line in body.splitlines() if not line.startswith((b"process_", b"python_gc_"))]


def test_render_negotiates_the_format() -> None:
    metrics = SchedulerMetrics()
    body, content_type = metrics.render(None)
    assert content_type == CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    assert steady(body) == steady(metrics.exposition())
    body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


def test_instances_have_their_own_registries() -> None:
    first, second = SchedulerMetrics(), SchedulerMetrics()  # no duplicate registration
    first.set_leader(True)
    assert value(second, "gang_scheduler_leader") == 0
    assert REGISTRY.get_sample_value("gang_scheduler_leader") is None


def test_docs_list_every_metric() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
    listed = set(re.findall(r"^\| `(gang_scheduler_\w+)` \|", docs.read_text("utf-8"), re.M))
    exposed = set()
    for family in SchedulerMetrics(namespace_labels=True).registry.collect():
        if not family.name.startswith("gang_scheduler_"):
            continue  # process_* and python_*: prometheus_client's, listed as groups
        suffix = "_total" if family.type == "counter" else ""
        exposed.add(family.name + suffix)
    assert listed == exposed
