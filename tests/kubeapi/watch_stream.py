"""Serving one watch request: the starting events, then the live stream.

Semantics (API concepts, "Efficient detection of changes" and "Watch bookmarks"; the
apiserver watch cache):
- resourceVersion unset or "0": synthetic ADDED events for every matching object first;
  `sendInitialEvents=true` does the same and ends them with a BOOKMARK annotated
  `k8s.io/initial-events-end: "true"` when bookmarks are allowed;
- resourceVersion N: every change after N, in order; N older than the kept history gives
  HTTP 200 and one ERROR event carrying a 410 Expired Status ("once we have passed
  authn/authz/admission ... errors must fail with a watch event of type ERROR",
  cacher.Watch / newErrWatcher), then the stream ends;
- N newer than the current version: the watch cache waits up to 3 s, then an ERROR
  event with 504 "Too large resource version" (storage.NewTooLargeResourceVersionError);
- BOOKMARK events (object of the watched kind with only metadata.resourceVersion) every
  `bookmark_interval` seconds and once 2 s before timeoutSeconds
  (cacheWatcher.nextBookmarkTime);
- timeoutSeconds ends the stream cleanly; the emulator's drop_watches cuts it.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.kubeapi import errors
from tests.kubeapi.resources import ResourceType
from tests.kubeapi.routing import JSON, flag, float_param
from tests.kubeapi.selectors import FieldSelector, LabelSelector
from tests.kubeapi.store import ADDED, Store, TooOld, WatchEnd, Watcher, dumps, event_line

_WATCH_BATCH = 512  # lines written per socket write at most


@dataclass(frozen=True)
class WatchSettings:
    bookmark_interval: float
    max_backlog: int | None
    too_large_wait: float
    hold: StreamHold | None = None  # emulator.hold_watch_streams


class StreamHold:
    """A test's hold on the watch streams of one resource (emulator.hold_watch_streams):
    each stream writes `after` lines (rounded up to its socket write), then waits for
    `gate`: a relist's initial events cut in two, at a point the test chooses, as a
    slow network or a huge list would, whatever the machine's speed."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.gate = asyncio.Event()
        self.waiting = 0  # streams waiting at the gate now


@dataclass(frozen=True)
class WatchParams:
    resource_version: int | None  # None: unset or "0"
    bookmarks: bool
    send_initial: bool
    timeout: float | None

    @staticmethod
    def from_query(query: Any) -> WatchParams:
        text = query.get("resourceVersion", "")
        version: int | None = None
        if text not in ("", "0"):
            try:
                version = int(text)
            except ValueError as err:
                raise errors.bad_request(f"invalid resource version: {text}") from err
        return WatchParams(
            version,
            flag(query.get("allowWatchBookmarks")),
            flag(query.get("sendInitialEvents")),
            float_param("timeoutSeconds", query.get("timeoutSeconds")),
        )


def bookmark_line(
    rtype: ResourceType, resource_version: int, *, initial_end: bool = False
) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(resource_version)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": meta}
    return event_line("BOOKMARK", dumps(obj))


def _too_large(requested: int, current: int) -> dict[str, Any]:
    cause = {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    return errors.status_body(
        504,
        "Timeout",
        f"Too large resource version: {requested}, current: {current}",
        {"causes": [cause], "retryAfterSeconds": 1},
    )


def _start(store: Store, watcher: Watcher, params: WatchParams) -> dict[str, Any] | None:
    """Queue the starting events and register the watcher, or return the error Status.

    Synchronous on purpose: no write can slip between the replay and the registration.
    """
    resource = store.of(watcher.rtype)
    if params.resource_version is None or params.send_initial:
        for stored in resource.sorted_objects():
            if watcher.matches(stored):
                watcher.push(event_line(ADDED, stored.json()))
        if params.send_initial and params.bookmarks:
            watcher.push(bookmark_line(watcher.rtype, store.rv, initial_end=True))
    else:
        try:
            for change in resource.changes_since(params.resource_version):
                line = watcher.line_for(change)
                if line is not None:
                    watcher.push(line)
        except TooOld as too_old:
            return errors.status_body(410, "Expired", str(too_old))
    resource.watchers.add(watcher)
    return None


def _timers(
    store: Store, watcher: Watcher, params: WatchParams, settings: WatchSettings
) -> list[asyncio.TimerHandle]:
    loop = asyncio.get_running_loop()
    timers: list[asyncio.TimerHandle] = []

    def bookmark(repeat: bool) -> None:
        if watcher.closed:
            return
        watcher.push(bookmark_line(watcher.rtype, store.rv))
        if repeat:
            timers.append(loop.call_later(settings.bookmark_interval, bookmark, True))

    if params.bookmarks and settings.bookmark_interval > 0:
        timers.append(loop.call_later(settings.bookmark_interval, bookmark, True))
    if params.bookmarks and params.timeout is not None and params.timeout > 2:
        timers.append(loop.call_later(params.timeout - 2, bookmark, False))
    if params.timeout is not None:
        end = functools.partial(watcher.end, abrupt=False)
        timers.append(loop.call_later(params.timeout, end))
    return timers


async def serve_watch(
    request: web.Request,
    store: Store,
    rtype: ResourceType,
    namespace: str | None,
    selectors: tuple[LabelSelector, FieldSelector],
    params: WatchParams,
    settings: WatchSettings,
) -> web.StreamResponse:
    error: dict[str, Any] | None = None
    requested = params.resource_version
    if requested is not None and requested > store.rv:
        deadline = time.monotonic() + settings.too_large_wait
        while requested > store.rv and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if requested > store.rv:
            error = _too_large(requested, store.rv)
    watcher = Watcher(
        rtype,
        namespace,
        *selectors,
        bookmarks=params.bookmarks,
        max_backlog=settings.max_backlog,
    )
    if error is None:
        error = _start(store, watcher, params)

    response = web.StreamResponse(status=200, headers={"Content-Type": JSON})
    response.enable_chunked_encoding()
    await response.prepare(request)
    if error is not None:
        await response.write(event_line("ERROR", dumps(error)))
        await response.write_eof()
        return response

    if request.transport is not None:
        watcher.on_abort = request.transport.abort
    timers = _timers(store, watcher, params, settings)
    try:
        await _drain(watcher, response, settings.hold)
    except ConnectionError:
        pass  # the client went away
    finally:
        watcher.closed = True
        store.of(rtype).watchers.discard(watcher)
        for timer in timers:
            timer.cancel()
    return response


async def _drain(
    watcher: Watcher, response: web.StreamResponse, hold: StreamHold | None = None
) -> None:
    """Write queued lines, many per socket write, until the watcher ends."""
    written = 0
    while True:
        if hold is not None and written >= hold.after and not hold.gate.is_set():
            hold.waiting += 1
            try:
                await hold.gate.wait()
            finally:
                hold.waiting -= 1
        item = await watcher.queue.get()
        chunks: list[bytes] = []
        end: WatchEnd | None = None
        while True:
            if isinstance(item, WatchEnd):
                end = item
                break
            chunks.append(item)
            if watcher.queue.empty() or len(chunks) >= _WATCH_BATCH:
                break
            item = watcher.queue.get_nowait()
        if chunks:
            await response.write(b"".join(chunks))
            written += len(chunks)
        if end is not None:
            if not end.abrupt:
                await response.write_eof()
            return
