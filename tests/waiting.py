"""Waiting in asynchronous tests: poll a condition with a deadline (never a bare sleep
that races), and a free loopback port for a server under test."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable


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
