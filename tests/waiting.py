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
    check: Callable[[], bool], what: str = "condition", timeout: float = 10.0
) -> None:
    """Poll `check` until it holds; AssertionError naming `what` after `timeout` s."""
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
def fails_if_stuck(seconds: float = 10.0) -> Iterator[None]:
    """Raise Stuck inside the block if it is still running after `seconds`: a guard
    against a synchronous loop that never ends (an event loop cannot time it out), so
    that such a bug fails its test instead of hanging the suite. Not a timing assertion:
    the bound is orders of magnitude above what the guarded code needs. Main thread only
    (a signal handler); cleared on the way out."""

    def interrupt(signum: int, frame: object) -> None:
        raise Stuck(f"still running after {seconds:g} s: a loop that never ends?")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
