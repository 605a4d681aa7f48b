"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does.

Only the leader schedules, so two replicas never bind from two caches. The rules:
- A candidate reads the Lease every `retry_period` (with a little jitter). It takes the
  Lease when there is none (create), when it has no holder (released), or when the
  record has not changed for `lease_duration` by the candidate's own clock. Expiry is
  measured from when this candidate last saw the record change, never from the
  `renewTime` written in it, so clock skew between replicas does not matter.
- Every write is a PUT carrying the resourceVersion read (optimistic concurrency): of
  two candidates, the second one's write fails with 409 and it stays a standby.
- The leader renews every `retry_period` with a PUT on the resourceVersion it last
  wrote (one request per renewal; a 409 sends it back to read the Lease). If no
  renewal succeeds for `renew_deadline`, it stops leading at once: `is_leader` turns
  False (the scheduling loop checks it before every bind) and `on_stopped_leading`
  runs, which by default exits the process with status 1, so a replica whose cache may
  be stale never binds again. renew_deadline < lease_duration (config.py checks it),
  so the old leader has stopped before anyone may take over.
- `is_leader` is also fenced by time: it is False once `renew_deadline` has passed
  since the last successful renewal, even if the renewing task has not yet run.
- `release()` on a clean shutdown clears the holder so that a standby takes over
  at its next retry instead of waiting out the lease.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import os
import random
import secrets
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from scheduler.kube.client import ApiError, JsonObject, KubeClient

log = logging.getLogger(__name__)

Callback = Callable[[], Awaitable[None] | None]

DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
DEFAULT_JITTER = 0.2


def default_identity() -> str:
    """The pod's name (POD_NAME from the downward API, else the host name) and a
    random suffix, so that a restarted container is a new candidate."""
    base = os.environ.get("POD_NAME") or socket.gethostname() or "gang-scheduler"
    return f"{base}_{secrets.token_hex(4)}"


def exit_process() -> None:
    """Leave now, with a non-zero status. No cleanup on purpose: a replica that lost its
    lease must not act on anything any more."""
    log.error("leader election lost: exiting")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def lease_lost() -> None:
    """The default on_stopped_leading, of the elector and of the scheduler's runner: the
    one path by which a lost lease ends the process. It calls `exit_process` as the
    module holds it when the lease is lost, so that tests/conftest.py replaces the exit
    in one place: there a lost lease fails that one test instead of ending the test run
    (tests/kube/test_leader.py checks, in a subprocess, that this default exits)."""
    exit_process()


def micro_time(seconds: float) -> str:
    """MicroTime, as Lease spec times are written."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    duration_seconds: int
    acquire_time: str
    renew_time: str
    transitions: int
    resource_version: str

    @classmethod
    def from_lease(cls, lease: JsonObject) -> LeaseRecord:
        meta = lease.get("metadata")
        spec = lease.get("spec")
        meta = meta if isinstance(meta, dict) else {}
        spec = spec if isinstance(spec, dict) else {}
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration_seconds=duration if isinstance(duration, int) else 0,
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            transitions=transitions if isinstance(transitions, int) else 0,
            resource_version=str(meta.get("resourceVersion") or ""),
        )


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str = "kube-system",
        name: str = "gang-scheduler",
        identity: str | None = None,
        lease_duration: float = DEFAULT_LEASE_DURATION,
        renew_deadline: float = DEFAULT_RENEW_DEADLINE,
        retry_period: float = DEFAULT_RETRY_PERIOD,
        jitter: float = DEFAULT_JITTER,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = lease_lost,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError("need 0 < retry_period < renew_deadline < lease_duration")
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.jitter = jitter
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self._clock = clock
        self._wall = wall_clock
        # Every wait of the loop goes through `sleep` and every deadline through `clock`,
        # so a test drives both on one virtual time (tests/kube/test_leader.py).
        self._sleep = sleep
        self._leading = False
        self._released = False
        self._last_renew = -math.inf
        self._observed: LeaseRecord | None = None
        self._observed_at = -math.inf
        self._mine: LeaseRecord | None = None  # the record we last wrote
        self._tasks: set[asyncio.Future[Any]] = set()
        # One lease write at a time: a release must not race a renewal in flight.
        self._writing = asyncio.Lock()
        self.started = asyncio.Event()
        self.lost = asyncio.Event()
        self.requests = 0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    @property
    def is_leader(self) -> bool:
        """True while leading and renewed within the renew deadline."""
        return self._leading and self._clock() - self._last_renew < self.renew_deadline

    @property
    def observed_holder(self) -> str:
        return self._observed.holder if self._observed else ""

    # --- the loop -----------------------------------------------------------------------
    async def run(self) -> None:
        """Wait to become leader, lead while renewals succeed, return once leadership
        is lost (after on_stopped_leading). A replica never leads twice: it exits."""
        while not await self._try_acquire_or_renew(self._standby_timeout()):
            await self._sleep(self.retry_period * (1 + random.uniform(0, self.jitter)))
        self._leading = True
        self._last_renew = self._clock()
        log.info("%s is now the leader of lease %s/%s", self.identity, self.namespace, self.name)
        self.started.set()
        self._call(self.on_started_leading)
        await self._renew_until_lost()
        self._stop_leading()

    async def _renew_until_lost(self) -> None:
        while True:
            deadline = self._last_renew + self.renew_deadline
            await self._sleep(max(0.0, min(self.retry_period, deadline - self._clock())))
            while True:
                left = deadline - self._clock()
                if left <= 0 or not self._leading:
                    return
                if await self._try_acquire_or_renew(aiohttp.ClientTimeout(total=left)):
                    self._last_renew = self._clock()
                    break
                if self._observed is not None and self._observed.holder not in (
                    "",
                    self.identity,
                ):
                    log.error(
                        "lease %s/%s taken by %s", self.namespace, self.name, self.observed_holder
                    )
                    return
                await self._sleep(max(0.0, min(self.retry_period, deadline - self._clock())))

    def _stop_leading(self) -> None:
        was = self._leading
        self._leading = False
        self.lost.set()
        if was:
            log.error("%s stopped leading lease %s/%s", self.identity, self.namespace, self.name)
            self._call(self.on_stopped_leading)

    def _standby_timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=self.renew_deadline)

    def _call(self, callback: Callback | None) -> None:
        if callback is None:
            return
        try:
            result = callback()
        except Exception:
            log.exception("leader election callback failed")
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # --- one attempt ------------------------------------------------------------------
    async def _try_acquire_or_renew(self, timeout: aiohttp.ClientTimeout) -> bool:
        async with self._writing:
            if self._released:
                return False
            return await self._attempt(timeout)

    async def _attempt(self, timeout: aiohttp.ClientTimeout) -> bool:
        try:
            if self._leading and self._mine is not None and await self._renew_blind(timeout):
                return True
            return await self._acquire(timeout)
        except (ApiError, TimeoutError, aiohttp.ClientError, OSError) as err:
            log.warning("lease %s/%s: %s", self.namespace, self.name, err)
            return False

    async def _renew_blind(self, timeout: aiohttp.ClientTimeout) -> bool:
        """Renew on the resourceVersion we last wrote, without reading first; False on
        a conflict (somebody else wrote: read and decide)."""
        assert self._mine is not None
        try:
            self._mine = await self._write(self._record(self._mine), self._mine, timeout)
        except ApiError as err:
            if err.status == 409:
                return False
            raise
        return True

    async def _acquire(self, timeout: aiohttp.ClientTimeout) -> bool:
        self.requests += 1
        try:
            lease = await self.client.request_json("GET", self.path, timeout=timeout)
        except ApiError as err:
            if err.status != 404:
                raise
            return await self._create(timeout)
        record = LeaseRecord.from_lease(lease)
        now = self._clock()
        if self._observed is None or _content(record) != _content(self._observed):
            self._observed_at = now
        self._observed = record
        duration = record.duration_seconds or self.lease_duration
        held = record.holder and record.holder != self.identity
        if held and self._observed_at + duration > now:
            return False
        try:
            self._mine = await self._write(self._record(record), record, timeout)
        except ApiError as err:
            if err.status == 409:
                return False
            raise
        return True

    def _record(self, previous: LeaseRecord) -> JsonObject:
        """Our spec, continuing `previous` (same holder: renewal; else a transition)."""
        now = micro_time(self._wall())
        ours = previous.holder == self.identity
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": previous.acquire_time if ours and previous.acquire_time else now,
            "renewTime": now,
            "leaseTransitions": previous.transitions + (0 if ours or not previous.holder else 1),
        }

    async def _write(
        self, spec: JsonObject, previous: LeaseRecord, timeout: aiohttp.ClientTimeout
    ) -> LeaseRecord:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": previous.resource_version,
            },
            "spec": spec,
        }
        self.requests += 1
        written = await self.client.request_json("PUT", self.path, body=body, timeout=timeout)
        record = LeaseRecord.from_lease(written)
        self._observed, self._observed_at = record, self._clock()
        return record

    async def _create(self, timeout: aiohttp.ClientTimeout) -> bool:
        now = micro_time(self._wall())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        self.requests += 1
        try:
            created = await self.client.request_json(
                "POST",
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
                body=body,
                timeout=timeout,
            )
        except ApiError as err:
            if err.status == 409:
                return False  # another candidate created it first
            raise
        record = LeaseRecord.from_lease(created)
        self._observed, self._observed_at, self._mine = record, self._clock(), record
        return True

    # --- shutdown -----------------------------------------------------------------------
    async def release(self) -> bool:
        """Give the lease up (clean shutdown): stop leading, then clear the holder with a
        1-second duration so that a standby takes over at its next retry."""
        if not self._leading or self._mine is None:
            return False
        self._leading = False
        self._released = True
        async with self._writing:
            return await self._clear_holder(self._mine)

    async def _clear_holder(self, mine: LeaseRecord) -> bool:
        timeout = aiohttp.ClientTimeout(total=self.retry_period)
        try:
            try:
                await self._write(self._released_spec(mine), mine, timeout)
            except ApiError as err:
                if err.status != 409:
                    raise
                # A renewal cancelled in flight (the shutdown cancels the loop before it
                # releases) may have landed unseen: the Lease moved on without us knowing
                # its resourceVersion. Clear it if it still names us, and only then.
                lease = await self.client.request_json("GET", self.path, timeout=timeout)
                current = LeaseRecord.from_lease(lease)
                if current.holder != self.identity:
                    log.info(
                        "lease %s/%s already held by %s", self.namespace, self.name, current.holder
                    )
                    return False
                await self._write(self._released_spec(current), current, timeout)
        except (ApiError, TimeoutError, aiohttp.ClientError, OSError) as err:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, err)
            return False
        finally:
            self.lost.set()
        return True

    def _released_spec(self, previous: LeaseRecord) -> JsonObject:
        """No holder and a 1-second duration: a standby takes it at its next retry."""
        now = micro_time(self._wall())
        return {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": previous.transitions,
        }


def _content(record: LeaseRecord) -> tuple[object, ...]:
    """What a change of the record is judged by (any write changes resourceVersion)."""
    return (record.holder, record.renew_time, record.transitions, record.resource_version)
