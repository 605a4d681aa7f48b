"""`gang-scheduler run`: the adapters wired around one SchedulingCore.

What runs, all on one event loop (the core is single-threaded; nothing else touches it
between two awaits, so no lock is needed):

- the informers (pods, nodes, PodGroups) feeding the core; every change wakes the loop;
- the HTTP servers (`/metrics`, `/healthz`, `/readyz`; `/debug/gangs` on loopback),
  reading the core through `SchedulerRun` (the `StatusSource`);
- the `WriteQueue` workers writing conditions, events and PodGroup status;
- the `LeaderElector` when leader election is enabled: only the leader schedules, and
  losing the lease stops scheduling at once (`on_lease_lost`, by default
  leader.lease_lost, exits the process with status 1, so a stale cache never binds);
- the scheduling loop (`SchedulerRun._schedule`). It sleeps until the informers report
  a change, a bind finishes, the queue's next wake-up (a backoff ending) or a periodic
  tick (`TICK_SECONDS`, for re-reading pods whose bind had no known outcome, the
  feedback windows and the partial-gang review), never in a busy loop. Each cycle:
  start re-reading pods whose bind outcome is unknown (`resolve_unknown`, at most every
  `RESOLVE_INTERVAL_SECONDS`; no reservation ever expires on a clock), then plan gangs
  one after the other; a Plan is bound in a background task
  (`bind_and_settle`; at most `MAX_GANGS_BINDING` gangs at once, the binder's semaphore
  bounds the requests), an Unschedulable result goes to the recorder. After the cycle:
  waiting messages and spec problems are published, held-back events written, and the
  gangs found partial are reviewed (crash safety, docs/kubernetes.md).

Shutdown (the `stop` event, SIGTERM in the CLI): stop planning, let binds in flight
finish (up to the bind timeout), stop the informers, drain the write queue, release the
lease, stop the HTTP server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import time
from collections import ChainMap
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, cast

from aiohttp import web

from cache.dra.claims import Claim
from cache.native_gang import NATIVE_GROUP
from cache.pod import PodInfo
from cache.signing import SigningKeys
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import Gang
from scheduler.gangs.isolation import FATAL, describe
from scheduler.kube.binder import (
    GangBinder,
    GangBindResult,
    MemberOutcome,
    PartialGangs,
    bind_and_settle,
    resolve_unknown,
)
from scheduler.kube.call_policy import CallPolicy
from scheduler.kube.client import KubeClient, TokenBucket
from scheduler.kube.connect import connect
from scheduler.kube.dra_claims import ClaimWriter
from scheduler.kube.events import FeedbackRecorder, WriteQueue
from scheduler.kube.gpu_faults import GpuFaultNotifier
from scheduler.kube.informer import ClusterInformers
from scheduler.kube.leader import Callback, LeaderElector, lease_lost
from scheduler.kube.preemption import PreemptionActions
from scheduler.kube.quota_status import QuotaStatusWriter
from scheduler.kube.signing_secret import obtain_signing_keys
from scheduler.kube.volumes import VolumePrebinder
from scheduler.planner.result import Plan
from scheduler.process.config import SchedulerConfig, build_core_from
from scheduler.process.http import make_app, make_debug_app, serve
from scheduler.process.logs import log_event
from scheduler.process.metrics import BindFailureReason, Resource, SchedulerMetrics
from scheduler.process.version import python_version, version

log = logging.getLogger(__name__)

# The longest the loop sleeps with nothing to do: feedback windows close and partial
# gangs are reviewed at this resolution.
TICK_SECONDS = 1.0
# Pods whose bind ended without a known outcome are read again at most this often.
RESOLVE_INTERVAL_SECONDS = 2.0
# How long shutdown waits for the scheduling loop to end once cancelled.
SHUTDOWN_LOOP_SECONDS = 5.0
# Gangs whose binds are in flight at once; the binder's semaphore bounds the requests.
MAX_GANGS_BINDING = 64
# Exit statuses of run_scheduler.
EXIT_OK = 0
EXIT_FAILED = 1
# The garbage collector's first threshold in the scheduler's process (CPython's default
# is 700). Decoding a list page allocates ~100,000 short-lived objects; with the
# default, young collections run so often that they cost more than the decoding.
# Measured in bench/kube.py (2,000 nodes, 60,000 running pods): the initial sync took
# 10.4 s at 700 and 6.1 s at 10,000, for the same peak RSS.
GC_YOUNG_THRESHOLD = 10_000


async def run_scheduler(
    config: SchedulerConfig,
    kubeconfig: str | None,
    *,
    clock: Callable[[], float] = time.monotonic,
    stop: asyncio.Event | None = None,
    config_path: str | None = None,
    on_lease_lost: Callback | None = lease_lost,
) -> int:
    """Run the scheduler until `stop` is set (0) or something fatal happens (1): the
    lease lost, an informer failing on a bug, the scheduling loop crashing. What stops it
    from starting (the kubeconfig, the API server, a port) raises StartupError.
    `config_path` is only logged (where `config` came from). `on_lease_lost` runs when
    leadership is lost; by default it exits the process (leader.lease_lost)."""
    # The first line of every start: which build, before anything can fail.
    log_event(log, "starting gang-scheduler", version=version(), python=python_version())
    client, _ = await connect(kubeconfig, qps=config.client.qps, burst=config.client.burst)
    log_configuration(config, config_path)
    try:
        keys = await obtain_signing_keys(client, config.assignment_signing)
        run = SchedulerRun(config, client, clock=clock, keys=keys, on_lease_lost=on_lease_lost)
        async with collector_tuned_for(run.informers):
            return await run.run(stop or asyncio.Event())
    finally:
        await client.close()


def call_policy_of(config: SchedulerConfig) -> CallPolicy:
    """The configured time limit and retries of API calls (`client.*`)."""
    client = config.client
    return CallPolicy(
        timeout_seconds=client.request_timeout_seconds,
        attempts=client.retry_attempts,
        initial_backoff_seconds=client.retry_backoff_seconds,
        max_backoff_seconds=client.max_retry_backoff_seconds,
    )


def log_configuration(config: SchedulerConfig, path: str | None) -> None:
    """The configuration in use, at start-up: its file and the options that decide what
    this instance does and where it listens."""
    http = config.http
    log_event(
        log,
        "configuration",
        config=path or "(none: every option at its default)",
        schedulerName=config.scheduler_name,
        policy=config.policy.name,
        leaderElection=config.leader_election.enabled,
        onBindFailure=config.binding.on_bind_failure,
        metrics=f"{http.address}:{http.port}",
        debug=f"{http.debug_address}:{http.debug_port}" if http.debug_port else "off",
    )


@contextlib.asynccontextmanager
async def collector_tuned_for(informers: ClusterInformers) -> AsyncIterator[None]:
    """The garbage collector set for a process that holds a large, long-lived cache:
    a higher young-generation threshold (GC_YOUNG_THRESHOLD) and, once the caches have
    synced, everything allocated so far (the cache of every node and pod, the loaded
    modules) moved to the permanent generation with `gc.freeze()`, so that full
    collections stop walking it again and again. Process-wide: for `run_scheduler` and
    the benchmark, not for a test process. Restored on the way out."""
    first, *older = gc.get_threshold()
    gc.set_threshold(max(first, GC_YOUNG_THRESHOLD), *older)

    async def freeze_once_synced() -> None:
        await informers.wait_synced()
        gc.freeze()

    freezer = asyncio.create_task(freeze_once_synced(), name="gc-freeze")
    try:
        yield
    finally:
        freezer.cancel()
        gc.unfreeze()
        gc.set_threshold(first, *older)


class SchedulerRun:
    """One running scheduler; also the `StatusSource` of its HTTP server."""

    def __init__(
        self,
        config: SchedulerConfig,
        client: KubeClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        keys: SigningKeys | None = None,
        on_lease_lost: Callback | None = lease_lost,
    ) -> None:
        self.config = config
        # Every call's time limit and retries (call_policy.py), before any view of the
        # client (the feedback writers' `sharing`) copies it.
        client.policy = call_policy_of(config)
        self.client = client
        self._clock = clock
        # The signing keys (run_scheduler reads them from the Secret); without them, as
        # build_core_from decides (keyFile, else a key of this process).
        self._core = build_core_from(config, keys)
        self._gpu_faults = GpuFaultNotifier()
        self._metrics = SchedulerMetrics(
            namespace_labels=config.metrics.namespace_labels,
            max_namespaces=config.metrics.max_namespaces,
        )
        self._wake = asyncio.Event()
        self.informers = ClusterInformers(
            self._core,
            client,
            clock=clock,
            on_relist=self._relisted,
            on_change=self._wake.set,
        )
        # Feedback writes take tokens from a budget of their own (`events.qps`), so a
        # flood of conditions for 10,000 pending pods never delays a bind.
        feedback_budget = TokenBucket(config.events.qps, config.events.burst)
        self.writes = WriteQueue(client.sharing(feedback_budget))
        self.recorder = FeedbackRecorder(
            self.writes,
            window=config.events.aggregation_window_seconds,
            max_per_gang_per_window=config.events.max_per_gang_per_window,
            waiting_grace=config.events.waiting_grace_seconds,
            scheduled_events=config.events.scheduled,
            has_podgroup=lambda key: key in self._core.cache.podgroups(),
            podgroup_uid=self._podgroup_uid,
            native_podgroup=self._native_podgroup,
        )
        self.quota_status = QuotaStatusWriter(self.writes)
        self.binder = GangBinder(
            client,
            concurrency=config.binding.concurrency,
            timeout=config.timeouts.bind_timeout_seconds,
            on_failure=config.binding.on_bind_failure,
            clock=clock,
            signing_key=self._core.cache.assignment_keys,
        )
        self.partial = PartialGangs(config.binding.partial_gang_grace_seconds)
        # Priority preemption: the core decides, this evicts (scheduler/kube/preemption.py).
        self._core.preempter.enabled = config.preemption.enabled
        self._core.preempter.reclaim = config.preemption.reclaim
        self.preemptions = PreemptionActions(
            client, self._core, self.recorder, clock, self._wake.set, self._metrics
        )
        self.volumes = VolumePrebinder(client, timeout=config.timeouts.bind_timeout_seconds)
        # DRA claims' allocation and reservedFor, written before a gang's Bindings.
        self.claims = ClaimWriter(client, self._core.dra)
        self.elector: LeaderElector | None = None
        election = config.leader_election
        if election.enabled:
            self.elector = LeaderElector(
                client,
                namespace=election.lease_namespace,
                name=election.lease_name,
                lease_duration=election.lease_duration_seconds,
                renew_deadline=election.renew_deadline_seconds,
                retry_period=election.retry_period_seconds,
                on_started_leading=lambda: self._metrics.set_leader(True),
                on_stopped_leading=on_lease_lost,
            )
        self._binding: set[asyncio.Task[None]] = set()
        self._deleting: set[asyncio.Task[None]] = set()
        self._resolving: asyncio.Task[None] | None = None
        self._resolved_at = float("-inf")
        # Claims earlier attempts left for pending pods' extended resources (deleted as
        # kube-scheduler's PostFilter deletes them), one pass at a time.
        self._cleaning: asyncio.Task[None] | None = None
        self._cleaned_at = float("-inf")
        self._waiting_shown: dict[str, tuple[str, frozenset[str]]] = {}
        self._loop_task: asyncio.Task[int] | None = None
        # Set at shutdown; the loop checks it, so a cancellation that asyncio.wait_for
        # swallowed on Python 3.11 (one arriving with a wake-up) cannot keep it running.
        self._stopping = False
        # The last cycle failure logged (crash isolation), so a repeating one logs once.
        self._cycle_failure = ""

    def _native_podgroup(self, key: str) -> bool:
        """The gang is sized by a PodGroup of Kubernetes' own API (status written there)."""
        group = self._core.index.podgroup(key)
        return group is not None and group.api == NATIVE_GROUP

    def _podgroup_uid(self, key: str) -> str | None:
        group = self._core.cache.podgroups().get(key)
        return group.uid if group is not None else None

    # --- StatusSource -------------------------------------------------------------------
    @property
    def core(self) -> SchedulingCore:
        return self._core

    @property
    def metrics(self) -> SchedulerMetrics:
        return self._metrics

    def now(self) -> float:
        return self._clock()

    def is_alive(self) -> bool:
        return self._loop_task is not None and not self._loop_task.done()

    def role(self) -> str:
        return "leader" if self.elector is None or self.elector.is_leader else "standby"

    def is_ready(self) -> tuple[bool, str]:
        if self.informers.synced:
            return True, ""
        waiting = [i.kind.name for i in self.informers.informers if not i.synced.is_set()]
        return False, f"caches not synced yet: {', '.join(waiting)}"

    # --- the process --------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> int:
        http = await serve(make_app(self), self.config.http.address, self.config.http.port)
        try:
            debug = await self._serve_debug()
        except BaseException:
            await http.cleanup()
            raise
        self.writes.start()
        informers = asyncio.create_task(self.informers.run(), name="informers")
        elector = (
            asyncio.create_task(self.elector.run(), name="leader-election")
            if self.elector is not None
            else None
        )
        self._loop_task = asyncio.create_task(self._schedule(), name="scheduling-loop")
        stopped = asyncio.create_task(stop.wait(), name="stop")
        watched: set[asyncio.Future[Any]] = {informers, self._loop_task, stopped}
        if elector is not None:
            watched.add(elector)
        code = EXIT_OK
        try:
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if stopped not in done:
                code = EXIT_FAILED
                for task in done:
                    _log_end(task)
        finally:
            log_event(
                log,
                "shutting down",
                binds_in_flight=len(self._binding),
                writes_queued=len(self.writes),
                leader=self.role() == "leader",
            )
            self._stopping = True
            self._wake.set()
            for task in (self._loop_task, stopped):
                task.cancel()
            await _settle_within(SHUTDOWN_LOOP_SECONDS, self._loop_task, stopped)
            await self._finish_binds()
            informers.cancel()
            await _settle(informers)
            await self.writes.close(drain=True)
            if self.elector is not None and elector is not None:
                elector.cancel()
                await _settle(elector)
                with contextlib.suppress(Exception):
                    await self.elector.release()
                self._metrics.set_leader(False)
            await http.cleanup()
            if debug is not None:
                await debug.cleanup()
            log_event(log, "stopped", exit_code=code, writes_unwritten=len(self.writes))
        return code

    async def _serve_debug(self) -> web.AppRunner | None:
        """The loopback listener of /debug/gangs, when http.debugPort is set."""
        settings = self.config.http
        if not settings.debug_port:
            return None
        return await serve(make_debug_app(self), settings.debug_address, settings.debug_port)

    async def _finish_binds(self) -> None:
        """Let binds in flight end (they are bounded by the bind timeout), so a clean
        shutdown leaves no gang half-bound; cancel what outlives that."""
        pending = self._binding | self._deleting | self.preemptions.tasks
        for task in (self._resolving, self._cleaning):
            if task is not None:
                task.cancel()
                pending = pending | {task}
        if not pending:
            return
        _, late = await asyncio.wait(pending, timeout=self.binder.timeout + 1.0)
        for task in late:
            task.cancel()
        await _settle(*late)

    # --- the scheduling loop --------------------------------------------------------------
    async def _schedule(self) -> int:
        await self.informers.wait_synced()
        if self.elector is not None:
            await self._stand_by(self.elector)
        else:
            self._metrics.set_leader(True)
        now = self._clock()
        self._core.refresh(now)
        found = self.partial.found_at_start(self._partial_candidates().values(), now)
        if found:
            log.warning("gangs found partial on taking over: %s", ", ".join(sorted(found)))
        while not self._stopping:
            self._wake.clear()
            if not self._leading():
                log.error("not the leader any more: scheduling stops")
                return EXIT_FAILED
            await self._guarded_cycle(self._clock())
            self._metrics.cycle_completed()
            await self._sleep()
        return EXIT_OK

    async def _stand_by(self, elector: LeaderElector) -> None:
        """Until this replica leads: keep the gangs and the queue up to date with what
        the informers see (no attempt, no write), so that a standby's gauges and debug
        answers count the same pending pods and gangs as the leader's."""
        log.info("standing by: %s holds no lease yet, scheduling nothing", elector.identity)
        while not elector.started.is_set():
            self._wake.clear()
            self._core.refresh(self._clock())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_SECONDS):
                    await _first(self._wake.wait(), elector.started.wait())

    async def _sleep(self) -> None:
        """Until something changed, a bind ended, the queue's next wake-up or the tick."""
        now = self._clock()
        timeout = TICK_SECONDS
        if len(self._binding) < MAX_GANGS_BINDING:
            wakeup = self._core.queue.next_wakeup(now)
            if wakeup is not None:
                timeout = min(timeout, max(0.0, wakeup - now))
        if timeout <= 0.0:
            await asyncio.sleep(0)  # a gang is due now: run the cycle, let I/O in first
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()

    def _leading(self) -> bool:
        return self.elector is None or self.elector.is_leader

    async def _guarded_cycle(self, now: float) -> None:
        """A cycle that raises (a bug: the core isolates objects and gangs itself) is
        logged, once while it keeps failing the same way, and the loop goes on: one
        object must never stop the scheduler (scheduler/gangs/isolation.py)."""
        try:
            await self._cycle(now)
        except FATAL:
            raise
        except Exception as error:
            text = describe(error)
            if text != self._cycle_failure:
                log.exception("scheduling cycle failed; the loop goes on")
            self._cycle_failure = text
        else:
            self._cycle_failure = ""

    def _recorded(self, what: str, key: str, write: Callable[[], None]) -> None:
        """Record one gang's feedback; a failure is that gang's, logged, not the loop's."""
        try:
            write()
        except FATAL:
            raise
        except Exception:
            log.exception("%s for %s failed", what, key)

    async def _cycle(self, now: float) -> None:
        core = self._core
        self._resolve_unknown(now)
        if self._leading():
            self._clean_stale_claims(now)
        # Gangs planned this cycle leave the pending set once bound; their members'
        # spec problems must still be published.
        planned: list[Gang] = []
        while len(self._binding) < MAX_GANGS_BINDING and self._leading():
            began = time.perf_counter()
            attempt = core.schedule_next(now)
            if attempt is None:
                break
            seconds = time.perf_counter() - began
            result = attempt.result
            self.partial.attempted(attempt.gang.key, isinstance(result, Plan))
            if isinstance(result, Plan):
                if attempt.gang.problems:
                    planned.append(attempt.gang)
                self._metrics.attempt("scheduled", seconds)
                log_event(
                    log,
                    "gang planned",
                    gang=attempt.gang.key,
                    members=len(result.placements),
                    nodes=plan_nodes(result),
                    attempt=attempt.number,
                    duration=seconds,
                )
                self._start_bind(attempt.gang, result, attempt.ready_since)
            else:
                self._metrics.attempt("unschedulable", seconds)
                log_event(
                    log,
                    "gang unschedulable",
                    gang=attempt.gang.key,
                    members=result.needed,
                    placeable=result.placeable,
                    attempt=attempt.number,
                    reason=result.message,
                    duration=seconds,
                )
                self._recorded(
                    "recording unschedulable",
                    attempt.gang.key,
                    functools.partial(self.recorder.unschedulable, attempt.gang, result, now),
                )
                if attempt.preemption is not None:
                    self.preemptions.start(attempt.preemption)
            # Let binds, watch events and scrapes run between two plans.
            await asyncio.sleep(0)
            now = self._clock()
        core.refresh(now)
        for key, nodes in core.starvation.announcements():  # the starvation guard's
            reserved = core.gangs.get(key)
            if reserved is not None:
                self.recorder.reserved(reserved, nodes)
        if self._leading():
            self._gpu_faults.check(core.cache, self.recorder.pod_warning)
        self._publish_waiting(now)
        gone = [gang for gang in planned if gang.key not in core.gangs]
        self.recorder.problems([*core.gangs.values(), *gone], now)
        self.recorder.prune(core.gangs)
        self.recorder.tick(now)
        self._recorded(
            "writing quota status",
            "elasticquotas",
            functools.partial(self.quota_status.publish, core.cache.quotas, now),
        )
        self._review_partial(now)

    def _publish_waiting(self, now: float) -> None:
        """Waiting messages, written when a gang's message or members change (the
        recorder counts every call as an attempt). Only the gangs rebuilt since the
        last cycle are looked at, when the core can say which."""
        changes = self._core.waiting_changes()
        if changes is not None:
            waiting, done = changes
            for key in done:
                self._waiting_shown.pop(key, None)
            for gang, message in waiting:
                identity = (message, frozenset(pod.uid for pod in gang.pending))
                if self._waiting_shown.get(gang.key) != identity:
                    self._recorded(
                        "recording waiting",
                        gang.key,
                        functools.partial(self.recorder.waiting, gang, message, now),
                    )
                self._waiting_shown[gang.key] = identity
            return
        shown: dict[str, tuple[str, frozenset[str]]] = {}
        for gang, message in self._core.waiting():
            identity = (message, frozenset(pod.uid for pod in gang.pending))
            shown[gang.key] = identity
            if self._waiting_shown.get(gang.key) != identity:
                self._recorded(
                    "recording waiting",
                    gang.key,
                    functools.partial(self.recorder.waiting, gang, message, now),
                )
        self._waiting_shown = shown

    def _partial_candidates(self) -> Mapping[str, Gang]:
        """Gangs the partial-gang rule looks at: those with pending members, and the
        partial ones with none (members deleted and not recreated, or never created),
        which would otherwise hold their GPUs forever."""
        # ChainMap only reads here; its type asks for mutable maps.
        return ChainMap(
            cast(dict[str, Gang], self._core.gangs), cast(dict[str, Gang], self._core.partial_gangs)
        )

    def _review_partial(self, now: float) -> None:
        candidates = self._partial_candidates()
        for key, decision in self.partial.review(candidates, now).items():
            gang = candidates.get(key)
            if decision != "delete" or gang is None or not gang.bound:
                continue
            # Only the members this scheduler bound: one pinned to its node by whoever
            # created it is not ours to delete (cache/ownership.py, docs/security.md).
            ours = [pod for pod in gang.bound if self._core.cache.bound_by_us(pod)]
            log_event(
                log,
                "gang stayed partial past its grace period: deleting the members it bound",
                logging.WARNING,
                gang=key,
                bound=len(gang.bound),
                deleting=len(ours),
                members=gang.min_member,
                grace=self.partial.grace_for(gang),
            )
            if not ours:
                continue
            task = asyncio.create_task(self._delete_partial(gang, ours), name=f"undo-{key}")
            self._deleting.add(task)
            task.add_done_callback(self._deleting.discard)

    async def _delete_partial(self, gang: Gang, pods: list[PodInfo]) -> None:
        undo = await self.binder.delete_members(pods)
        for pod_key, error in undo.errors.items():
            log.warning("could not delete %s of partial gang %s: %s", pod_key, gang.key, error)

    # --- binding ------------------------------------------------------------------------
    def _resolve_unknown(self, now: float) -> None:
        """Start re-reading the pods whose bind outcome is unknown (one pass at a time,
        at most every RESOLVE_INTERVAL_SECONDS): their reservations hold until a read,
        the watch or a relist settles them."""
        if self._resolving is not None or now - self._resolved_at < RESOLVE_INTERVAL_SECONDS:
            return
        if not self._core.cache.unresolved():
            return
        self._resolving = asyncio.create_task(self._resolve_pass(), name="resolve-unknown")

    async def _resolve_pass(self) -> None:
        try:
            settled = await resolve_unknown(self._core, self.binder, self._clock)
            if settled:
                log.info("settled %d bind(s) whose outcome was unknown", settled)
                self._wake.set()
        except Exception:
            log.exception("re-reading pods whose bind outcome is unknown failed")
        finally:
            self._resolving = None
            self._resolved_at = self._clock()

    def _clean_stale_claims(self, now: float) -> None:
        """Start deleting the claims earlier attempts left for pending members'
        extended resources (SchedulingCore.stale_extended_claims) and taking waiting
        gangs' PodGroups off their group claims (stale_group_reservations), at most
        every RESOLVE_INTERVAL_SECONDS; the claims' events retry the gangs."""
        if self._cleaning is not None or now - self._cleaned_at < RESOLVE_INTERVAL_SECONDS:
            return
        stale = self._core.stale_extended_claims()
        reserved = self._core.stale_group_reservations()
        if not stale and not reserved:
            return
        self._cleaning = asyncio.create_task(self._clean_pass(stale, reserved), name="stale-claims")

    async def _clean_pass(self, stale: list[Claim], reserved: list[tuple[Claim, str]]) -> None:
        try:
            deleted = await self.claims.delete_stale(stale) if stale else 0
            if deleted:
                log.info("deleted %d extended-resource claim(s) left by earlier attempts", deleted)
            released = await self.claims.release_group_reservations(reserved) if reserved else 0
            if released:
                log.info("released %d group claim(s) of PodGroups with no pod placed", released)
        except Exception:
            log.exception("cleaning claims left by earlier attempts failed")
        finally:
            if reserved:
                self._core.group_release_ended(self._clock())
                self._wake.set()
            self._cleaning = None
            self._cleaned_at = self._clock()

    def _start_bind(self, gang: Gang, plan: Plan, ready_since: float | None) -> None:
        task = asyncio.create_task(self._bind(gang, plan, ready_since), name=f"bind-{gang.key}")
        self._binding.add(task)
        task.add_done_callback(self._bind_ended)

    def _bind_ended(self, task: asyncio.Task[None]) -> None:
        self._binding.discard(task)
        self._wake.set()

    async def _bind(self, gang: Gang, plan: Plan, ready_since: float | None) -> None:
        try:
            result, undo = await bind_and_settle(
                self._core,
                self.binder,
                gang,
                plan,
                clock=self._clock,
                partial=self.partial,
                volumes=self.volumes,
                claims=self.claims,
            )
        except Exception:
            # A bug, not an API failure (those are results): the reservations stay,
            # marked unknown, until a re-read or the watch tells what was bound.
            log.exception("binding gang %s failed unexpectedly", gang.key)
            return
        now = self._clock()
        if result.ok:
            self._bound(gang, plan, result, ready_since, now)
            return
        for member in result.members:
            if member.state != "bound":
                self._metrics.bind_failed(failure_reason(member))
        message = result.reason if undo is None else f"{result.reason}; {undo.describe()}"
        log_event(
            log,
            "gang bind failed",
            logging.WARNING,
            gang=gang.key,
            members=len(plan.placements),
            bound=len(result.bound),
            nodes=plan_nodes(plan),
            reason=message,
            duration=result.seconds,
        )
        self.recorder.bind_failed(gang, message, now)

    def _bound(
        self,
        gang: Gang,
        plan: Plan,
        result: GangBindResult,
        ready_since: float | None,
        now: float,
    ) -> None:
        wall = time.time()
        created = {pod.uid: pod.created for pod in gang.pending}
        for member in result.members:
            since = created.get(member.placement.pod_uid) or 0.0
            self._metrics.bound(result.seconds, wall - since if since > 0 else None)
        if ready_since is not None:
            self._metrics.gang_bound(now - ready_since)
        log_event(
            log,
            "gang bound",
            gang=gang.key,
            members=len(result.members),
            nodes=plan_nodes(plan),
            duration=result.seconds,
        )
        self.recorder.scheduled(gang, plan, now)

    def _relisted(self, resource: str) -> None:
        self._metrics.relisted(cast(Resource, resource))


def plan_nodes(plan: Plan) -> list[str]:
    """The distinct nodes of a plan, in order, as logged."""
    return list(dict.fromkeys(placement.node for placement in plan.placements))


def failure_reason(member: MemberOutcome) -> BindFailureReason:
    """The metrics label of a member that did not bind."""
    if member.status == 409:
        return "conflict"
    if member.status == 404:
        return "not_found"
    if member.status == 0 and (member.state == "unknown" or member.requests > 0):
        # No answer decided it (no answer in time, or the connection dropped), whether
        # a read of the pod then settled it or not.
        return "timeout"
    if 400 <= member.status < 500 and member.status != 429:
        return "rejected"
    return "server_error"


def _log_end(task: asyncio.Future[Any]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.error("%s failed", _name(task), exc_info=error)
    else:
        log.error("%s ended: the scheduler stops", _name(task))


def _name(task: asyncio.Future[Any]) -> str:
    return task.get_name() if isinstance(task, asyncio.Task) else "task"


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Until the first of `waits` ends (the others are cancelled)."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await _settle(*tasks)


async def _settle_within(seconds: float, *tasks: asyncio.Future[Any]) -> None:
    """As _settle, but give up waiting after `seconds` (cancelling again), so shutdown is
    bounded whatever a task does with its cancellation."""
    _, late = await asyncio.wait(tasks, timeout=seconds)
    for task in late:
        task.cancel()
    if late:
        log.warning("shutdown: %d task(s) outlived cancellation", len(late))
        await asyncio.wait(late, timeout=seconds)


async def _settle(*tasks: asyncio.Future[Any]) -> None:
    """Wait for cancelled tasks to end, whatever they end with."""
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
