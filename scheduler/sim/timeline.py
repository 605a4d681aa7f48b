"""The time-based replay: learning tasks arrive, wait, run once their gang is bound, leave.

It drives the very same `SchedulingCore` as the real scheduler; nothing here decides a
placement. On a virtual clock, at each instant:
1. tasks whose run is over leave: every pod of theirs is deleted (`apply_pod(DELETED)`),
   which frees their resources and wakes waiting gangs through the core's queue hints;
2. tasks that arrive now come in as Pod objects (`apply_pod(ADDED)`), each pod with the
   gang label and the min-member annotation;
3. `core.schedule_next(now)` is called until it returns None; every placement of a Plan
   is bound at once (`core.bound`: the simulator's bind is atomic and never fails). A
   task starts in the cycle where its bound members reach its min_member and runs for
   its duration from then;
4. the clock moves to the next event: the next arrival, the next end of a run, or
   `core.queue.next_wakeup(now)` (a backoff or an unschedulable gang's retry falling
   due), whichever is first.

After every cycle that changed the cache it checks what gang scheduling promises:
no device, CPU or memory of any node is over-committed (a `TimelineError` if one is,
or if the GPU milli the cache holds is not what the replay counted),
and every task has 0 or at least min_member members bound (a task seen otherwise is
counted in `partial_gangs`, which must stay 0). Failed cycles change nothing in the
cache (the planner works on a snapshot), so there is nothing new to check after them.

The replay ends when no task will arrive, none is running, and every waiting gang has
been tried since the last task left: nothing can change any more, and the tasks still
waiting are reported unfinished.

Preemption (when the core's Preempter is enabled, scheduler/sim/tenants.py does so):
a cycle's `Preemption` decision is carried out here as the Kubernetes adapter does
against the API. Every pod of each victim gang is marked terminating at once (the
Eviction API sets `deletionTimestamp`; the pod keeps its room), and deleted
`preemption_grace` seconds later; the victim's run is lost (restarted from scratch:
the GPU milli it held times how long it ran counts as lost) and its pods are made
again, as a Job controller would, under new names, so the same gang is queued anew.
The deletion wakes the preemptor through the core's queue hint, and the room the
core held for it (nominated) is its own to plan on. A victim whose run ends within
the grace leaves as finished, nothing lost.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cache.cluster import EventType, Placement, Reservation
from cache.native_gang import native_podgroup_from_api
from cache.resources import CPU, MEMORY, MILLI_PER_GPU
from policies.profile import Profile, build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.required_domain import DomainChoice
from scheduler.planner.result import Plan
from scheduler.sharing.preemption import Preemption
from scheduler.sim.topology_figures import domain_of, stranded_gangs
from scheduler.sim.workload import Task, creation_timestamp, task_podgroup, task_pods

TIMELINE_POLICIES = ("binpack", "spread", "fgd", "fgd-complete", "fgd-complete-reserve")
DEFAULT_TIMELINE_POLICIES = ("binpack", "spread")
# Gang sizes (pods) the queueing delay is reported by: label, smallest, largest.
GANG_BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("1", 1, 1),
    ("2-4", 2, 4),
    ("5-8", 5, 8),
    ("9-16", 9, 16),
    ("17-64", 17, 64),
)
PROGRESS_EVERY = 16
# Seconds between a victim's eviction and its pods being gone: Kubernetes' default
# terminationGracePeriodSeconds.
DEFAULT_PREEMPTION_GRACE = 30.0
# Reservations of a bind (planned, sent, or accepted): the pod holds its room as its
# own. Any other reservation (a preemptor's nominated room, a starving gang's reserved
# room) is a hold for a gang not placed yet: charged on the node, nobody's allocation.
_BINDS = frozenset({Reservation.BINDING, Reservation.BOUND, Reservation.UNKNOWN})

Progress = Callable[[int, int], None]
"""Called with (tasks that have left, tasks in all) while a replay runs."""


class TimelineError(RuntimeError):
    """The core did something gang scheduling rules out (a bug, not a property of the
    workload): an over-committed device, a bind of an unknown pod, a clock going back."""


def timeline_profile(policy: str) -> Profile:
    """The profile of a named policy (policies.profile.build_profile). For the `fgd`
    policies the scheduling core feeds every arriving pod to the profile's online
    workload, as in a live cluster (and `fgd-complete-reserve` learns its reserve of
    whole nodes from it)."""
    if policy not in TIMELINE_POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(TIMELINE_POLICIES)}")
    return build_profile(policy)


@dataclass(frozen=True)
class Percentiles:
    p50: float
    p95: float
    p99: float


@dataclass
class TaskOutcome:
    task: Task
    start: float | None = None  # of its last run (the one that finished)
    finish: float | None = None
    # Seconds spent in the queue before each run: arrival to the first start, plus each
    # requeue (preempted) to the next start.
    waited: float = 0.0
    queued_since: float | None = None
    preemptions: int = 0
    # GPU milli-seconds of runs cut short by preemption (restarted from scratch).
    lost_gpu_milli_seconds: float = 0.0
    # For a task requiring a topology level: the domain its last run started in.
    domain: str | None = None

    @property
    def queueing_delay(self) -> float | None:
        """Time in the queue (all of it, requeues after preemption included), for a
        task that started; None for one that never did."""
        return None if self.start is None else self.waited

    @property
    def lost_gpu_hours(self) -> float:
        return self.lost_gpu_milli_seconds / MILLI_PER_GPU / 3600.0

    @property
    def completion_time(self) -> float | None:
        return None if self.finish is None else self.finish - self.task.arrival


@dataclass
class TimelineResult:
    outcomes: list[TaskOutcome]
    total_gpu_milli: int
    # One sample per event instant (after its cycles): time, allocated GPU milli and
    # tasks waiting (arrived, not started).
    times: list[float]
    allocated_milli: list[int]
    queue_length: list[int]
    partial_gangs: int
    # Mean over multi-GPU placements (on nodes that publish links) of the mean pair
    # score of the placement's devices; None when there was none.
    mean_link_score: float | None
    multi_gpu_placements: int
    cycles: int
    end_time: float
    seconds: float
    # Per sample, the GPU milli each namespace holds (namespaces holding none left out):
    # the values sum to allocated_milli at every sample.
    allocated_by_namespace: list[dict[str, int]] = field(default_factory=list)
    # Per sample, the fewest GPU milli a waiting task of each namespace asks
    # (namespaces with no task waiting left out).
    smallest_waiting_by_namespace: list[dict[str, int]] = field(default_factory=list)
    # Preemption decisions carried out, and victim gangs evicted by them.
    preemptions: int = 0
    evicted_gangs: int = 0
    # Every decision carried out: (time, preemptor, victims), gang keys.
    preemption_log: list[tuple[float, str, tuple[str, ...]]] = field(default_factory=list)
    # Per sample, the waiting gangs with a required level that the free GPUs in total
    # could hold but no domain of that level could (topology_figures.stranded_gangs).
    stranded: list[int] = field(default_factory=list)
    # The planner's domain choice for required levels (None: the default).
    domain_choice: str | None = None

    @property
    def lost_gpu_hours(self) -> float:
        return sum(outcome.lost_gpu_hours for outcome in self.outcomes)

    @property
    def finished(self) -> int:
        return sum(1 for outcome in self.outcomes if outcome.finish is not None)

    @property
    def unfinished(self) -> int:
        return len(self.outcomes) - self.finished

    @property
    def utilization(self) -> list[float]:
        """Allocated GPU / cluster GPU at every sample."""
        return [milli / self.total_gpu_milli for milli in self.allocated_milli]

    @property
    def utilization_mean(self) -> float:
        """Time-weighted mean of the utilization over the arrival window (first to last
        arrival), where the offered load is what the workload says; over the whole run
        when every task arrives at once."""
        return self.window_mean(self.utilization)

    def window_mean(self, samples: Sequence[float]) -> float:
        """Time-weighted mean of per-sample `samples` over the arrival window (first to
        last arrival); over the whole run when every task arrives at once."""
        arrivals = [o.task.arrival for o in self.outcomes]
        if not arrivals or max(arrivals) <= min(arrivals):
            return time_weighted_mean(self.times, samples)
        first, last = min(arrivals), max(arrivals)
        times: list[float] = []
        values: list[float] = []
        for moment, value in zip(self.times, samples, strict=True):
            if moment > last:
                break
            if moment >= first:
                times.append(moment)
                values.append(value)
        if times and times[-1] < last:  # the value holds until the last arrival
            times.append(last)
            values.append(values[-1])
        return time_weighted_mean(times, values)

    @property
    def utilization_mean_run(self) -> float:
        """Time-weighted mean of the utilization from the first arrival to the end of
        the replay (the drain of the longest tasks included)."""
        return time_weighted_mean(self.times, self.utilization)

    def queueing_delay(self) -> dict[str, Percentiles | None]:
        """Per gang-size bucket, p50/p95/p99 of arrival-to-start over started tasks."""
        delays: dict[str, list[float]] = {label: [] for label, _, _ in GANG_BUCKETS}
        for outcome in self.outcomes:
            delay = outcome.queueing_delay
            label = gang_bucket(outcome.task.pods)
            if delay is not None and label is not None:
                delays[label].append(delay)
        return {
            label: Percentiles(
                percentile(values, 50), percentile(values, 95), percentile(values, 99)
            )
            if values
            else None
            for label, values in delays.items()
        }

    def completion_times(self) -> tuple[float, float] | None:
        """p50 and p95 of arrival-to-finish over finished tasks."""
        values = [t for o in self.outcomes if (t := o.completion_time) is not None]
        return (percentile(values, 50), percentile(values, 95)) if values else None

    @property
    def required_topology(self) -> bool:
        """Whether any task requires a topology level (the topology figures apply)."""
        return any(o.task.topology and o.task.topology.required_key for o in self.outcomes)

    @property
    def stranded_mean(self) -> float:
        """Time-weighted mean of `stranded` over the arrival window."""
        return self.window_mean(self.stranded) if self.stranded else 0.0

    def required_waits(self) -> dict[str, Percentiles | None]:
        """Per required level (label key), p50/p95/p99 of the queueing delay of the
        started tasks requiring it."""
        waits: dict[str, list[float]] = {}
        for outcome in self.outcomes:
            topology = outcome.task.topology
            if topology is None or topology.required_key is None:
                continue
            values = waits.setdefault(topology.required_key, [])
            if outcome.queueing_delay is not None:
                values.append(outcome.queueing_delay)
        return {
            key: Percentiles(percentile(v, 50), percentile(v, 95), percentile(v, 99)) if v else None
            for key, v in sorted(waits.items())
        }

    @property
    def largest_gang(self) -> int:
        return max((o.task.pods for o in self.outcomes), default=0)

    @property
    def largest_gang_wait(self) -> float | None:
        """The longest wait of a task of the largest gang size: arrival to start, or to
        the end of the replay when it never started (starvation shows as a long wait)."""
        size = self.largest_gang
        waits = [
            (o.start if o.start is not None else self.end_time) - o.task.arrival
            for o in self.outcomes
            if o.task.pods == size
        ]
        return max(waits) if waits else None


def gang_bucket(pods: int) -> str | None:
    for label, low, high in GANG_BUCKETS:
        if low <= pods <= high:
            return label
    return None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, interpolating linearly between the closest ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def time_weighted_mean(times: Sequence[float], values: Sequence[float]) -> float:
    """Mean of a step function that takes values[i] from times[i] to times[i+1]; the
    plain mean when all samples share one instant."""
    if not values:
        return 0.0
    span = times[-1] - times[0]
    if span <= 0:
        return sum(values) / len(values)
    area = sum(values[i] * (times[i + 1] - times[i]) for i in range(len(values) - 1))
    return area / span


@dataclass
class _Running:
    """A task while it is in the replay (arrived and not yet gone)."""

    index: int
    task: Task
    pods: list[dict[str, Any]]
    uids: list[str]
    held: dict[str, Placement] = field(default_factory=dict)
    run: int = 0  # bumped per restart: completions and evictions of older runs are stale
    evicting: bool = False


class _Replay:
    def __init__(
        self,
        nodes: Sequence[Mapping[str, Any]],
        tasks: Sequence[Task],
        profile: Profile | SchedulingCore,
        preemption_grace: float = DEFAULT_PREEMPTION_GRACE,
        domain_choice: DomainChoice | None = None,
    ) -> None:
        self.core = (
            profile
            if isinstance(profile, SchedulingCore)
            else SchedulingCore(profile, explain_failures=False)
        )
        if domain_choice is not None:
            self.core.planner.domain_choice = domain_choice
        self.grace = preemption_grace
        for node in nodes:
            self.core.apply_node(EventType.ADDED, node, 0.0)
        self.total_gpu_milli = sum(len(n.devices) for n in self.core.cache.nodes()) * MILLI_PER_GPU
        if not self.total_gpu_milli:
            raise ValueError("the cluster has no GPU")
        names = [task.name for task in tasks]
        if len(set(names)) != len(names):
            raise ValueError("task names must be unique")
        self.tasks = tasks
        self.outcomes = [TaskOutcome(task) for task in tasks]
        self.arrivals = sorted(range(len(tasks)), key=lambda i: (tasks[i].arrival, i))
        self.next_arrival = 0
        self.completions: list[tuple[float, int, int]] = []  # (finish, task index, run)
        # (pods gone at, order, gang key, run): victims within their grace period
        self.evictions: list[tuple[float, int, str, int]] = []
        self.preemptions = 0
        self.evicted = 0
        self.preemption_log: list[tuple[float, str, tuple[str, ...]]] = []
        self.by_namespace: dict[str, int] = {}
        self.namespace_samples: list[dict[str, int]] = []
        self.namespace_waiting: list[dict[str, int]] = []
        self.active: dict[str, _Running] = {}  # gang key -> task in the replay
        self.by_uid: dict[str, _Running] = {}
        self.waiting: set[str] = set()  # gang keys arrived and not started
        self.tried_since_change: set[str] = set()
        self.partial: set[str] = set()
        self.allocated = 0
        self.link_sum = 0.0
        self.link_count = 0
        self.cycles = 0
        self.left = 0
        self.times: list[float] = []
        self.allocated_samples: list[int] = []
        self.queue_samples: list[int] = []
        self.stranded_samples: list[int] = []
        # Whether any task requires a level (else the stranded count is 0, not sampled).
        self.required = any(t.topology and t.topology.required_key for t in tasks)

    # --- events ---------------------------------------------------------------------
    def arrive(self, now: float) -> None:
        while self.next_arrival < len(self.arrivals):
            index = self.arrivals[self.next_arrival]
            task = self.tasks[index]
            if task.arrival > now:
                return
            self.next_arrival += 1
            group = task_podgroup(task)
            if group is not None:  # created with the pods, before them, as a user would
                self._apply_group(task, EventType.ADDED, group, now)
            pods = task_pods(task, self.core.scheduler_name)
            running = _Running(index, task, pods, [pod["metadata"]["uid"] for pod in pods])
            self.active[task.key] = running
            self.outcomes[index].queued_since = now
            self._queue(running, now)

    def _apply_group(
        self, task: Task, event: EventType, group: Mapping[str, Any], now: float
    ) -> None:
        """The task's PodGroup as the informer of its API hands it to the core."""
        if task.podgroup == "native":
            self.core.apply_gang_group(native_podgroup_from_api, event, group, now)
        else:
            self.core.apply_podgroup(event, group, now)

    def _queue(self, running: _Running, now: float) -> None:
        self.waiting.add(running.task.key)
        for pod, uid in zip(running.pods, running.uids, strict=True):
            self.by_uid[uid] = running
            self.core.apply_pod(EventType.ADDED, pod, now)

    def leave(self, now: float) -> None:
        while self.completions and self.completions[0][0] <= now:
            finish, index, run = heapq.heappop(self.completions)
            running = self.active.get(self.tasks[index].key)
            if running is None or running.run != run:
                continue  # that run was preempted
            del self.active[running.task.key]
            self._remove_pods(running, now)
            group = task_podgroup(running.task)
            if group is not None:
                gone = {**group, "metadata": {**group["metadata"], "resourceVersion": "2"}}
                self._apply_group(running.task, EventType.DELETED, gone, now)
            self.outcomes[index].finish = finish
            self.left += 1

    def _remove_pods(self, running: _Running, now: float) -> None:
        for pod, uid in zip(running.pods, running.uids, strict=True):
            # Newer than any version of the pod the replay sent (terminating is "2").
            gone = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "3"}}
            self.core.apply_pod(EventType.DELETED, gone, now)
            del self.by_uid[uid]
        self._release(running)
        self.waiting.discard(running.task.key)
        self.tried_since_change.clear()

    def _release(self, running: _Running) -> None:
        milli = sum(_milli(p) for p in running.held.values())
        self.allocated -= milli
        namespace = running.task.namespace
        left = self.by_namespace.get(namespace, 0) - milli
        if left:
            self.by_namespace[namespace] = left
        else:
            self.by_namespace.pop(namespace, None)
        running.held.clear()

    # --- preemption -------------------------------------------------------------------
    def preempt(self, decision: Preemption, now: float) -> None:
        """Carry out a decision: every pod of each victim gang terminating now, gone
        after the grace period (as the Eviction API and the kubelet would)."""
        self.preemptions += 1
        victims = tuple(victim.key for victim in decision.victims)
        self.preemption_log.append((now, decision.preemptor, victims))
        for victim in decision.victims:
            running = self.active.get(victim.key)
            if running is None or running.evicting:
                raise TimelineError(
                    f"internal error at t={now:g}s: gang {decision.preemptor} preempts "
                    f"{victim.key}, which is not a running task of the replay"
                )
            running.evicting = True
            self.evicted += 1
            stamp = creation_timestamp(now)
            for pod, uid in zip(running.pods, running.uids, strict=True):
                placement = running.held.get(uid)
                if placement is not None:
                    terminating = _terminating(pod, placement, stamp)
                    self.core.apply_pod(EventType.MODIFIED, terminating, now)
            gone_at = now + self.grace
            heapq.heappush(self.evictions, (gone_at, self.evicted, victim.key, running.run))

    def terminate(self, now: float) -> None:
        """Victims whose grace is over: their pods go, their run is lost, and the task
        is queued again with new pods (restarted from scratch)."""
        while self.evictions and self.evictions[0][0] <= now:
            _, _, key, run = heapq.heappop(self.evictions)
            running = self.active.get(key)
            if running is None or running.run != run:
                continue  # it finished within the grace
            outcome = self.outcomes[running.index]
            if outcome.start is not None:
                held = sum(_milli(p) for p in running.held.values())
                outcome.lost_gpu_milli_seconds += held * (now - outcome.start)
            outcome.preemptions += 1
            outcome.start = None
            outcome.queued_since = now
            self._remove_pods(running, now)
            restart = running.run + 1
            pods = task_pods(
                running.task, self.core.scheduler_name, restart=restart, created_at=now
            )
            again = _Running(
                running.index, running.task, pods, [p["metadata"]["uid"] for p in pods]
            )
            again.run = restart
            self.active[key] = again
            self._queue(again, now)

    # --- cycles ---------------------------------------------------------------------
    def schedule(self, now: float) -> None:
        while (attempt := self.core.schedule_next(now)) is not None:
            self.cycles += 1
            key = attempt.gang.key
            result = attempt.result
            if not isinstance(result, Plan):
                self.tried_since_change.add(key)
                if attempt.preemption is not None:
                    self.preempt(attempt.preemption, now)
                continue
            running = self.active.get(key)
            if running is None:
                raise TimelineError(f"internal error: the core planned gang {key}, no task's")
            for placement in result.placements:
                if self.by_uid.get(placement.pod_uid) is not running:
                    raise TimelineError(
                        f"internal error: the core placed pod {placement.pod_uid}, which is "
                        f"not a pending member of gang {key}"
                    )
                self.core.bound(placement)
                running.held[placement.pod_uid] = placement
                milli = _milli(placement)
                self.allocated += milli
                if milli:
                    namespace = running.task.namespace
                    self.by_namespace[namespace] = self.by_namespace.get(namespace, 0) + milli
                self._score_links(placement)
            self._check_devices(now)
            self._check_gangs()
            domain = self._required_domain(running, now)
            outcome = self.outcomes[running.index]
            if outcome.start is None and self._bound(running) >= running.task.gang_min:
                outcome.start = now
                outcome.domain = domain
                if outcome.queued_since is not None:
                    outcome.waited += now - outcome.queued_since
                    outcome.queued_since = None
                self.waiting.discard(key)
                finish = now + running.task.duration
                heapq.heappush(self.completions, (finish, running.index, running.run))

    def _required_domain(self, running: _Running, now: float) -> str | None:
        """The one domain of its required level the task's members run in; a
        TimelineError if they span several (the core broke the requirement)."""
        topology = running.task.topology
        if topology is None or topology.required_key is None:
            return None
        cache = self.core.cache
        labels = {
            name: node.labels
            for name in {p.node for p in running.held.values()}
            if (node := cache.node(name)) is not None
        }
        domain, problem = domain_of(
            topology.required_key, (p.node for p in running.held.values()), labels
        )
        if problem is not None:
            raise TimelineError(
                f"internal error at t={now:g}s: gang {running.task.key} requires one "
                f"{topology.required_key}, but {problem}"
            )
        return domain

    def _bound(self, running: _Running) -> int:
        """Members of the task holding resources, as the cache has them (bound, or
        assumed with the bind in flight)."""
        cache = self.core.cache
        count = 0
        for uid in running.uids:
            pod = cache.pod(uid)
            if pod is None:
                continue
            # A member whose room is only held (nominated, reserved) is not bound.
            if pod.node_name or cache.reservation(uid) in _BINDS:
                count += 1
        return count

    def _check_gangs(self) -> None:
        for key, running in self.active.items():
            bound = self._bound(running)
            if 0 < bound < running.task.gang_min:
                self.partial.add(key)

    def _check_devices(self, now: float) -> None:
        """No device, CPU or memory over-committed. A preemptor's hold (nominated)
        is charged over the room of the victims it waits for while they terminate, so
        that room is counted twice until they are gone (and a starving gang's reserved
        room may be charged over pods still running): the check is that the node fits
        without the holds, and fits the preemptors' holds without the terminating pods
        and the other holds."""
        cache = self.core.cache
        holds = self._held_uids()
        # Victims terminate only while an eviction is under way (none without preemption).
        leaving = (
            [pod.uid for pod in cache.pods() if pod.deleting and pod.consumes_resources]
            if self.evictions
            else []
        )
        held = 0
        for node in cache.nodes():
            held += len(node.gpu_free) * MILLI_PER_GPU - sum(node.gpu_free)
        passes = [("without the rooms held for gangs not placed", *self._charged(holds))]
        if leaving:
            others = [u for u in holds if cache.reservation(u) != Reservation.NOMINATED]
            passes.append(
                (
                    "with the preemptors' rooms, without the pods terminating",
                    *self._charged(leaving + others),
                )
            )
        for name, back_gpu, back in passes:
            for node in cache.nodes():
                gpus = back_gpu.get(node.name, {})
                for index, free in enumerate(node.gpu_free):
                    if free + gpus.get(index, 0) < 0:
                        raise TimelineError(
                            f"internal error at t={now:g}s: GPU {index} of node {node.name} "
                            f"is over-committed ({free + gpus.get(index, 0)} milli free "
                            f"{name})"
                        )
                returned = back.get(node.name, {})
                for resource in (CPU, MEMORY):
                    if resource not in node.allocatable:
                        continue
                    free = node.free(resource) + returned.get(resource, 0)
                    if free < 0:
                        raise TimelineError(
                            f"internal error at t={now:g}s: {resource} of node {node.name} "
                            f"is over-committed ({free} free {name})"
                        )
        held -= sum(_milli(p) for uid in holds if (p := cache.assumed_placement(uid)))
        if held != self.allocated:  # the utilization samples count what the cache holds
            raise TimelineError(
                f"internal error at t={now:g}s: the cache holds {held} GPU milli, the replay "
                f"counted {self.allocated}"
            )

    def _held_uids(self) -> list[str]:
        """Pods the cache holds room for that are not placed (a preemptor waiting for
        its victims, a starving gang's reservation): charged on the nodes, not yet
        anyone's allocation."""
        cache = self.core.cache
        assumed = cache.assumed()  # mostly empty: the replay binds each plan at once
        return [uid for uid in assumed if cache.reservation(uid) not in _BINDS]

    def _charged(
        self, uids: Sequence[str]
    ) -> tuple[dict[str, dict[int, int]], dict[str, dict[str, int]]]:
        """Per node, the GPU milli per device and the CPU and memory these pods are
        charged there (bound, or held for them)."""
        cache = self.core.cache
        gpus: dict[str, dict[int, int]] = {}
        other: dict[str, dict[str, int]] = {}
        for uid in uids:
            pod = cache.pod(uid)
            placement = cache.assumed_placement(uid)
            node = placement.node if placement is not None else (pod.node_name if pod else "")
            shares = placement.shares if placement is not None else cache.charged_shares(uid)
            if pod is None or not node:
                continue
            devices = gpus.setdefault(node, {})
            for index, milli in shares or ():
                devices[index] = devices.get(index, 0) + milli
            amounts = other.setdefault(node, {})
            for resource in (CPU, MEMORY):
                amounts[resource] = amounts.get(resource, 0) + pod.requests.get(resource, 0)
        return gpus, other

    def _score_links(self, placement: Placement) -> None:
        if len(placement.shares) < 2:
            return
        node = self.core.cache.node(placement.node)
        if node is None or node.pair_scores is None:
            return
        indices = [index for index, _ in placement.shares]
        pairs = [node.pair_scores[a][b] for i, a in enumerate(indices) for b in indices[i + 1 :]]
        self.link_sum += sum(pairs) / len(pairs)
        self.link_count += 1

    # --- the clock ------------------------------------------------------------------
    def _stranded(self) -> int:
        if not self.required or not self.waiting:
            return 0
        waiting = [self.active[key].task for key in self.waiting]
        return stranded_gangs(waiting, self.core.cache.nodes())

    def sample(self, now: float) -> None:
        stranded = self._stranded()
        if self.times and self.times[-1] == now:
            self.stranded_samples[-1] = stranded
            self.allocated_samples[-1] = self.allocated
            self.queue_samples[-1] = len(self.waiting)
            self.namespace_samples[-1] = dict(self.by_namespace)
            self.namespace_waiting[-1] = self._waiting_by_namespace()
            return
        self.times.append(now)
        self.stranded_samples.append(stranded)
        self.allocated_samples.append(self.allocated)
        self.queue_samples.append(len(self.waiting))
        self.namespace_samples.append(dict(self.by_namespace))
        self.namespace_waiting.append(self._waiting_by_namespace())

    def _waiting_by_namespace(self) -> dict[str, int]:
        smallest: dict[str, int] = {}
        for key in self.waiting:
            task = self.active[key].task
            known = smallest.get(task.namespace)
            if known is None or task.gpu_milli < known:
                smallest[task.namespace] = task.gpu_milli
        return smallest

    def next_time(self, now: float) -> float | None:
        candidates: list[float] = []
        if self.next_arrival < len(self.arrivals):
            candidates.append(self.tasks[self.arrivals[self.next_arrival]].arrival)
        if self.completions:
            candidates.append(self.completions[0][0])
        if self.evictions:
            candidates.append(self.evictions[0][0])
        queue = self.core.queue
        untried = any(k in queue and k not in self.tried_since_change for k in self.waiting)
        if candidates or untried:
            # Waiting gangs matter while something can still change, or until each has
            # been tried since the last task left (a gang that is not ready, say with a
            # member refused as written, is never in the queue: it cannot start).
            wakeup = queue.next_wakeup(now)
            if wakeup is not None and wakeup <= now:
                raise TimelineError(
                    f"internal error at t={now:g}s: the queue has a gang due now while "
                    "schedule_next hands out none"
                )
            if wakeup is not None:
                candidates.append(wakeup)
        return min(candidates) if candidates else None


def _terminating(pod: Mapping[str, Any], placement: Placement, stamp: str) -> dict[str, Any]:
    """The pod as the API shows it once evicted: bound where it runs, deletionTimestamp
    set (it keeps its room until its containers stop)."""
    meta = {**pod["metadata"], "deletionTimestamp": stamp, "resourceVersion": "2"}
    spec = {**pod["spec"], "nodeName": placement.node}
    return {**pod, "metadata": meta, "spec": spec, "status": {"phase": "Running"}}


def _milli(placement: Placement) -> int:
    return sum(milli for _, milli in placement.shares)


def replay_timeline(
    nodes: Sequence[Mapping[str, Any]],
    tasks: Sequence[Task],
    profile: Profile | SchedulingCore,
    *,
    progress: Progress | None = None,
    max_time: float | None = None,
    preemption_grace: float = DEFAULT_PREEMPTION_GRACE,
    domain_choice: DomainChoice | None = None,
) -> TimelineResult:
    """Replay `tasks` on a fresh cluster of `nodes` (Node objects) under `profile`, or
    on a core made for the run (ElasticQuotas applied, preemption enabled: see
    scheduler/sim/tenants.py); see the module doc. `max_time` stops the clock early
    (tasks not finished by then are unfinished). `domain_choice` sets the planner's
    choice among the domains of a required level (None: its default)."""
    started = time.perf_counter()
    replay = _Replay(nodes, tasks, profile, preemption_grace, domain_choice)
    now: float | None = tasks[replay.arrivals[0]].arrival if tasks else None
    end = 0.0 if now is None else now
    reported = 0
    while now is not None and (max_time is None or now <= max_time):
        if now < end:
            raise TimelineError(f"internal error: the clock went back from {end:g} to {now:g}")
        end = now
        replay.terminate(now)
        replay.leave(now)
        replay.arrive(now)
        replay.schedule(now)
        replay.sample(now)
        if progress is not None and replay.left - reported >= PROGRESS_EVERY:
            reported = replay.left
            progress(replay.left, len(tasks))
        now = replay.next_time(now)
    if progress is not None:
        progress(replay.left, len(tasks))
    return TimelineResult(
        outcomes=replay.outcomes,
        total_gpu_milli=replay.total_gpu_milli,
        times=replay.times,
        allocated_milli=replay.allocated_samples,
        queue_length=replay.queue_samples,
        partial_gangs=len(replay.partial),
        mean_link_score=replay.link_sum / replay.link_count if replay.link_count else None,
        multi_gpu_placements=replay.link_count,
        cycles=replay.cycles,
        end_time=end,
        seconds=time.perf_counter() - started,
        allocated_by_namespace=replay.namespace_samples,
        smallest_waiting_by_namespace=replay.namespace_waiting,
        preemptions=replay.preemptions,
        evicted_gangs=replay.evicted,
        preemption_log=replay.preemption_log,
        stranded=replay.stranded_samples,
        domain_choice=domain_choice,
    )
