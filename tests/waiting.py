"""Waiting in asynchronous tests: poll a condition with a deadline (never a bare sleep
that races), and a free loopback port for a server under test."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from collections.abc import Callable, Iterator


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


# The cap of a wait for an event: long enough that only a hang reaches it, on any machine.
HANG = 60.0
