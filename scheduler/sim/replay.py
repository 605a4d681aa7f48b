"""One replay of the openb protocol through the scheduling core the real scheduler runs.

Each pod of the arrival order is a new gang of one, tried exactly once: it is added
(`SchedulingCore.add_parsed_pod`: the watch event's path once the pod object is parsed;
`openb.PodRecords` parses each distinct trace pod once), `SchedulingCore.schedule_next`
plans it, and a plan is bound at once (there is no API
server: `core.bound` records the bind). A pod that fits nowhere is dropped for good (a
DELETED event), so the queue never retries it and never holds it back. Nothing leaves.
The clock is virtual: one second per pod, so the queue's timing rules never come into
play (there is no backoff to wait out when every gang is tried once).

Readings follow the README: before each attempt the pod's requested GPU milli is added
to "arrived"; after it, the GPU milli held by placed pods is read. That is kept as a
running sum of the placed shares rather than summed over 1,213 nodes per pod.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cache.cluster import EventType
from cache.gpu import GpuRequest
from cache.pod import PodInfo, pod_from_api
from cache.resources import MILLI_PER_GPU
from policies.profile import Profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from scheduler.sim import dra as sim_dra
from scheduler.sim.openb import (
    NAMESPACE,
    OpenbPod,
    PodRecords,
    Readings,
    deleted_pod_object,
    per_gpu_milli,
    requested_gpu_milli,
)
from scheduler.sim.sizes import FailuresBySize, SizeFailures, size_class
from scheduler.sim.whole_room import WholeNodeFailures

# The arrived loads (in %) the paper reports.
REPORTED_PERCENTS = (100, 130)
# Allocations between two young collections during a replay (Python's default: 700):
# the Kubernetes runner's value (scheduler/kube/runner.py, GC_YOUNG_THRESHOLD), not
# imported from there so that the simulator does not load the Kubernetes client.
GC_YOUNG_THRESHOLD = 10_000
# How many pods between two progress calls: often enough for a smooth bar, rare enough
# to cost nothing.
PROGRESS_EVERY = 64

Progress = Callable[[int, int], None]
"""Called with (pods done, pods in the order) while a replay runs."""


class ReplayError(RuntimeError):
    """The core did something the protocol rules out (a bug, not a property of a trace)."""


@dataclass
class OpenbResult:
    pods: int
    failed_pods: int
    seconds: float
    readings: Readings
    # Arrived % -> mean allocated % (None: no reading rounds to that %).
    allocation_pct: dict[int, float | None]
    # Size class -> pods arrived and failed before and after 100% arrived load, sizes
    # in ascending order (scheduler.sim.sizes).
    failures_by_size: dict[str, SizeFailures] = field(default_factory=dict)
    # The largest whole-GPU pods failed before 100%, and those with room scattered
    # (scheduler.sim.whole_room); None when no pod asks a whole GPU.
    whole_node_failures: WholeNodeFailures | None = None

    @property
    def total_gpu_milli(self) -> int:
        return self.readings.total_gpu_milli


@contextlib.contextmanager
def collector_tuned() -> Iterator[None]:
    """The garbage collector set for a replay, as the Kubernetes runner sets it for its
    synced cache (scheduler/kube/runner.py): young collections every GC_YOUNG_THRESHOLD
    allocations instead of 700, and what exists already (the cluster, the trace, the
    loaded modules) frozen out of full collections. With Python's defaults the collector
    took 10-13% of a replay's CPU time (measured in issue 14's fourth pass; today's
    replay figures: docs/benchmarks.md, "Simulator speed").
    Collection changes no result: only when unreachable cycles are freed. Restored on
    the way out; a caller that froze objects itself keeps them frozen."""
    first, *older = gc.get_threshold()
    gc.set_threshold(max(first, GC_YOUNG_THRESHOLD), *older)
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()
        gc.set_threshold(first, *older)
        # The replay's own cycles, left to full collections that the higher threshold
        # makes rare: freed now, so that replays run one after another in a process
        # (several policies or seeds, --jobs 1) do not pile them up.
        gc.collect()


def record_asking(record: PodInfo, pod: OpenbPod) -> PodInfo:
    """The record with the GPUs the trace pod asks (a pod asking them through a
    ResourceClaim has no GPU request of its own)."""
    if record.gpu.count or not pod.num_gpu:
        return record
    return dataclasses.replace(record, gpu=GpuRequest(pod.num_gpu, per_gpu_milli(pod)))


def cluster_gpu_milli(core: SchedulingCore) -> int:
    """GPU milli of every device of every node the core knows."""
    return sum(len(node.devices) for node in core.cache.nodes()) * MILLI_PER_GPU


def replay_openb(
    nodes: Sequence[Mapping[str, Any]],
    pods_in_order: Sequence[OpenbPod],
    profile: Profile,
    progress: Progress | None = None,
    dra: bool = False,
    finished: Callable[[SchedulingCore], None] | None = None,
) -> OpenbResult:
    """Replay `pods_in_order` on a fresh cluster of `nodes` (Node objects) under
    `profile`; see the module doc for the protocol. `dra`: the GPUs as DRA devices and
    the pods' GPUs as ResourceClaims (scheduler/sim/dra.py) instead of the annotation
    model. `finished`: called with the core once the last pod is replayed (tests read
    the cluster it ends with)."""
    started = time.perf_counter()
    core = SchedulingCore(profile, explain_failures=False)
    if dra:
        core.apply_dra_object("deviceclasses", EventType.ADDED, sim_dra.device_class(), 0.0)
    for node in nodes:
        if dra:
            node, resource_slice = sim_dra.dra_node(node)
            if resource_slice is not None:
                core.apply_dra_object("resourceslices", EventType.ADDED, resource_slice, 0.0)
        core.apply_node(EventType.ADDED, node, 0.0)
    core.refresh(0.0)  # DRA GPUs are shown on their nodes from here on
    readings = Readings(cluster_gpu_milli(core))
    by_size = FailuresBySize(readings.total_gpu_milli)
    count = len(pods_in_order)
    arrived = allocated = failed = 0
    wholes = [pod for pod in pods_in_order if pod.gpu_milli >= MILLI_PER_GPU]
    largest = max((pod.num_gpu for pod in wholes), default=0)
    whole = (
        WholeNodeFailures(size_class(next(p for p in wholes if p.num_gpu == largest)))
        if largest
        else None
    )
    # Each pod is parsed once per distinct shape, not once per arrival (PodRecords).
    records = PodRecords(core.scheduler_name, core.cache.share_milli, core.cache.gang_keys)
    with collector_tuned():
        for position, pod in enumerate(pods_in_order):
            now = float(position)
            arrived += requested_gpu_milli(pod)
            claim = sim_dra.claim_object(pod, position) if dra else None
            if dra:
                record = pod_from_api(
                    sim_dra.dra_pod_object(pod, position, core.scheduler_name),
                    core.cache.share_milli,
                    core.cache.gang_keys,
                )
                if claim is not None:
                    core.apply_dra_object("resourceclaims", EventType.ADDED, claim, now)
            else:
                record = records.record(pod, position)
            core.add_parsed_pod(record, now)
            attempt = core.schedule_next(now)
            expected = f"{NAMESPACE}/pod:{pod.name}"
            if attempt is None or attempt.gang.key != expected:
                got = "nothing" if attempt is None else attempt.gang.key
                raise ReplayError(f"pod {position} ({pod.name}): the core scheduled {got}")
            placed = isinstance(attempt.result, Plan)
            if isinstance(attempt.result, Plan):
                for key in sim_dra.claim_keys(attempt.result):
                    core.dra.confirm(key)  # the status write, which never fails here
                allocated += sim_dra.allocated_milli(attempt.result)
                for placement in attempt.result.placements:
                    core.bound(placement)
                    allocated += sum(milli for _, milli in placement.shares)
            else:
                failed += 1
                if (
                    whole is not None
                    and pod.num_gpu == largest
                    and pod.gpu_milli >= MILLI_PER_GPU
                    and arrived <= readings.total_gpu_milli
                ):
                    whole.record(record_asking(record, pod), core.cache.nodes())
                core.apply_pod(EventType.DELETED, deleted_pod_object(record), now)
                if claim is not None:
                    core.apply_dra_object("resourceclaims", EventType.DELETED, claim, now)
            by_size.record(pod, arrived, failed=not placed)
            readings.record(arrived, allocated)
            if progress is not None and (position + 1) % PROGRESS_EVERY == 0:
                progress(position + 1, count)
    if progress is not None:
        progress(count, count)
    if finished is not None:
        finished(core)
    return OpenbResult(
        pods=count,
        failed_pods=failed,
        seconds=time.perf_counter() - started,
        readings=readings,
        allocation_pct={percent: readings.value_at(percent) for percent in REPORTED_PERCENTS},
        failures_by_size=by_size.ordered(),
        whole_node_failures=whole,
    )
