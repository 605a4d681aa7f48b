"""Feedback to users: pod conditions, events and PodGroup status, written off the loop.

Nothing here makes the scheduling loop wait: `FeedbackRecorder` decides what to write
and hands each write to a `WriteQueue`, a bounded queue drained by a few background
workers. Writes with the same key coalesce while queued (the newest wins: a pod's
condition, a gang's event, a PodGroup's status), writes with one key never run
concurrently, and when the queue is full a write is dropped and counted, never waited
for. Writes that fail are logged and counted; feedback is never worth a retry storm.

What users see, and how often it is written (docs/kubernetes.md says the same):
- Every pending member of an unschedulable or waiting gang gets the condition
  `PodScheduled=False`, reason `Unschedulable`, with its own message (a strategic
  merge patch of `status.conditions` on `pods/status`). A pod's condition is written
  the first time at once; a changed message is rewritten at most once per gang per
  window (all members whose message changed, in one round), and within one window in
  any case: a change held back is written by `tick` when the window ends, whether or not
  the gang is tried again; an unchanged message is never rewritten.
- `FailedScheduling` (Warning, core/v1 Event) on every pending member, as kube-scheduler
  writes it, bounded as client-go's event correlator bounds it
  (scheduler/kube/event_correlator.py): one Event object per pod and message whose
  `count` is patched while the message stays the same; a member's first event is written
  at once, later ones in one round per gang per window (held-back attempts counted and
  carried by the next write, `tick` writing them when no attempt follows); a spam filter
  per pod (25 writes, then one per 5 minutes) and at most 10 distinct messages per pod
  in 10 minutes, beyond which the newest Event is patched "(combined from similar
  events)". Gated members get no event (kube-scheduler tries no gated pod).
- A gang that waits for members (its controller still creating them) gets no Warning
  for `waiting_grace` seconds from when it began to wait: its members' conditions say
  why at once, the events follow only if the wait outlasts the grace.
- Every Warning write round of a gang (FailedScheduling, FailedBinding, its Problems)
  also counts against `max_per_gang_per_window`; what does not fit waits for the next
  window.
- Problems (gang.py) are published once each while they last; a problem that every
  pending member shares (same reason and message) is published once, on the
  representative pod. Events on a PodGroup carry its uid, read once with a GET, since
  `kubectl describe` selects events by uid.
- `Scheduled` (Normal) when a gang is bound: per pod by default, as kube-scheduler does
  ("Successfully assigned ns/pod to node", plus the GPU devices); `"gang"` writes one
  per gang on its representative pod, `"off"` none.
- PodGroup status (`status.phase` Pending / Scheduled / Running / Failed, the
  `scheduled`, `running`, `succeeded`, `failed` counts, and an `Unschedulable`
  condition with the reason, as Volcano's) is patched (merge patch on the status
  subresource) only when it changes, and only for gangs that have a PodGroup; a
  condition whose message alone changed is rewritten at most once per window. A 404
  (no such PodGroup, or no CRD) is skipped silently. Kubernetes' own PodGroups get their
  `PodGroupScheduled` condition with the same reason (scheduler/kube/native_status.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cache.gpu import format_assignment
from cache.pod import PodInfo
from cache.podgroup import PODGROUP_GROUP, PODGROUP_PLURAL, PODGROUP_VERSION
from scheduler.gangs.gang import Gang, Problem, gate_message
from scheduler.kube.client import ApiError, JsonObject, KubeClient, never, transient
from scheduler.kube.event_correlator import COMBINED_PREFIX, SimilarMessages, SpamFilter
from scheduler.kube.native_status import NativeCondition, native_condition, native_status_path
from scheduler.planner.result import Plan, Unschedulable
from scheduler.process.config import ScheduledEvents
from scheduler.process.logs import log_event

log = logging.getLogger(__name__)

Write = Callable[[KubeClient], Awaitable[None]]

DEFAULT_COMPONENT = "gang-scheduler"
DEFAULT_WINDOW = 60.0
DEFAULT_MAX_PER_GANG_PER_WINDOW = 10
DEFAULT_MAX_PENDING = 10_000
DEFAULT_WORKERS = 4

DEFAULT_WAITING_GRACE = 30.0
# The API refuses longer event messages.
MAX_EVENT_MESSAGE = 1024

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


def rfc3339(seconds: float) -> str:
    """`seconds` since the epoch as RFC 3339 to the second (what Event and condition
    times carry). Every Scheduled event formats two stamps, nearly always of the same
    second as the event before: the text is kept per second. The second is found as
    `datetime.fromtimestamp` finds it (the fraction rounded half-even to microseconds
    first), so the text is the same."""
    fraction, whole = math.modf(seconds)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole += 1
    elif micros < 0:
        whole -= 1
    return _rfc3339_second(int(whole))


@functools.lru_cache(maxsize=4)
def _rfc3339_second(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the queue ----------------------------------------------------------------------------
@dataclass
class QueueStats:
    submitted: int = 0
    coalesced: int = 0
    dropped: int = 0
    written: int = 0
    failed: int = 0


class WriteQueue:
    """A bounded, coalescing queue of API writes and the workers that drain it."""

    def __init__(
        self,
        client: KubeClient,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        if max_pending < 1 or workers < 1:
            raise ValueError("max_pending and workers must be at least 1")
        self.client = client
        self.max_pending = max_pending
        self.workers = workers
        self.stats = QueueStats()
        self._pending: dict[Hashable, Write] = {}
        self._running: set[Hashable] = set()
        self._keys: asyncio.Queue[Hashable] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    def __len__(self) -> int:
        return len(self._pending)

    def submit(self, key: Hashable, write: Write) -> bool:
        """Queue `write` under `key` (replacing a queued write with that key); False
        when the queue is full and the write was dropped."""
        self.stats.submitted += 1
        if key in self._pending:
            self._pending[key] = write
            self.stats.coalesced += 1
            return True
        if len(self._pending) >= self.max_pending:
            self.stats.dropped += 1
            return False
        self._pending[key] = write
        if key not in self._running:
            # A running key is requeued by its worker when it finishes.
            self._keys.put_nowait(key)
        return True

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._work(), name=f"feedback-writer-{i}")
                for i in range(self.workers)
            ]

    async def drain(self) -> None:
        """Wait until every queued write has run (tests, graceful shutdown)."""
        await self._keys.join()

    async def close(self, drain: bool = True, timeout: float = 5.0) -> None:
        if drain and self._tasks:
            try:
                await asyncio.wait_for(self.drain(), timeout)
            except TimeoutError:
                log.warning("feedback writes left unwritten at shutdown: %d", len(self))
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def __aenter__(self) -> WriteQueue:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _work(self) -> None:
        while True:
            key = await self._keys.get()
            try:
                write = self._pending.pop(key, None)
                if write is None:
                    continue
                self._running.add(key)
                try:
                    await write(self.client)
                    self.stats.written += 1
                except asyncio.CancelledError:
                    raise
                except Exception as err:
                    self.stats.failed += 1
                    log.warning("feedback write %r failed: %s", key, err)
                finally:
                    self._running.discard(key)
                    if key in self._pending:
                        self._keys.put_nowait(key)
            finally:
                self._keys.task_done()


# --- PodGroup status ----------------------------------------------------------------------
# The condition a PodGroup of ours carries, as Volcano's PodGroup does: type
# `Unschedulable`, True with the reason while the gang waits or cannot be placed, False
# once its members are bound.
UNSCHEDULABLE_CONDITION = "Unschedulable"
WAITING_REASON = "NotReady"  # fewer than minMember members exist or can be scheduled
SCHEDULED_REASON = "Scheduled"


@dataclass(frozen=True)
class Why:
    """Why a gang is not scheduled: a condition reason (`Unschedulable`, `NotReady`) and
    the message its members carry."""

    reason: str
    message: str


@dataclass(frozen=True)
class GroupCondition:
    status: str  # "True" or "False"
    reason: str
    message: str

    def as_json(self, transition: float) -> JsonObject:
        return {
            "type": UNSCHEDULABLE_CONDITION,
            "status": self.status,
            "reason": self.reason,
            "message": self.message[:MAX_CONDITION_MESSAGE],
            "lastTransitionTime": rfc3339(transition),
        }


# metav1.Condition caps a message at 32 KiB; a gang's reason never needs that much.
MAX_CONDITION_MESSAGE = 4096


@dataclass(frozen=True)
class PodGroupStatus:
    phase: str
    scheduled: int
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    condition: GroupCondition | None = None

    def as_json(self, transition: float = 0.0) -> JsonObject:
        body: JsonObject = {
            "phase": self.phase,
            "scheduled": self.scheduled,
            "running": self.running,
            "succeeded": self.succeeded,
            "failed": self.failed,
        }
        if self.condition is not None:
            # A merge patch replaces the whole list: this scheduler is the only writer of
            # its PodGroups' conditions.
            body["conditions"] = [self.condition.as_json(transition)]
        return body


def podgroup_status(
    min_member: int, members: Iterable[PodInfo], newly_bound: int = 0, why: Why | None = None
) -> PodGroupStatus:
    """A PodGroup's status from its members (`newly_bound`: bound a moment ago, not yet
    seen on the watch). Pending until minMember are bound; then Failed once a member
    failed, Running once minMember run (or ran to completion), Scheduled before. The
    Unschedulable condition says `why` while Pending, and is False once scheduled."""
    scheduled, running, succeeded, failed = newly_bound, 0, 0, 0
    for pod in members:
        if not pod.node_name:
            continue
        scheduled += 1
        if pod.phase == "Running":
            running += 1
        elif pod.phase == "Succeeded":
            succeeded += 1
        elif pod.phase == "Failed":
            failed += 1
    condition: GroupCondition | None = None
    if scheduled < min_member:
        phase = "Pending"
        if why is not None:
            condition = GroupCondition("True", why.reason, why.message)
    else:
        condition = GroupCondition(
            "False", SCHEDULED_REASON, f"{scheduled}/{min_member} members scheduled"
        )
        if failed:
            phase = "Failed"
        elif running + succeeded >= min_member:
            phase = "Running"
        else:
            phase = "Scheduled"
    return PodGroupStatus(phase, scheduled, running, succeeded, failed, condition)


def podgroup_status_path(namespace: str, name: str) -> str:
    return (
        f"/apis/{PODGROUP_GROUP}/{PODGROUP_VERSION}/namespaces/{namespace}/"
        f"{PODGROUP_PLURAL}/{name}/status"
    )


# --- the recorder -------------------------------------------------------------------------
@dataclass(frozen=True)
class ObjectRef:
    kind: str  # "Pod" or "PodGroup"
    namespace: str
    name: str
    uid: str = ""

    @property
    def api_version(self) -> str:
        return "v1" if self.kind == "Pod" else f"{PODGROUP_GROUP}/{PODGROUP_VERSION}"


def pod_ref(pod: PodInfo) -> ObjectRef:
    return ObjectRef("Pod", pod.namespace, pod.name, pod.uid)


@dataclass
class _EventObject:
    """A core/v1 Event we wrote and may bump."""

    name: str
    ref: ObjectRef
    message: str
    count: int
    combined: bool = False  # "(combined from similar events)": bumped whatever the message


@dataclass
class _PodEvents:
    """One pending member's FailedScheduling, as client-go's correlator keeps it."""

    ref: ObjectRef
    event: _EventObject | None = None
    unwritten: int = 0  # attempts with `message` not yet counted in an event
    message: str = ""
    queued: bool = False  # a first write was handed to the queue
    spam: SpamFilter = field(default_factory=SpamFilter)
    similar: SimilarMessages = field(default_factory=SimilarMessages)


@dataclass
class _GangFeedback:
    window_start: float = float("-inf")
    writes_in_window: int = 0
    # FailedScheduling: one record per pending member, written in rounds.
    pods: dict[str, _PodEvents] = field(default_factory=dict)
    unwritten: bool = False  # some member has attempts not yet written
    last_event_write: float = float("-inf")
    # When the gang began to wait for members (None: it does not wait), for the grace.
    waiting_since: float | None = None
    logged: str = ""  # the state last logged (one line per change)
    # Conditions: when changed messages were last rewritten, and those held back since.
    last_condition_round: float = float("-inf")
    held: dict[str, tuple[PodInfo, str]] = field(default_factory=dict)


@dataclass
class RecorderStats:
    events: int = 0  # event writes queued (creates and count patches)
    conditions: int = 0
    podgroup_statuses: int = 0
    suppressed: int = 0  # writes held back by the window rules


class FeedbackRecorder:
    """Decides which conditions, events and statuses to write; never waits on I/O.

    `now` is the scheduler's clock (for windows); event timestamps come from
    `wall_clock`. `has_podgroup(gang_key)` says whether the gang has a PodGroup to
    report status on (the cache knows).
    """

    def __init__(
        self,
        queue: WriteQueue,
        *,
        component: str = DEFAULT_COMPONENT,
        instance: str = "",
        window: float = DEFAULT_WINDOW,
        max_per_gang_per_window: int = DEFAULT_MAX_PER_GANG_PER_WINDOW,
        waiting_grace: float = DEFAULT_WAITING_GRACE,
        scheduled_events: ScheduledEvents = "pod",
        has_podgroup: Callable[[str], bool] = lambda key: False,
        wall_clock: Callable[[], float] = time.time,
        podgroup_uid: Callable[[str], str | None] = lambda key: None,
        native_podgroup: Callable[[str], bool] = lambda key: False,
    ) -> None:
        self.queue = queue
        self.component = component
        self.instance = instance
        self.window = window
        self.max_per_window = max_per_gang_per_window
        self.waiting_grace = waiting_grace
        self.scheduled_events: ScheduledEvents = scheduled_events
        self.has_podgroup = has_podgroup
        # The uid of a PodGroup as the informer knows it (None or "" when unknown): tells
        # a PodGroup recreated under its name from the one whose status and uid we kept.
        self.podgroup_uid = podgroup_uid
        self._wall = wall_clock
        self.stats = RecorderStats()
        self._gangs: dict[str, _GangFeedback] = {}
        self._conditions: dict[str, str] = {}  # pod uid -> message last written
        self._published: set[tuple[str, str, str, str]] = set()
        # PodGroup key -> what was last written, so that a PodGroup recreated under its
        # name gets its status written again.
        self._podgroup_status: dict[str, _WrittenStatus] = {}
        self._podgroup_uids: dict[str, str] = {}
        # Statuses whose condition message alone changed inside the window: written by
        # `tick` once it ends (PodGroup key -> the write).
        self._held_status: dict[str, Callable[[float], None]] = {}
        self._names = itertools.count()
        # Kubernetes' own PodGroups (scheduler/kube/native_status.py): whether the gang
        # has one, and per key the condition last written, when its status changed and
        # when it was written.
        self.native_podgroup = native_podgroup
        self._native_status: dict[str, tuple[NativeCondition, float, float]] = {}
        self._held_native: dict[str, NativeCondition] = {}
        self._pruned_for: Mapping[str, Gang] | None = None

    # --- what the scheduling loop reports -------------------------------------------
    def unschedulable(self, gang: Gang, result: Unschedulable, now: float) -> None:
        """The planner could not place the gang: conditions, FailedScheduling, status."""
        messages = {pod.uid: result.reasons.get(pod.uid, result.message) for pod in gang.pending}
        self._not_scheduled(gang, messages, Why("Unschedulable", result.message), now)

    def waiting(self, gang: Gang, message: str, now: float) -> None:
        """The gang is not ready (members missing, refused or gated): its pods say why;
        a gated pod says which gates hold it (reason SchedulingGated)."""
        messages = {
            pod.uid: gate_message(pod) if pod.scheduling_gates else message for pod in gang.pending
        }
        self._not_scheduled(gang, messages, Why(WAITING_REASON, message), now)

    def bind_failed(self, gang: Gang, message: str, now: float) -> None:
        """A bind broke the gang: one Warning event on the gang (not per pod)."""
        ref = self._representative(gang)
        if ref is not None and self._take_budget(self._gang(gang.key), now):
            self._event(ref, "Warning", "FailedBinding", message)
        else:
            self.stats.suppressed += 1
        self._status(gang, 0, Why("Unschedulable", message), now)

    def scheduled(self, gang: Gang, plan: Plan, now: float) -> None:
        """The gang is bound: Scheduled events, PodGroup status; forget its failures."""
        pods = {pod.uid: pod for pod in gang.pending}
        for placement in plan.placements:
            self._conditions.pop(placement.pod_uid, None)
        self._gangs.pop(gang.key, None)
        if self.scheduled_events == "pod":
            for placement in plan.placements:
                pod = pods.get(placement.pod_uid)
                if pod is None:
                    continue
                devices = (
                    f" (GPU devices {format_assignment(placement.shares)})"
                    if placement.shares
                    else ""
                )
                self._event(
                    pod_ref(pod),
                    "Normal",
                    "Scheduled",
                    f"Successfully assigned {pod.key} to {placement.node}{devices}",
                    key=("scheduled", pod.uid),
                )
        elif self.scheduled_events == "gang":
            ref = self._representative(gang)
            if ref is not None:
                nodes = len({p.node for p in plan.placements})
                self._event(
                    ref,
                    "Normal",
                    "Scheduled",
                    f"Successfully assigned gang {gang.key}: {len(plan.placements)} pods "
                    f"to {nodes} node{'s' if nodes != 1 else ''}",
                    key=("scheduled", gang.key),
                )
        self._status(gang, len(plan.placements), None, now)

    def reserved(self, gang: Gang, nodes: Iterable[str]) -> None:
        """A Normal `Reserved` event, once per gang, on its oldest pending member: the
        starvation guard holds these nodes for it (scheduler/sharing/starvation.py)."""
        ref = self._representative(gang)
        if ref is None:
            return
        names = sorted(nodes)
        shown_nodes = ", ".join(names[:10]) + (
            f" and {len(names) - 10} more" if len(names) > 10 else ""
        )
        self.event(
            ref,
            "Normal",
            "Reserved",
            f"gang {gang.key} has waited too long: {len(names)} node(s) reserved for it, where "
            f"other gangs take only room it does not need: {shown_nodes}",
        )

    def problems(self, gangs: Iterable[Gang], now: float) -> None:
        """Publish each distinct Problem of these gangs once (within the gang budget);
        each is logged once, when it is published."""
        current: set[tuple[str, str, str, str]] = set()
        for gang in gangs:
            if not gang.problems:
                continue  # most gangs: nothing to look up (this runs every cycle)
            pods = {pod.key: pod for pod in gang.pending + gang.bound}
            shared = _shared_problems(gang)
            representative = self._representative(gang)
            state: _GangFeedback | None = None
            for problem in gang.problems:
                if (problem.kind, problem.reason, problem.message) in shared:
                    if representative is None:
                        continue
                    target = representative
                else:
                    target = self._problem_ref(problem, pods)
                identity = (
                    target.kind,
                    f"{target.namespace}/{target.name}",
                    problem.reason,
                    problem.message,
                )
                if identity in current:
                    continue
                current.add(identity)
                if identity in self._published:
                    continue
                state = state or self._gang(gang.key)
                if not self._take_budget(state, now):
                    self.stats.suppressed += 1
                    continue  # published in a later window, if it lasts
                self._published.add(identity)
                log_event(
                    log,
                    "object refused",
                    logging.WARNING,
                    gang=gang.key,
                    kind=target.kind,
                    object=f"{target.namespace}/{target.name}",
                    reason=problem.reason,
                    message=problem.message,
                )
                self._event(target, "Warning", problem.reason, problem.message)
        # A problem that went away and comes back is news again.
        self._published &= current

    def refresh_podgroup(self, key: str, min_member: int, members: Iterable[PodInfo]) -> None:
        """Recompute a PodGroup's status from its members (e.g. when they start running)."""
        self.podgroup_status(key, podgroup_status(min_member, members))

    def podgroup_status(self, key: str, status: PodGroupStatus, now: float | None = None) -> None:
        """Patch a PodGroup's status when it differs from what was last written. A status
        whose condition message alone changed waits for the end of the window (`now` on
        the scheduler's clock; None: written at once)."""
        uid = self.podgroup_uid(key) or ""
        last = self._podgroup_status.get(key)
        if last is not None and last.uid == uid:
            status = _keep_condition(status, last.status)
            if last.status == status:
                self._held_status.pop(key, None)
                return
            held = now is not None and _message_only(last.status, status)
            if held and now is not None and now - last.written_at < self.window:
                self._held_status[key] = functools.partial(self._put_podgroup, key, status)
                self.stats.suppressed += 1
                return
        self._held_status.pop(key, None)
        self._put_podgroup(key, status, now if now is not None else float("-inf"))

    def _put_podgroup(self, key: str, status: PodGroupStatus, now: float) -> None:
        uid = self.podgroup_uid(key) or ""
        last = self._podgroup_status.get(key)
        transition = self._wall()
        if (
            last is not None
            and last.uid == uid
            and last.status.condition is not None
            and status.condition is not None
            and last.status.condition.status == status.condition.status
        ):
            transition = last.transition
        self._podgroup_status[key] = _WrittenStatus(uid, status, transition, now)
        namespace, _, name = key.partition("/")
        self.stats.podgroup_statuses += 1
        path = podgroup_status_path(namespace, name)
        body = {"status": status.as_json(transition)}

        def forget() -> None:
            self._podgroup_status.pop(key, None)  # try again on the next change

        self.queue.submit(
            ("podgroup-status", key),
            status_patch(path, body, MERGE, forget, f"PodGroup {key}"),
        )

    def tick(self, now: float) -> None:
        """Write what the window held back when no attempt follows: changed condition
        messages, FailedScheduling counts (once the waiting grace is over), and statuses
        whose condition message changed."""
        for key, state in self._gangs.items():
            if state.held and now - state.last_condition_round >= self.window:
                self._write_held_conditions(state, now)
            if state.unwritten and now - state.last_event_write >= self.window:
                self._write_events(key, state, now)
        for key in list(self._held_status):
            last = self._podgroup_status.get(key)
            if last is None or now - last.written_at >= self.window:
                self._held_status.pop(key)(now)
        for key in list(self._held_native):
            written = self._native_status.get(key)
            if written is None or now - written[2] >= self.window:
                self._put_native(key, self._held_native.pop(key), now)

    def prune(self, gangs: Mapping[str, Gang]) -> None:
        """Forget gangs and pods that no longer wait, and PodGroups that are gone
        (bounded memory). The same mapping as last time (the core hands out the same
        one while no gang changed) needs no second look."""
        if gangs is self._pruned_for:
            return
        self._pruned_for = gangs
        for key in [k for k in self._gangs if k not in gangs]:
            del self._gangs[key]
        for key, state in self._gangs.items():
            if state.pods or state.held:
                pending = {pod.uid for pod in gangs[key].pending}
                for uid in [u for u in state.pods if u not in pending]:
                    del state.pods[uid]
                for uid in [u for u in state.held if u not in pending]:
                    del state.held[uid]
        for podgroups in (self._podgroup_status, self._podgroup_uids, self._held_status):
            for key in [k for k in podgroups if not self.has_podgroup(k)]:
                del podgroups[key]
        for natives in (self._native_status, self._held_native):
            for key in [k for k in natives if not self.native_podgroup(k)]:
                del natives[key]
        if not self._conditions:
            return  # the happy path: no condition written, no need to list every pod
        pending = {pod.uid for gang in gangs.values() for pod in gang.pending}
        for uid in [u for u in self._conditions if u not in pending]:
            del self._conditions[uid]

    # --- conditions and FailedScheduling -----------------------------------------------
    def _not_scheduled(self, gang: Gang, messages: Mapping[str, str], why: Why, now: float) -> None:
        state = self._gang(gang.key)
        self._write_conditions(gang, messages, state, now)
        waits = why.reason == WAITING_REASON
        if waits and state.waiting_since is None:
            state.waiting_since = now
        elif not waits:
            state.waiting_since = None
        self._log_state(gang, state, why)
        for pod in gang.pending:
            message = messages.get(pod.uid)
            if message is None or pod.scheduling_gates:
                continue  # as kube-scheduler: a gated pod is not tried, so no event
            record = state.pods.get(pod.uid)
            if record is None:
                record = state.pods[pod.uid] = _PodEvents(pod_ref(pod))
            if record.message != message:
                record.message = message  # a new message counts its own attempts
                record.unwritten = 0
            record.unwritten += 1
            state.unwritten = True
        self._write_events(gang.key, state, now)
        self._status(gang, 0, why, now)

    def _log_state(self, gang: Gang, state: _GangFeedback, why: Why) -> None:
        """One log line per change of what a gang waits for, not one per attempt (the
        planner's attempts have their own line in the runner)."""
        if why.reason != WAITING_REASON or state.logged == why.message:
            state.logged = why.message if why.reason == WAITING_REASON else ""
            return
        state.logged = why.message
        log_event(
            log,
            "gang waiting",
            gang=gang.key,
            pending=len(gang.pending),
            members=gang.min_member,
            reason=why.message,
        )

    def _in_grace(self, state: _GangFeedback, now: float) -> bool:
        """Whether the gang began to wait for members too recently for a Warning (its
        controller may still be creating them)."""
        return state.waiting_since is not None and now - state.waiting_since < self.waiting_grace

    def _write_events(self, gang_key: str, state: _GangFeedback, now: float) -> None:
        """A round of FailedScheduling writes when the window allows one (every member
        with attempts not yet written); else only the first event of members that have
        none yet, at once."""
        if not state.unwritten:
            return
        if self._in_grace(state, now):
            self.stats.suppressed += 1
            return
        if now - state.last_event_write >= self.window and self._take_budget(state, now):
            state.last_event_write = now
            state.unwritten = False
            for record in state.pods.values():
                if record.unwritten and not self._write_pod_event(record, now):
                    state.unwritten = True  # the spam filter held it: a later round
            return
        held = False
        for record in state.pods.values():
            if not record.unwritten:
                continue
            if record.queued or not self._write_pod_event(record, now):
                held = True
        state.unwritten = held
        if held:
            self.stats.suppressed += 1

    def _write_pod_event(self, record: _PodEvents, now: float) -> bool:
        """Queue one member's FailedScheduling write; False when its spam filter says no."""
        if not record.spam.allow(now):
            return False
        record.queued = True
        self.stats.events += 1

        async def write(client: KubeClient) -> None:
            # Read the record when the write runs, so queued attempts are all counted.
            count, message = record.unwritten, record.message
            if not count:
                return
            record.unwritten = 0
            event = record.event
            try:
                if event is not None:
                    combined = event.combined or (
                        event.message != message and not record.similar.may_create(now)
                    )
                    if event.message == message or combined:
                        try:
                            await self._bump(client, event, count, message if combined else None)
                            return
                        except ApiError as err:
                            if err.status != 404:
                                raise
                            # The event expired (the API keeps events an hour): start anew.
                record.event = await self._create_event(
                    client, record.ref, "Warning", "FailedScheduling", message, count
                )
                record.similar.created(now)
            except BaseException:
                if record.message == message:
                    record.unwritten += count
                raise

        self.queue.submit(("failed-scheduling", record.ref.uid or record.ref.name), write)
        return True

    def _write_conditions(
        self, gang: Gang, messages: Mapping[str, str], state: _GangFeedback, now: float
    ) -> None:
        round_due = now - state.last_condition_round >= self.window
        wrote = False
        for pod in gang.pending:
            message = messages.get(pod.uid)
            if message is None:
                continue
            written = self._conditions.get(pod.uid)
            if written == message:
                state.held.pop(pod.uid, None)
                continue
            if written is not None and not round_due:
                # Written when the window ends (`tick`), unless it changes back first.
                state.held[pod.uid] = (pod, message)
                self.stats.suppressed += 1
                continue
            wrote = True
            state.held.pop(pod.uid, None)
            self._conditions[pod.uid] = message
            self._condition(pod, message, first=written is None)
        if wrote and round_due:
            # The window starts with the gang's first writes; a new member's first
            # write inside it does not move it.
            state.last_condition_round = now

    def _write_held_conditions(self, state: _GangFeedback, now: float) -> None:
        """The changed messages the window held back (prune dropped those of pods that
        no longer wait), in one round."""
        for uid, (pod, message) in state.held.items():
            if self._conditions.get(uid) != message:
                self._conditions[uid] = message
                self._condition(pod, message, first=False)
        state.held.clear()
        state.last_condition_round = now

    def _condition(self, pod: PodInfo, message: str, *, first: bool) -> None:
        condition: JsonObject = {
            "type": "PodScheduled",
            "status": "False",
            # As kube-scheduler: a gated pod is not unschedulable, it is not ready yet.
            "reason": "SchedulingGated" if pod.scheduling_gates else "Unschedulable",
            "message": message,
        }
        if first:
            condition["lastTransitionTime"] = rfc3339(self._wall())
            condition["lastProbeTime"] = None
        body = {"status": {"conditions": [condition]}}
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        uid = pod.uid
        self.stats.conditions += 1

        async def write(client: KubeClient) -> None:
            try:
                # One condition with absolute values: a repeat is harmless.
                await client.call(
                    "PATCH", path, body=body, content_type=STRATEGIC_MERGE, retry_on=transient
                )
            except ApiError as err:
                if err.status != 404:
                    self._conditions.pop(uid, None)  # written again on the next attempt
                    raise
            except Exception:
                # No answer in time, a cut connection: not known to be written.
                self._conditions.pop(uid, None)
                raise

        self.queue.submit(("condition", uid), write)

    async def _bump(
        self, client: KubeClient, event: _EventObject, count: int, combined: str | None = None
    ) -> None:
        """Add `count` to an Event we wrote; `combined`: the newest of too many similar
        messages, which replaces the Event's message (client-go's aggregator)."""
        body: JsonObject = {"count": event.count + count, "lastTimestamp": rfc3339(self._wall())}
        message = event.message
        if combined is not None:
            message = (COMBINED_PREFIX + combined)[:MAX_EVENT_MESSAGE]
            body["message"] = message
        # The count written is absolute (not an increment): a repeat is harmless.
        await client.call(
            "PATCH",
            f"/api/v1/namespaces/{event.ref.namespace}/events/{event.name}",
            body=body,
            content_type=MERGE,
            retry_on=transient,
        )
        event.count += count
        if combined is not None:
            event.message = combined
            event.combined = True

    def pod_warning(self, pod: PodInfo, reason: str, message: str) -> None:
        """A Warning event on one pod (e.g. GPUUnhealthy, scheduler/kube/gpu_faults.py)."""
        self._event(pod_ref(pod), "Warning", reason, message)

    # --- plain events ---------------------------------------------------------------------
    def event(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None:
        """A one-off event (preemption: scheduler/kube/preemption.py)."""
        self._event(ref, kind, reason, message)

    def _event(
        self,
        ref: ObjectRef,
        kind: str,
        reason: str,
        message: str,
        key: Hashable | None = None,
    ) -> None:
        self.stats.events += 1

        async def write(client: KubeClient) -> None:
            await self._create_event(client, ref, kind, reason, message, 1)

        self.queue.submit(key or ("event", next(self._names)), write)

    async def _create_event(
        self,
        client: KubeClient,
        ref: ObjectRef,
        kind: str,
        reason: str,
        message: str,
        count: int,
    ) -> _EventObject:
        if ref.kind == "PodGroup" and not ref.uid:
            ref = await self._with_podgroup_uid(client, ref)
        stamp = self._wall()
        name = f"{ref.name}.{int(stamp * 1e9):x}{next(self._names):x}"
        involved: JsonObject = {
            "kind": ref.kind,
            "namespace": ref.namespace,
            "name": ref.name,
            "apiVersion": ref.api_version,
        }
        if ref.uid:
            involved["uid"] = ref.uid
        body: JsonObject = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ref.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:MAX_EVENT_MESSAGE],
            "type": kind,
            "count": count,
            "firstTimestamp": rfc3339(stamp),
            "lastTimestamp": rfc3339(stamp),
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
        }
        # A create is not repeated: one whose answer was lost may have landed, and the
        # aggregated count goes out with the gang's next event anyway.
        await client.call(
            "POST", f"/api/v1/namespaces/{ref.namespace}/events", body=body, retry_on=never
        )
        return _EventObject(name, ref, message, count)

    async def _with_podgroup_uid(self, client: KubeClient, ref: ObjectRef) -> ObjectRef:
        key = f"{ref.namespace}/{ref.name}"
        uid = self._podgroup_uids.get(key)
        known = self.podgroup_uid(key)
        if uid is None or (known and uid != known):  # unknown, or of a PodGroup since replaced
            path = podgroup_status_path(ref.namespace, ref.name).removesuffix("/status")
            try:
                found = await client.call("GET", path, retry_on=transient)
            except ApiError as err:
                if err.status != 404:
                    raise
                found = {}
            meta = found.get("metadata")
            uid = str(meta.get("uid") or "") if isinstance(meta, dict) else ""
            self._podgroup_uids[key] = uid
        return ObjectRef(ref.kind, ref.namespace, ref.name, uid)

    # --- helpers ----------------------------------------------------------------------
    def _gang(self, key: str) -> _GangFeedback:
        state = self._gangs.get(key)
        if state is None:
            state = self._gangs[key] = _GangFeedback()
        return state

    def _take_budget(self, state: _GangFeedback, now: float) -> bool:
        """One Warning write of the gang's budget for the current window."""
        if now - state.window_start >= self.window:
            state.window_start = now
            state.writes_in_window = 0
        if state.writes_in_window >= self.max_per_window:
            return False
        state.writes_in_window += 1
        return True

    @staticmethod
    def _representative(gang: Gang) -> ObjectRef | None:
        """Where gang-level events go: the oldest pending member (gang.pending is
        sorted by age), so that they stay on one pod across attempts."""
        return pod_ref(gang.pending[0]) if gang.pending else None

    @staticmethod
    def _problem_ref(problem: Problem, pods: Mapping[str, PodInfo]) -> ObjectRef:
        namespace, _, name = problem.key.partition("/")
        if problem.kind == "Pod":
            pod = pods.get(problem.key)
            return ObjectRef("Pod", namespace, name, pod.uid if pod else "")
        return ObjectRef("PodGroup", namespace, name)

    def _status(self, gang: Gang, newly_bound: int, why: Why | None, now: float) -> None:
        if self.has_podgroup(gang.key):
            status = podgroup_status(gang.min_member, gang.bound, newly_bound, why)
            self.podgroup_status(gang.key, status, now)
        elif self.native_podgroup(gang.key):
            scheduled = len([p for p in gang.bound if p.consumes_resources]) + newly_bound
            reason = why.message if why is not None else ""
            self._write_native(gang.key, native_condition(gang.min_member, scheduled, reason), now)

    def _write_native(self, key: str, condition: NativeCondition, now: float) -> None:
        """Patch a native PodGroup's PodGroupScheduled condition when it changed; one
        whose message alone changed waits for the end of the window (`tick`)."""
        last = self._native_status.get(key)
        if last is not None:
            if not condition.message and last[0].status == condition.status:
                condition = last[0]  # no reason given (a refresh): keep the one written
            if last[0] == condition:
                self._held_native.pop(key, None)
                return
            if last[0].status == condition.status and now - last[2] < self.window:
                self._held_native[key] = condition
                self.stats.suppressed += 1
                return
        self._held_native.pop(key, None)
        self._put_native(key, condition, now)

    def _put_native(self, key: str, condition: NativeCondition, now: float) -> None:
        last = self._native_status.get(key)
        changed = last is None or last[0].status != condition.status
        transition = self._wall() if changed or last is None else last[1]
        self._native_status[key] = (condition, transition, now)
        namespace, _, name = key.partition("/")
        self.stats.podgroup_statuses += 1
        body = {"status": {"conditions": [condition.as_json(transition)]}}
        path = native_status_path(namespace, name)

        def forget() -> None:
            self._native_status.pop(key, None)  # try again on the next change

        self.queue.submit(
            ("native-podgroup-status", key),
            status_patch(path, body, STRATEGIC_MERGE, forget, f"PodGroup {key}"),
        )


@dataclass(frozen=True)
class _WrittenStatus:
    """A PodGroup status as last written: for which uid, when its condition last changed
    status (lastTransitionTime), and when it was written (scheduler clock)."""

    uid: str
    status: PodGroupStatus
    transition: float
    written_at: float


def _keep_condition(status: PodGroupStatus, last: PodGroupStatus) -> PodGroupStatus:
    """A status computed with no reason at hand (a refresh while Pending) keeps the
    condition last written instead of dropping it."""
    if status.condition is None and status.phase == "Pending" and last.condition is not None:
        return dataclasses.replace(status, condition=last.condition)
    return status


def _message_only(last: PodGroupStatus, status: PodGroupStatus) -> bool:
    """Whether two statuses differ only in their condition's message."""
    if last.condition is None or status.condition is None:
        return False
    same_condition = dataclasses.replace(status.condition, message=last.condition.message)
    return dataclasses.replace(status, condition=same_condition) == last


def status_patch(
    path: str,
    body: JsonObject,
    content_type: str,
    forget: Callable[[], None],
    what: str,
) -> Callable[[KubeClient], Awaitable[None]]:
    """A write of an object's status for the WriteQueue. An object that is gone (404) has
    nothing to report on; any other failure calls `forget`, so that the status is written
    again on the next change instead of being taken as written."""

    async def write(client: KubeClient) -> None:
        try:
            # Absolute values (a merge patch of the status): a repeat is harmless.
            await client.call(
                "PATCH", path, body=body, content_type=content_type, retry_on=transient
            )
        except ApiError as err:
            if err.status != 404:
                forget()
                raise
            log.debug("no %s to report status on", what)
        except Exception:
            # No answer in time, a cut connection: not known to be written.
            forget()
            raise

    return write


def _shared_problems(gang: Gang) -> set[tuple[str, str, str]]:
    """Pod problems every pending member carries alike (a gang-wide problem)."""
    if len(gang.pending) < 2:
        return set()
    holders: dict[tuple[str, str, str], set[str]] = {}
    for problem in gang.problems:
        if problem.kind == "Pod":
            holders.setdefault((problem.kind, problem.reason, problem.message), set()).add(
                problem.key
            )
    everyone = {pod.key for pod in gang.pending}
    return {identity for identity, keys in holders.items() if everyone <= keys}
