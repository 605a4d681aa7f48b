"""GPU faults the moment NVML reports them: XID critical errors and double-bit ECC
errors, from NVML's event API, on a thread of their own (docs/node-agent.md, "Health").

- `HealthBook` holds the faults seen, by GPU UUID, for the publisher and the device
  plugin; it is thread-safe and calls its listeners (from the watcher's thread) when a
  GPU gets its first fault, so that both act at once rather than at their next pass.
- `EventWatcher` is the thread: NVML initialised once for its lifetime (NVML's init is
  reference-counted, so the publisher's passes do not tear its event set down), each
  GPU registered for the events it supports, then `nvmlEventSetWait` with a short
  timeout so that `stop` is honoured within it. A GPU that supports neither event
  (or an event set that cannot be created) is polled instead: its volatile
  uncorrected ECC count, every `poll_interval`, a rise being the same fault as a
  double-bit ECC event.
- A fault is sticky until the agent restarts: an XID that makes a GPU unusable needs a
  GPU reset or a reboot (NVIDIA's XID catalogue), which restarts the agent's pod
  anyway; marking it healthy again on a guess would put new work on a broken GPU.

XIDs that are caused by the application rather than the GPU (a CUDA program's illegal
address, a page fault, a preempted context) do not make the GPU unusable: they are
logged and ignored, as NVIDIA's device plugin does by default.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field

from scheduler.agent.discovery import NVML_LOCK
from scheduler.agent.nvml import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    EventSet,
    Handle,
    NvmlBackend,
    NvmlError,
    NvmlEvent,
)

log = logging.getLogger("gang_scheduler.node_agent.health")

WATCHED_EVENTS = EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC
# XIDs a user's program causes, not the GPU (NVIDIA's XID catalogue): 13 graphics engine
# exception, 31 GPU memory page fault, 43 GPU stopped processing (the context was
# killed), 45 preemptive cleanup, 68 video processor exception, 109 context switch
# timeout. The same default as NVIDIA's k8s-device-plugin.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
DEFAULT_WAIT_MS = 1000
DEFAULT_POLL_INTERVAL = 10.0


class HealthBook:
    """Faults by GPU UUID, shared between the watcher's thread and the event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: dict[str, tuple[str, ...]] = {}
        self._listeners: list[Callable[[], object]] = []
        # Every XID seen (application ones included), for the metrics: the last one
        # (DCGM_FI_DEV_XID_ERRORS) and how many, by GPU UUID.
        self._last_xid: dict[str, int] = {}
        self._xid_count: dict[str, int] = {}

    def note_xid(self, uuid: str, xid: int) -> None:
        with self._lock:
            self._last_xid[uuid] = xid
            self._xid_count[uuid] = self._xid_count.get(uuid, 0) + 1

    def xids(self) -> dict[str, tuple[int, int]]:
        """GPU UUID -> (the last XID, how many XIDs) since the agent started."""
        with self._lock:
            return {uuid: (xid, self._xid_count[uuid]) for uuid, xid in self._last_xid.items()}

    def subscribe(self, listener: Callable[[], object]) -> None:
        """`listener` is called, from whatever thread recorded it, after each new fault."""
        with self._lock:
            self._listeners.append(listener)

    def record(self, uuid: str, fault: str) -> bool:
        """Add a fault; True (and the listeners called) when it is new for that GPU."""
        with self._lock:
            known = self._faults.get(uuid, ())
            if fault in known:
                return False
            self._faults[uuid] = (*known, fault)
            listeners = list(self._listeners)
        log.error("GPU %s unhealthy: %s", uuid, fault)
        for listener in listeners:
            # A listener whose event loop has closed (the agent stopping) raises
            # RuntimeError: the fault is recorded all the same.
            with suppress(RuntimeError):
                listener()
        return True

    def faults(self) -> dict[str, tuple[str, ...]]:
        with self._lock:
            return dict(self._faults)


def event_fault(event: NvmlEvent, ignored_xids: Iterable[int] = APPLICATION_XIDS) -> str | None:
    """What an event means for its GPU: a fault to record, or None (an XID caused by
    the application, or an event kind that does not make the GPU unusable)."""
    if event.kind & EVENT_XID_CRITICAL:
        if event.data in frozenset(ignored_xids):
            log.info("GPU %s: XID %d (an application error), ignored", event.uuid, event.data)
            return None
        return f"XID {event.data} (critical error reported by the driver)"
    if event.kind & EVENT_DOUBLE_BIT_ECC:
        return "double-bit (uncorrectable) ECC error"
    return None


@dataclass
class _Polled:
    uuid: str
    handle: Handle
    last_count: int | None


@dataclass
class EventWatcher:
    """The watcher thread; `start` and `stop` from the event loop, never blocking it."""

    backend: NvmlBackend
    book: HealthBook
    wait_ms: int = DEFAULT_WAIT_MS
    poll_interval: float = DEFAULT_POLL_INTERVAL
    ignored_xids: frozenset[int] = APPLICATION_XIDS
    registered: set[str] = field(default_factory=set)  # UUIDs watched through events
    polled: list[_Polled] = field(default_factory=list)  # GPUs watched by polling
    ready: threading.Event = field(default_factory=threading.Event)
    _handles: dict[str, Handle] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="nvml-events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        try:
            with NVML_LOCK:
                self.backend.init()
        except NvmlError as error:
            # The publisher says the same once (no NVML, no GPU); nothing to watch.
            log.info("GPU events not watched: %s", error.message)
            self.ready.set()
            return
        event_set: EventSet | None = None
        try:
            with NVML_LOCK:
                event_set = self._register()
            self.ready.set()
            self._loop(event_set)
        finally:
            self.ready.set()
            with NVML_LOCK:
                if event_set is not None:
                    _quietly(lambda: self.backend.event_set_free(event_set))
                _quietly(self.backend.shutdown)

    def _register(self) -> EventSet | None:
        """The event set with every GPU registered for what it supports; the GPUs that
        support nothing go to the polled list. None: no event set, every GPU polled."""
        try:
            count = self.backend.device_count()
        except NvmlError as error:
            log.warning("GPU events not watched: %s", error)
            return None
        handles: list[tuple[str, Handle]] = []
        for index in range(count):
            try:
                handle = self.backend.handle(index)
                handles.append((self.backend.uuid(handle), handle))
            except NvmlError as error:
                log.warning("GPU %d not watched for events: %s", index, error)
        self._handles = dict(handles)
        event_set: EventSet | None
        try:
            event_set = self.backend.event_set_create()
        except NvmlError as error:
            log.info("NVML events unavailable (%s): polling the ECC counters", error.message)
            event_set = None
        for uuid, handle in handles:
            if event_set is not None and self._register_one(uuid, handle, event_set):
                continue
            self.polled.append(_Polled(uuid, handle, self._ecc_count(uuid, handle)))
        return event_set

    def _register_one(self, uuid: str, handle: Handle, event_set: EventSet) -> bool:
        try:
            mask = self.backend.supported_events(handle) & WATCHED_EVENTS
            if not mask:
                log.info("GPU %s offers no XID or ECC events: polling its ECC counter", uuid)
                return False
            self.backend.register_events(handle, mask, event_set)
        except NvmlError as error:
            log.info("GPU %s events not registered (%s): polling its ECC counter", uuid, error)
            return False
        self.registered.add(uuid)
        return True

    def _loop(self, event_set: EventSet | None) -> None:
        next_poll = 0.0
        clock = 0.0  # seconds waited so far: the polls follow the waits, not a wall clock
        while not self._stopping.is_set():
            if self.polled and clock >= next_poll:
                self._poll()
                next_poll = clock + self.poll_interval
            if event_set is None or not self.registered:
                # Nothing to wait on in NVML: sleep until the next poll (or the stop).
                pause = self.poll_interval if self.polled else self.wait_ms / 1000
                self._stopping.wait(pause)
                clock += pause
                continue
            try:
                event = self.backend.wait_event(event_set, self.wait_ms)
            except NvmlError as error:
                # The event set is broken (e.g. a GPU fell off the bus): say so once and
                # keep the GPUs watched by polling, which finds a lost GPU too.
                log.warning("waiting for GPU events failed (%s): polling from now on", error)
                for uuid in sorted(self.registered):
                    handle = self._handles.get(uuid)
                    self.polled.append(_Polled(uuid, handle, self._ecc_count(uuid, handle)))
                self.registered.clear()
                continue
            clock += self.wait_ms / 1000
            if event is not None:
                if event.kind & EVENT_XID_CRITICAL:
                    self.book.note_xid(event.uuid, event.data)
                fault = event_fault(event, self.ignored_xids)
                if fault is not None:
                    self.book.record(event.uuid, fault)

    def _ecc_count(self, uuid: str, handle: Handle) -> int | None:
        if handle is None:
            return None
        try:
            return self.backend.uncorrected_ecc_errors(handle)
        except NvmlError as error:
            if not error.unsupported:
                self.book.record(uuid, f"ECC counter unreadable: {error}")
            return None

    def _poll(self) -> None:
        for entry in self.polled:
            count = self._ecc_count(entry.uuid, entry.handle)
            if count is not None and entry.last_count is not None and count > entry.last_count:
                self.book.record(
                    entry.uuid,
                    f"{count - entry.last_count} new uncorrectable ECC error(s)",
                )
            if count is not None:
                entry.last_count = count


def _quietly(call: Callable[[], None]) -> None:
    try:
        call()
    except NvmlError as error:
        log.debug("NVML cleanup: %s", error)
