"""The scheduler's Prometheus metrics, `gang_scheduler_*` (docs/metrics.md lists them).

`SchedulerMetrics` owns its own `CollectorRegistry`, not prometheus_client's global
one, so that tests and several instances in one process never collide. The adapter
reports events as they happen (`attempt`, `bound`, `gang_bound`, `bind_failed`,
`relisted`, `set_leader`); the gauges that describe state are refreshed from a
`SchedulingCore` in one pass by `observe_core`, which the HTTP server calls on each
scrape, so they are as fresh as the scrape and cost nothing between scrapes.

Latencies are histograms in seconds; their buckets are chosen per metric (see the
constants below and docs/metrics.md). Label values are closed sets: an unknown one is
a programming error in the caller and raises ValueError, so a typo cannot create a
series nobody alerts on.

No label names a tenant unless the operator asks for it (`metrics.namespaceLabels`):
then `_NamespaceSeries` adds pending pods and quota gauges per namespace, for the
namespaces with the most pending pods and `_other` for the rest, so that the number of
series stays bounded whatever tenants create.

The registry also carries prometheus_client's process and platform collectors
(`process_*`, `python_*`), which only its global registry has by default.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Sized
from dataclasses import dataclass, field
from typing import Literal, get_args

from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.registry import Collector

from cache.cluster import Reservation
from cache.gpu import PRODUCT_LABEL, GpuDevice
from cache.pod import PodInfo
from cache.quota import DIMENSIONS, GPU
from cache.resources import CPU, MEMORY, MILLI_PER_GPU
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import Gang
from scheduler.gangs.queue import STATES, GangState
from scheduler.process.version import python_version, version
from scheduler.sharing.quotas import would_borrow

AttemptResult = Literal["scheduled", "unschedulable", "error"]
# conflict: 409 (already bound); not_found: 404 (pod or node gone); timeout: no answer
# within bindTimeoutSeconds; rejected: any other 4xx; server_error: 5xx or a broken
# connection.
BindFailureReason = Literal["conflict", "not_found", "timeout", "rejected", "server_error"]
Resource = Literal[
    "pods",
    "nodes",
    "podgroups",
    "namespaces",
    "persistentvolumeclaims",
    "persistentvolumes",
    "storageclasses",
    "csinodes",
    "elasticquotas",
    "volcano-podgroups",
    "native-podgroups",
    "resourceslices",
    "deviceclasses",
    "resourceclaims",
    "kai-podgroups",
    "jobs",
    "jobsets",
    "pytorchjobs",
    "mpijobs",
    "rayclusters",
]
ATTEMPT_RESULTS: tuple[AttemptResult, ...] = get_args(AttemptResult)
# evicted: every victim evicted; refused: a PodDisruptionBudget said 429; failed: any
# other error (the decision is dropped either way and the gang retries).
# Pods that still wait though the cache holds room for them: a preemptor's nominated
# room, a starving gang's reservation (no bind is made for either).
_WAITING = (None, Reservation.NOMINATED, Reservation.RESERVED)
PreemptionOutcome = Literal["evicted", "refused", "failed"]
PREEMPTION_OUTCOMES: tuple[PreemptionOutcome, ...] = get_args(PreemptionOutcome)
BIND_FAILURE_REASONS: tuple[BindFailureReason, ...] = get_args(BindFailureReason)
RESOURCES: tuple[Resource, ...] = get_args(Resource)
CACHE_KINDS = ("nodes", "pods", "assumed_pods", "podgroups")
# Every label name a metric may carry. /metrics is served to anyone who can reach the
# pod (docs/security.md, "Endpoints"), so no label may name a tenant: no namespace, gang,
# pod or node. tests/scheduler/test_metrics.py fails on a label outside this set.
# The process and Python collectors add `generation` (python_gc_*) and the interpreter's
# `implementation`, `major`, `minor`, `patchlevel` (python_info): no tenant either. The
# opt-in namespace series (metrics.namespaceLabels) add `namespace` beside these.
METRIC_LABELS = frozenset(
    {"result", "reason", "resource", "state", "type", "model", "version", "python"}
    # `driver`: a DRA driver that publishes ResourceSlices (cluster-scoped objects only
    # drivers write), else "_other" (DraCache.taken_by_driver).
    | {"driver"}
    | {"generation", "implementation", "major", "minor", "patchlevel"}
)
# Why a pending pod waits, one reason per pod, checked in this order:
# invalid: its spec is refused (an event names the field) or its gang could not be read;
# gated: it still has scheduling gates (kube-scheduler's SchedulingGated);
# incomplete_gang: its gang is not ready (members missing, a role short, or others gated);
# queued: its gang is ready and due (or being planned); backoff: it failed and a change
# that could help arrived, it is retried when its backoff ends; unschedulable: it failed
# and waits for such a change.
PendingReason = Literal["invalid", "gated", "incomplete_gang", "queued", "backoff", "unschedulable"]
PENDING_REASONS: tuple[PendingReason, ...] = get_args(PendingReason)
_REASON_OF_STATE: dict[GangState | None, PendingReason] = {
    "active": "queued",
    "in_flight": "queued",
    "backoff": "backoff",
    "unschedulable": "unschedulable",
    None: "queued",  # ready since the queue was last refreshed: it joins as active
}
# The namespace series' bucket for every namespace beyond the top N: "_" starts no
# namespace name (a DNS label), so it cannot be confused with a real one.
OTHER_NAMESPACES = "_other"
UNKNOWN_MODEL = "unknown"
QUOTA_TOTALS = ("used", "min", "max", "borrowed")
QUOTA_RESOURCE_NAMES = {GPU: "gpu_milli", CPU: "cpu_milli", MEMORY: "memory_bytes"}

# The text format every Prometheus version reads; /metrics negotiates others (render).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# Planning one gang: a gang of one on a small cluster takes well under a millisecond,
# a 1,000-member gang with a diagnosis over 5,000 nodes takes seconds.
ATTEMPT_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
# One Binding request: a few milliseconds against a healthy API server, bounded by
# timeouts.bindTimeoutSeconds (10 s by default), so the top bucket is 10 s.
BIND_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
# Waits: from tens of milliseconds (a gang placed at once) to a day (a big gang queued
# behind others on a full cluster), roughly doubling, with the marks operators read
# (1 min, 5 min, 1 h, 8 h).
WAIT_BUCKETS = (
    0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0,
)  # fmt: skip


def _check(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(allowed)}")
    return value


class SchedulerMetrics:
    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        namespace_labels: bool = False,
        max_namespaces: int = 20,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        # What the global registry has by default (CPU, memory, file descriptors, start
        # time; the interpreter and its garbage collector), on ours: a scrape shows
        # whether the scheduler leaks or burns CPU without a node exporter.
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        if GC_COLLECTOR is not None:  # absent on interpreters without gc.get_stats
            GCCollector(registry=reg)
        # --- work waiting ---------------------------------------------------------------
        self.pending_pods = Gauge(
            "gang_scheduler_pending_pods",
            "Pods of this scheduler waiting to be placed (not bound, not reserved).",
            registry=reg,
        )
        self.pending_gangs = Gauge(
            "gang_scheduler_pending_gangs",
            "Gangs with at least one member waiting to be placed.",
            registry=reg,
        )
        self.pending_by_reason = Gauge(
            "gang_scheduler_pending_pods_by_reason",
            "Pods of this scheduler waiting to be placed, by why they wait (invalid, "
            "gated, incomplete_gang, queued, backoff, unschedulable).",
            ["reason"],
            registry=reg,
        )
        self.incomplete_gangs = Gauge(
            "gang_scheduler_incomplete_gangs",
            "Pending gangs not ready to place: fewer than minMember members exist or "
            "can be scheduled as written.",
            registry=reg,
        )
        self.queue_gangs = Gauge(
            "gang_scheduler_queue_gangs",
            "Ready gangs in the scheduling queue, by state.",
            ["state"],
            registry=reg,
        )
        # --- scheduling -----------------------------------------------------------------
        self.attempts = Counter(
            "gang_scheduler_schedule_attempts",
            "Attempts to place a gang, by result.",
            ["result"],
            registry=reg,
        )
        # Liveness of the loop, and the event tests wait on: a cycle that completed has
        # planned every gang that was due when it began (runner.py, `_cycle`).
        self.cycles = Counter(
            "gang_scheduler_scheduling_cycles",
            "Scheduling cycles completed (while leading: at least one a second).",
            registry=reg,
        )
        self.attempt_duration = Histogram(
            "gang_scheduler_scheduling_attempt_duration_seconds",
            "Time to plan one gang (snapshot update and planning), by result.",
            ["result"],
            buckets=ATTEMPT_BUCKETS,
            registry=reg,
        )
        self.pod_scheduling_duration = Histogram(
            "gang_scheduler_pod_scheduling_duration_seconds",
            "End-to-end latency: from a pod's creation to its successful bind.",
            buckets=WAIT_BUCKETS,
            registry=reg,
        )
        self.gang_wait = Histogram(
            "gang_scheduler_gang_wait_duration_seconds",
            "From a gang becoming ready (minMember members exist) to its last member bound.",
            buckets=WAIT_BUCKETS,
            registry=reg,
        )
        # --- binding --------------------------------------------------------------------
        self.bind_duration = Histogram(
            "gang_scheduler_bind_duration_seconds",
            "Latency of one successful Binding request.",
            buckets=BIND_BUCKETS,
            registry=reg,
        )
        self.bind_failures = Counter(
            "gang_scheduler_bind_failures",
            "Binding requests that failed, by reason.",
            ["reason"],
            registry=reg,
        )
        # --- preemption (scheduler/sharing/preemption.py) ----------------------------------------
        self.preemptions = Counter(
            "gang_scheduler_preemptions",
            "Preemption decisions carried out, by result.",
            ["result"],
            registry=reg,
        )
        self.preempted_gangs = Counter(
            "gang_scheduler_preempted_gangs",
            "Victim gangs evicted whole so that a higher-priority gang fits.",
            registry=reg,
        )
        # --- cache and informers --------------------------------------------------------
        self.cache_size = Gauge(
            "gang_scheduler_cache_size",
            "Objects in the scheduler's cache, by type.",
            ["type"],
            registry=reg,
        )
        self.relists = Counter(
            "gang_scheduler_informer_relists",
            "Full relists by an informer (start, 410 Gone, broken watch), by resource.",
            ["resource"],
            registry=reg,
        )
        # --- GPUs -----------------------------------------------------------------------
        self.gpu_capacity = Gauge(
            "gang_scheduler_gpu_capacity_gpus",
            "GPU devices on the cluster's nodes, by model.",
            ["model"],
            registry=reg,
        )
        self.gpu_capacity_milli = Gauge(
            "gang_scheduler_gpu_capacity_milli",
            "GPU capacity in milli-GPUs (1000 per device), by model.",
            ["model"],
            registry=reg,
        )
        self.gpu_allocated = Gauge(
            "gang_scheduler_gpu_allocated_gpus",
            "GPU devices with any share allocated (no longer free for a whole-GPU "
            "request), by model.",
            ["model"],
            registry=reg,
        )
        self.gpu_allocated_milli = Gauge(
            "gang_scheduler_gpu_allocated_milli",
            "Allocated milli-GPUs, by model (an over-committed device counts 1000).",
            ["model"],
            registry=reg,
        )
        self.gpu_unhealthy = Gauge(
            "gang_scheduler_gpu_unhealthy_gpus",
            "GPU devices the node agent reports unhealthy, by model.",
            ["model"],
            registry=reg,
        )
        # --- DRA devices (docs/dra.md) -------------------------------------------------------
        self.dra_devices = Gauge(
            "gang_scheduler_dra_devices",
            "DRA devices taken, by driver and state: allocated (a ResourceClaim's "
            "status.allocation names it), held (a claim this scheduler is allocating, "
            "its write not yet seen) or kept (for a gang that evicted their claims' "
            "consumers, until it is planned). Drivers that publish no ResourceSlice: _other.",
            ["driver", "state"],
            registry=reg,
        )
        self._dra_drivers: set[str] = set()
        # --- quotas (docs/quotas.md) ------------------------------------------------------
        # Summed over every ElasticQuota: no namespace label, since /metrics may be read
        # by anyone who reaches the pod (docs/security.md, "Endpoints"); a namespace's own
        # usage is on its ElasticQuota (status.used).
        self.quotas = Gauge(
            "gang_scheduler_quotas",
            "ElasticQuotas governing a namespace.",
            registry=reg,
        )
        self.quota_total = Gauge(
            "gang_scheduler_quota_amount",
            "Summed over all ElasticQuotas, by type (used, min, max, borrowed: used beyond "
            "min) and resource (gpu_milli, cpu_milli, memory_bytes); max sums the quotas "
            "that set one.",
            ["type", "resource"],
            registry=reg,
        )
        self.quota_pending_gangs = Gauge(
            "gang_scheduler_quota_pending_gangs",
            "Ready gangs waiting in namespaces with an ElasticQuota, by state (guaranteed: "
            "within min; borrowing: beyond it).",
            ["state"],
            registry=reg,
        )
        # --- process --------------------------------------------------------------------
        self.leader = Gauge(
            "gang_scheduler_leader",
            "1 while this replica holds the leader lease (and schedules), else 0.",
            registry=reg,
        )
        # Which build runs (a dashboard joins on it; an alert can spot mixed versions).
        self.build_info = Gauge(
            "gang_scheduler_build_info",
            "1, labelled with the scheduler's version and the Python it runs on.",
            ["version", "python"],
            registry=reg,
        )
        self.build_info.labels(version(), python_version()).set(1)
        # Every closed label value exists from the start, so a rate() over a series that
        # has not happened yet reads 0 instead of nothing.
        for result in ATTEMPT_RESULTS:
            self.attempts.labels(result)
            self.attempt_duration.labels(result)
        for reason in BIND_FAILURE_REASONS:
            self.bind_failures.labels(reason)
        for outcome in PREEMPTION_OUTCOMES:
            self.preemptions.labels(outcome)
        for resource in RESOURCES:
            self.relists.labels(resource)
        for state in STATES:
            self.queue_gangs.labels(state)
        for waiting in PENDING_REASONS:
            self.pending_by_reason.labels(waiting)
        self._namespaces: _NamespaceSeries | None = None
        if namespace_labels:
            self._namespaces = _NamespaceSeries(max_namespaces)
            reg.register(self._namespaces)
        for kind in CACHE_KINDS:
            self.cache_size.labels(kind)
        self._gpu_gauges = (
            self.gpu_capacity,
            self.gpu_capacity_milli,
            self.gpu_allocated,
            self.gpu_allocated_milli,
            self.gpu_unhealthy,
        )
        self._models: set[str] = set()
        self._summaries: dict[str, _DeviceSummary] = {}

    # --- events the adapter reports -------------------------------------------------------
    def attempt(self, result: AttemptResult, seconds: float) -> None:
        """One gang planned (or failed to be): its result and how long it took."""
        _check(result, ATTEMPT_RESULTS, "attempt result")
        self.attempts.labels(result).inc()
        self.attempt_duration.labels(result).observe(max(0.0, seconds))

    def cycle_completed(self) -> None:
        """One pass of the scheduling loop ended (every due gang planned, feedback
        queued)."""
        self.cycles.inc()

    def bound(self, bind_seconds: float, since_created: float | None = None) -> None:
        """One pod's Binding succeeded after `bind_seconds`; `since_created` is the
        time from the pod's creationTimestamp to now (None when unknown). Negative
        spans (clock skew with the API server) count as 0."""
        self.bind_duration.observe(max(0.0, bind_seconds))
        if since_created is not None:
            self.pod_scheduling_duration.observe(max(0.0, since_created))

    def gang_bound(self, wait_seconds: float) -> None:
        """A whole gang is bound, `wait_seconds` after it became ready."""
        self.gang_wait.observe(max(0.0, wait_seconds))

    def bind_failed(self, reason: BindFailureReason) -> None:
        self.bind_failures.labels(_check(reason, BIND_FAILURE_REASONS, "bind failure reason")).inc()

    def relisted(self, resource: Resource) -> None:
        self.relists.labels(_check(resource, RESOURCES, "resource")).inc()

    def preemption(self, outcome: PreemptionOutcome, victims: int) -> None:
        """A preemption decision carried out (`victims` gangs evicted) or dropped."""
        self.preemptions.labels(_check(outcome, PREEMPTION_OUTCOMES, "outcome")).inc()
        if outcome == "evicted":
            self.preempted_gangs.inc(victims)

    def set_leader(self, leader: bool) -> None:
        self.leader.set(1 if leader else 0)

    # --- state, read from the core ----------------------------------------------------------
    def observe_core(self, core: SchedulingCore) -> None:
        """Refresh every state gauge from the core in one pass over its nodes and its
        pending gangs (5,000 nodes of 8 GPUs: about 10 ms). Nothing in the core changes."""
        cache = core.cache
        # Gangs as of the core's last refresh; members reserved since (a plan being
        # bound) no longer wait, so they are left out here already.
        pods = gangs = incomplete = 0
        reasons: Tally[tuple[str, PendingReason]] = Tally()  # (namespace, reason) -> pods
        for key, gang in core.gangs.items():
            waiting = [pod for pod in gang.pending if cache.reservation(pod.uid) in _WAITING]
            if waiting:
                pods += len(waiting)
                gangs += 1
                ready = gang.ready
                incomplete += not ready
                _count_reasons(reasons, gang, waiting, ready, core.queue.state(key))
        self.pending_pods.set(pods)
        self.pending_gangs.set(gangs)
        self.incomplete_gangs.set(incomplete)
        totals: Tally[PendingReason] = Tally()
        for (_, reason), count in reasons.items():
            totals[reason] += count
        for reason in PENDING_REASONS:
            self.pending_by_reason.labels(reason).set(totals[reason])
        for state, count in core.queue.counts().items():
            self.queue_gangs.labels(state).set(count)

        self.cache_size.labels("nodes").set(_count(cache.nodes()))
        self.cache_size.labels("pods").set(_count(cache.pods()))
        self.cache_size.labels("assumed_pods").set(len(cache.assumed()))
        self.cache_size.labels("podgroups").set(len(cache.podgroups()))
        self._observe_gpus(core)
        self._observe_dra(core)
        quotas = self._observe_quotas(core)
        if self._namespaces is not None:
            self._namespaces.observe(reasons, quotas)

    def _observe_quotas(self, core: SchedulingCore) -> dict[str, _QuotaRow]:
        """The cluster-wide quota gauges; returns each namespace's figures."""
        rows = _quota_rows(core)
        total = _QuotaRow()
        for row in rows.values():
            total.add(row)
        self.quotas.set(len(rows))
        for kind in QUOTA_TOTALS:
            for name in QUOTA_RESOURCE_NAMES.values():
                self.quota_total.labels(kind, name).set(total.amounts.get((kind, name), 0))
        for state, count in total.pending.items():
            self.quota_pending_gangs.labels(state).set(count)
        return rows

    def _observe_gpus(self, core: SchedulingCore) -> None:
        # model -> [devices, allocated devices, allocated milli, unhealthy devices]
        totals: dict[str, list[int]] = {}
        summaries: dict[str, _DeviceSummary] = {}
        for node in core.cache.nodes():
            if not node.devices:
                continue
            summary = self._summaries.get(node.name)
            if summary is None or summary.devices is not node.devices:
                summary = _DeviceSummary.of(node.devices, node.labels.get(PRODUCT_LABEL))
            summaries[node.name] = summary
            free = node.gpu_free
            if summary.model is not None and min(free) >= 0 and max(free) <= MILLI_PER_GPU:
                # The usual node (one model, no over-commit): C-level sums, no loop.
                row = totals.get(summary.model)
                if row is None:
                    row = totals[summary.model] = [0, 0, 0, 0]
                count = len(free)
                row[0] += count
                row[1] += count - free.count(MILLI_PER_GPU)
                row[2] += count * MILLI_PER_GPU - sum(free)
                row[3] += summary.unhealthy
                continue
            for device, model, left in zip(node.devices, summary.models, free, strict=False):
                row = totals.get(model)
                if row is None:
                    row = totals[model] = [0, 0, 0, 0]
                taken = MILLI_PER_GPU - min(max(left, 0), MILLI_PER_GPU)
                row[0] += 1
                row[1] += taken > 0
                row[2] += taken
                row[3] += not device.healthy
        self._summaries = summaries
        for model, (devices, allocated, milli, unhealthy) in totals.items():
            self.gpu_capacity.labels(model).set(devices)
            self.gpu_capacity_milli.labels(model).set(devices * MILLI_PER_GPU)
            self.gpu_allocated.labels(model).set(allocated)
            self.gpu_allocated_milli.labels(model).set(milli)
            self.gpu_unhealthy.labels(model).set(unhealthy)
        # A model whose last node left must not keep reporting its old numbers.
        for model in self._models - totals.keys():
            for gauge in self._gpu_gauges:
                gauge.remove(model)
        self._models = set(totals)

    def _observe_dra(self, core: SchedulingCore) -> None:
        taken = core.dra.taken_by_driver()
        for driver, (allocated, held, kept) in taken.items():
            self.dra_devices.labels(driver, "allocated").set(allocated)
            self.dra_devices.labels(driver, "held").set(held)
            self.dra_devices.labels(driver, "kept").set(kept)
        # A driver whose last device was released must not keep its old numbers.
        for driver in self._dra_drivers - taken.keys():
            for state in ("allocated", "held", "kept"):
                self.dra_devices.remove(driver, state)
        self._dra_drivers = set(taken)

    # --- exposition ---------------------------------------------------------------------------
    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format (CONTENT_TYPE)."""
        return generate_latest(self.registry)

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The metrics in the format the scraper's Accept header asks for (OpenMetrics
        when it asks for it, else the text format), and its content type."""
        encoder: Callable[[CollectorRegistry], bytes]
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


@dataclass(frozen=True, slots=True)
class _DeviceSummary:
    """What observe_core needs of a node's devices, kept while the node's device tuple
    is the same object (its inventory did not change)."""

    devices: tuple[GpuDevice, ...]
    models: tuple[str, ...]  # per device, "unknown" when neither it nor the node says
    model: str | None  # the one model of every device, None when they differ
    unhealthy: int

    @staticmethod
    def of(devices: tuple[GpuDevice, ...], product_label: str | None) -> _DeviceSummary:
        fallback = product_label or UNKNOWN_MODEL
        models = tuple(device.model or fallback for device in devices)
        uniform = models[0] if models and all(m == models[0] for m in models) else None
        unhealthy = sum(1 for device in devices if not device.healthy)
        return _DeviceSummary(devices, models, uniform, unhealthy)


def _count(items: Iterable[object]) -> int:
    # The cache hands out dict views typed as iterables; counting them must not walk
    # 150,000 pods.
    if isinstance(items, Sized):
        return len(items)
    return sum(1 for _ in items)


def _count_reasons(
    reasons: Tally[tuple[str, PendingReason]],
    gang: Gang,
    waiting: list[PodInfo],
    ready: bool,
    state: GangState | None,
) -> None:
    """Add each waiting member of `gang` under its one reason (PENDING_REASONS)."""
    namespace = gang.namespace
    for pod in waiting:
        reason: PendingReason
        if pod.problems or gang.broken is not None:
            reason = "invalid"
        elif pod.scheduling_gates:
            reason = "gated"
        elif not ready:
            reason = "incomplete_gang"
        else:
            reason = _REASON_OF_STATE[state]
        reasons[namespace, reason] += 1


@dataclass(slots=True)
class _QuotaRow:
    """One namespace's ElasticQuota figures (or the sum of those in `_other`)."""

    amounts: dict[tuple[str, str], int] = field(default_factory=dict)  # (type, resource)
    pending: dict[str, int] = field(default_factory=lambda: {"guaranteed": 0, "borrowing": 0})

    def add(self, other: _QuotaRow) -> None:
        for key, amount in other.amounts.items():
            self.amounts[key] = self.amounts.get(key, 0) + amount
        for state, count in other.pending.items():
            self.pending[state] += count


class _NamespaceSeries(Collector):
    """The opt-in per-namespace series (metrics.namespaceLabels), as of the last
    observe_core: built whole on each scrape, so a namespace that dropped out of the top
    N, or whose pods and quota are gone, leaves no stale series."""

    def __init__(self, max_namespaces: int) -> None:
        self.max_namespaces = max_namespaces
        self._pending: dict[tuple[str, PendingReason], int] = {}
        self._quotas: dict[str, _QuotaRow] = {}

    def observe(
        self, reasons: Tally[tuple[str, PendingReason]], quotas: dict[str, _QuotaRow]
    ) -> None:
        per_namespace: Tally[str] = Tally()
        for (namespace, _), count in reasons.items():
            per_namespace[namespace] += count
        # Most pending pods first, then by name (a stable choice among equals); quota
        # namespaces without pending pods rank after every one with some.
        ranked = sorted(per_namespace.keys() | quotas.keys(), key=lambda n: (-per_namespace[n], n))
        kept = set(ranked[: self.max_namespaces])
        pending: Tally[tuple[str, PendingReason]] = Tally()
        for (namespace, reason), count in reasons.items():
            pending[namespace if namespace in kept else OTHER_NAMESPACES, reason] += count
        rows: dict[str, _QuotaRow] = {}
        for namespace, row in quotas.items():
            if namespace in kept:
                rows[namespace] = row
            else:
                rows.setdefault(OTHER_NAMESPACES, _QuotaRow()).add(row)
        self._pending = dict(pending)
        self._quotas = rows

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families())

    def _families(self) -> list[GaugeMetricFamily]:
        pending = GaugeMetricFamily(
            "gang_scheduler_namespace_pending_pods",
            "Pods of this scheduler waiting to be placed, by namespace (the top "
            "metrics.maxNamespaces by pending pods, the rest summed as _other) and reason.",
            labels=["namespace", "reason"],
        )
        for (namespace, reason), count in sorted(self._pending.items()):
            pending.add_metric([namespace, reason], count)
        amounts = GaugeMetricFamily(
            "gang_scheduler_namespace_quota_amount",
            "Per ElasticQuota, by its namespace, type (used, min, max, borrowed) and "
            "resource (gpu_milli, cpu_milli, memory_bytes).",
            labels=["namespace", "type", "resource"],
        )
        gangs = GaugeMetricFamily(
            "gang_scheduler_namespace_quota_pending_gangs",
            "Ready gangs waiting, by their quota's namespace and state (guaranteed, borrowing).",
            labels=["namespace", "state"],
        )
        for namespace, row in sorted(self._quotas.items()):
            for (kind, resource), amount in sorted(row.amounts.items()):
                amounts.add_metric([namespace, kind, resource], amount)
            for state, count in sorted(row.pending.items()):
                gangs.add_metric([namespace, state], count)
        return [pending, amounts, gangs]


def _quota_rows(core: SchedulingCore) -> dict[str, _QuotaRow]:
    """Each governed namespace's quota figures: used, min, max (0 where the quota sets
    none), borrowed (used beyond min, where it sets a min: policies/fair_share.py) per
    resource, and its ready gangs waiting within min or borrowing."""
    book = core.cache.quotas
    rows: dict[str, _QuotaRow] = {}
    for namespace, quota in book.governed().items():
        used = book.ledger.used(namespace)
        row = rows[namespace] = _QuotaRow()
        for dim in DIMENSIONS:
            name = QUOTA_RESOURCE_NAMES[dim]
            row.amounts["used", name] = used.get(dim, 0)
            row.amounts["min", name] = quota.min.get(dim, 0)
            row.amounts["max", name] = quota.max.get(dim, 0)
            row.amounts["borrowed", name] = (
                max(0, used.get(dim, 0) - quota.min[dim]) if dim in quota.min else 0
            )
    for key, gang in core.gangs.items():
        row_of = rows.get(gang.namespace)
        if row_of is not None and gang.ready and key in core.queue:
            row_of.pending["borrowing" if would_borrow(gang, book) else "guaranteed"] += 1
    return rows
