"""Waiting in asynchronous tests: poll a condition with a deadline (never a bare sleep
that races), wait for the scheduler's own progress (its cycle counter, any metric), and
a free loopback port for a server under test."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterator

import aiohttp
from prometheus_client import CollectorRegistry

# The cap of a wait for an event: long enough that only a hang reaches it, on any machine.
HANG = 60.0


async def eventually(
    check: Callable[[], bool], what: str = "condition", timeout: float = 60.0
) -> None:
    """Poll `check` until it holds; AssertionError naming `what` after `timeout` s. The
    timeout turns a hang into a failure; it is no measure of speed, so it is generous (a
    loaded machine runs the same events many times slower)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def eventually_async(
    check: Callable[[], Awaitable[bool]], what: str = "condition", timeout: float = HANG
) -> None:
    """`eventually` for a check that must await (a scrape, a request)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


# Where a scheduler's metrics are read: the port of its HTTP server (a scheduler run by
# run_scheduler) or its registry (a SchedulerRun the test holds: run.metrics.registry).
MetricsAt = int | CollectorRegistry

CYCLES = "gang_scheduler_scheduling_cycles_total"


async def metric(at: MetricsAt, sample: str) -> float:
    """The value of `sample` (a name, with its labels as the exposition writes them:
    `name{label="value"}`); 0 when absent (a labelled series not yet created, a server
    not listening yet)."""
    if isinstance(at, CollectorRegistry):
        name, _, rest = sample.partition("{")
        labels = dict(
            (key, value.strip('"'))
            for key, _, value in (pair.partition("=") for pair in rest.rstrip("}").split(","))
            if key
        )
        return at.get_sample_value(name, labels) or 0.0
    url = f"http://127.0.0.1:{at}/metrics"
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            text = await response.text()
    except aiohttp.ClientConnectionError:
        return 0.0
    for line in text.splitlines():
        if line.startswith(f"{sample} "):
            return float(line.removeprefix(f"{sample} "))
    return 0.0


async def metric_reaches(at: MetricsAt, sample: str, target: float, what: str = "") -> None:
    """Until `sample` is at least `target`."""

    async def reached() -> bool:
        return await metric(at, sample) >= target

    await eventually_async(reached, what or f"{sample} >= {target:g}")


async def metric_rises(at: MetricsAt, sample: str, by: float = 1, what: str = "") -> float:
    """Until `sample` is `by` above its value now; returns the value it started from."""
    start = await metric(at, sample)
    await metric_reaches(at, sample, start + by, what)
    return start


async def cycles_pass(at: MetricsAt, n: int = 1) -> None:
    """Until the scheduler has run `n` whole scheduling cycles that began after this
    call. A cycle plans every gang due when it begins, so whatever the state before the
    call would make it do (plan a gang, start its bind, queue feedback, review a partial
    gang) it has done when this returns: the event a negative check ("still not bound")
    waits for, instead of a sleep that a slow machine outlasts. The cycle in progress at
    the call counts for nothing, hence n + 1 completions. While leading, a cycle runs at
    least once a second (the loop's tick), so this takes at most n + 1 s when idle."""
    await metric_rises(at, CYCLES, n + 1, f"{n} scheduling cycles")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Stuck(Exception):
    """Raised into code that ran past its bound (fails_if_stuck)."""


@contextlib.contextmanager
def fails_if_stuck(seconds: float | None = None) -> Iterator[None]:
    """Raise Stuck inside the block if it is still running after `seconds`: a guard
    against a synchronous loop that never ends (an event loop cannot time it out), so
    that such a bug fails its test instead of hanging the suite. Not a timing assertion:
    the bound (HANG unless given) is orders of magnitude above what the guarded code
    needs, even on a loaded machine. Main thread only (a signal handler); cleared on the
    way out."""

    bound = HANG if seconds is None else seconds

    def interrupt(signum: int, frame: object) -> None:
        raise Stuck(f"still running after {bound:g} s: a loop that never ends?")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, bound)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class VirtualClock:
    """Time that moves only when the test moves it, for code that takes a clock and a
    sleep (`clock=virtual, sleep=virtual.sleep`): a sleeper wakes once `advance` brings
    the time to its deadline. Whatever the machine's speed, the code sees the same
    sequence of times; the test waits for the code to be asleep again (an event) before
    it moves time on."""

    def __init__(self, start: float = 1000.0) -> None:
        self.time = start
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.time + seconds, woken))
        await woken

    @property
    def sleeping(self) -> int:
        """How many sleeps are pending (a cancelled sleeper counts no more)."""
        self._sleepers = [(at, f) for at, f in self._sleepers if not f.done()]
        return len(self._sleepers)

    def advance(self, seconds: float) -> None:
        """Move time on and wake every sleeper whose deadline it reaches."""
        self.time += seconds
        for at, woken in self._sleepers:
            if at <= self.time and not woken.done():
                woken.set_result(None)

    async def step(self, seconds: float, settled: Callable[[], bool], what: str) -> None:
        """Advance, then wait until the code has done what the new time asks of it
        (`settled`: typically, every loop asleep again)."""
        self.advance(seconds)
        await eventually(settled, what, timeout=HANG)
