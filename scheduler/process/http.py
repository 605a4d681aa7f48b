"""The HTTP servers of `gang-scheduler run`: metrics, health, readiness, and what waits.

Two listeners (docs/security.md, "Endpoints"):

- the public one (`http.address`/`http.port`, all interfaces, what Prometheus and the
  kubelet's probes reach): `/metrics`, `/healthz`, `/readyz`. Nothing it serves names a
  tenant: metric labels are closed sets (result, reason, resource, state, type) and GPU
  models, never a namespace, gang, pod or node name (`METRIC_LABELS`).
- the debug one (`http.debugAddress`/`http.debugPort`, loopback only, off unless a port
  is configured): `/debug/gangs` and `/debug/queues`, which name every tenant's
  namespaces and gangs.
  Reaching it from outside the pod takes `kubectl port-forward`, i.e. the API server's
  authorization of `create pods/portforward` in the scheduler's namespace.

- `/metrics`: Prometheus exposition of `SchedulerMetrics`; the state gauges are
  refreshed from the core on each scrape (the text format by default, OpenMetrics when
  the scraper asks for it).
- `/healthz`: 200 `ok` while the process's loop is alive, else 503. A liveness probe:
  failing it restarts the container, so it says nothing about the API server.
- `/readyz`: 200 `ok` once the caches are synced, else 503 with the reason. A
  readiness probe (and what a rollout waits for).
- `/debug/gangs`: JSON, every gang the core sees (see `gang_report`). Optional query
  parameters `state` and `namespace` filter it. Both debug answers say which replica
  answers (`role`: leader or standby, `leader`), and a standby's adds a `note`.
- `/debug/queues`: JSON, the queue as the scheduler orders it and every ElasticQuota
  with its usage and fair share (see `queue_report`); at most `limit` entries of each.

The adapter implements `StatusSource`. Every handler runs on the event loop between
two scheduling cycles, so it reads the core in a consistent state without locks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from aiohttp import web

from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import Gang
from scheduler.gangs.queue import GangStatus
from scheduler.process.metrics import SchedulerMetrics
from scheduler.process.queue_report import DEFAULT_LIMIT, MAX_LIMIT, queue_report, rfc3339
from scheduler.process.startup import StartupError, os_error_text

# The state of a gang that is not in the queue: fewer than minMember members exist or
# can be scheduled as written; its pods carry the waiting message.
WAITING = "waiting"
_TEXT = "text/plain"


class StatusSource(Protocol):
    """What the server reads from the running scheduler (the adapter implements it)."""

    def is_alive(self) -> bool:
        """Whether the scheduling loop is running (not stuck, not dead)."""
        ...

    def is_ready(self) -> tuple[bool, str]:
        """(True, "") once the informers' caches are synced; else (False, why)."""
        ...

    def now(self) -> float:
        """The clock the core is driven with (epoch seconds, as pod creation times)."""
        ...

    def role(self) -> str:
        """`leader` while this replica holds the lease (or runs without election), else
        `standby`: a standby schedules nothing and its queue states are not the leader's."""
        ...

    @property
    def core(self) -> SchedulingCore: ...

    @property
    def metrics(self) -> SchedulerMetrics: ...


STATUS_KEY = web.AppKey("status", StatusSource)


def make_app(status: StatusSource) -> web.Application:
    """The public listener's routes: metrics and probes, nothing naming a tenant."""
    app = web.Application()
    app[STATUS_KEY] = status
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app


def make_debug_app(status: StatusSource) -> web.Application:
    """The loopback listener's routes: what the scheduler knows of every gang."""
    app = web.Application()
    app[STATUS_KEY] = status
    app.router.add_get("/debug/gangs", _debug_gangs)
    app.router.add_get("/debug/queues", _debug_queues)
    return app


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Start serving `app`; stop it with `await runner.cleanup()`. Port 0 picks a free
    port (see `bound_port`). Signals are left to the caller. An address that cannot be
    listened on (taken, not local, not permitted) is a StartupError naming it."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise StartupError(f"cannot listen on {where}: {os_error_text(error)}") from None
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The port a started runner listens on (the one chosen when port 0 was asked)."""
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    raise RuntimeError("the server is not listening on a TCP port")


# --- handlers ---------------------------------------------------------------------------------
async def _metrics(request: web.Request) -> web.Response:
    status = request.app[STATUS_KEY]
    status.metrics.observe_core(status.core)
    body, content_type = status.metrics.render(request.headers.get("Accept"))
    # aiohttp refuses a charset inside content_type; set the header as the encoder gave it.
    return web.Response(body=body, headers={"Content-Type": content_type})


async def _healthz(request: web.Request) -> web.Response:
    if request.app[STATUS_KEY].is_alive():
        return web.Response(text="ok\n", content_type=_TEXT)
    return web.Response(status=503, text="scheduling loop is not running\n", content_type=_TEXT)


async def _readyz(request: web.Request) -> web.Response:
    ready, reason = request.app[STATUS_KEY].is_ready()
    if ready:
        return web.Response(text="ok\n", content_type=_TEXT)
    return web.Response(status=503, text=f"{reason or 'not ready'}\n", content_type=_TEXT)


async def _debug_gangs(request: web.Request) -> web.Response:
    status = request.app[STATUS_KEY]
    now = status.now()
    gangs = gang_report(status.core, now)
    state = request.query.get("state")
    namespace = request.query.get("namespace")
    if state:
        gangs = [gang for gang in gangs if gang["state"] == state]
    if namespace:
        gangs = [gang for gang in gangs if gang["namespace"] == namespace]
    return web.json_response(
        {"now": rfc3339(now), **_role(status), "count": len(gangs), "gangs": gangs}
    )


# What a standby's debug answers say about themselves, so that nobody reads a standby's
# view (no attempts, no backoff, every ready gang "active") as the scheduler's.
STANDBY_NOTE = (
    "this replica is a standby: it schedules nothing; its gangs are what its caches show, "
    "their attempts and retries are the leader's to know. Port-forward to the Lease "
    "holder (docs/operator-guide.md, Troubleshooting)."
)


def _role(status: StatusSource) -> dict[str, Any]:
    role = status.role()
    fields: dict[str, Any] = {"role": role, "leader": role == "leader"}
    if role != "leader":
        fields["note"] = STANDBY_NOTE
    return fields


async def _debug_queues(request: web.Request) -> web.Response:
    status = request.app[STATUS_KEY]
    text = request.query.get("limit", str(DEFAULT_LIMIT))
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        return web.Response(
            status=400,
            text=f"limit must be a whole number from 1 to {MAX_LIMIT}, got {text!r}\n",
            content_type=_TEXT,
        )
    report = queue_report(status.core, status.now(), int(text), request.query.get("namespace"))
    return web.json_response({**_role(status), **report})


# --- /debug/gangs -----------------------------------------------------------------------------
def gang_report(core: SchedulingCore, now: float) -> list[dict[str, Any]]:
    """Every gang the core sees: those in the queue first (in flight, active in pop
    order, backing off, unschedulable), then those waiting for members.

    Each entry: key, namespace, name, state (a queue state, or "waiting"), minMember
    and where it came from, pending and bound member counts, priority, created,
    message (the waiting message, else the last reason it could not be placed),
    attempts, backoffUntil (no retry before), nextRetry/nextRetryInSeconds (the latest
    it will be retried if nothing changes), the problems found in its members'
    specs, and its topology requirement (required, preferred, sliceSize, sliceKey,
    source; null when none is stated). A gang whose members are all reserved while their
    binds are in flight is no longer assembled; it shows its queue state only.
    """
    report: list[dict[str, Any]] = []
    seen: set[str] = set()
    patience = core.queue.max_unschedulable_seconds
    for entry in core.queue.snapshot():
        seen.add(entry.key)
        report.append(_entry(entry.key, core.gangs.get(entry.key), entry, now, patience))
    for key, gang in core.gangs.items():
        if key not in seen:
            report.append(_entry(key, gang, None, now, patience))
    return report


def _next_retry(queued: GangStatus | None, patience: float) -> tuple[float | None, float | None]:
    """(backoff end, latest retry): a backing-off gang is retried when its backoff
    ends; an unschedulable one when the cluster changes (not before its backoff ends)
    or, if nothing changes, after `patience` seconds (the queue's
    max_unschedulable_seconds). Active and in-flight gangs wait for nothing."""
    if queued is None or queued.state in ("active", "in_flight"):
        return None, None
    if queued.state == "backoff":
        return queued.retry_at, queued.retry_at
    latest = None
    if queued.unschedulable_since is not None:
        latest = max(queued.unschedulable_since + patience, queued.retry_at or 0.0)
    return queued.retry_at, latest


def _entry(
    key: str, gang: Gang | None, queued: GangStatus | None, now: float, patience: float
) -> dict[str, Any]:
    namespace, _, name = key.partition("/")
    message = ""
    if gang is not None and gang.waiting_message is not None:
        message = gang.waiting_message
    elif queued is not None:
        message = queued.last_reason
    backoff_until, retry_at = _next_retry(queued, patience)
    return {
        "key": key,
        "namespace": gang.namespace if gang is not None else namespace,
        "name": gang.name if gang is not None else name,
        "state": queued.state if queued is not None else WAITING,
        "minMember": gang.min_member if gang is not None else None,
        "sizeSource": gang.size_source if gang is not None else None,
        "pending": len(gang.pending) if gang is not None else None,
        "bound": len(gang.bound) if gang is not None else None,
        "priority": gang.priority if gang is not None else _priority(queued),
        "created": rfc3339(gang.created if gang is not None else _created(queued)),
        "message": message,
        "attempts": queued.attempts if queued is not None else 0,
        "backoffUntil": rfc3339(backoff_until),
        "nextRetry": rfc3339(retry_at),
        "nextRetryInSeconds": round(max(0.0, retry_at - now), 3) if retry_at else None,
        "problems": list(_problems(gang)),
        "topology": _topology(gang),
    }


def _topology(gang: Gang | None) -> dict[str, Any] | None:
    """The gang's topology requirement (cache/topology_requirement.py), as its sources
    stated it merged into one; None: none stated (or refused: see problems)."""
    requirement = gang.topology if gang is not None else None
    if requirement is None:
        return None
    return {
        "required": requirement.required_key,
        "preferred": list(requirement.preferred_keys),
        "sliceSize": requirement.slice_size,
        "sliceKey": requirement.slice_key,
        "source": requirement.source,
    }


def _priority(queued: GangStatus | None) -> int | None:
    return queued.priority if queued is not None else None


def _created(queued: GangStatus | None) -> float | None:
    return queued.created if queued is not None else None


def _problems(gang: Gang | None) -> Iterator[dict[str, str]]:
    """Distinct problems (a gang-wide one is on every member: shown once)."""
    if gang is None:
        return
    seen: set[tuple[str, str]] = set()
    for problem in gang.problems:
        if (problem.reason, problem.message) not in seen:
            seen.add((problem.reason, problem.message))
            yield {"reason": problem.reason, "message": problem.message}
