"""What stops `gang-scheduler run` before it schedules anything.

A `StartupError` is a fact about the environment (a kubeconfig that cannot be read, an
API server that cannot be reached, a port already taken), not a bug: the CLI prints its
message as one line on stderr and exits with status 2, as it does for an invalid
configuration, instead of a traceback.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator


class StartupError(Exception):
    """The scheduler cannot start; the message says why in one line."""


def os_error_text(error: OSError) -> str:
    """The system's words for an OSError's errno ("Address already in use"; asyncio
    rewords bind errors into a sentence of its own), else its text. A name that does
    not resolve (socket.gaierror, a negative EAI_* code) keeps its own words."""
    if error.errno and error.errno > 0:
        return os.strerror(error.errno)
    return error.strerror or str(error) or type(error).__name__


@contextlib.contextmanager
def collector_paused_while_loading() -> Iterator[None]:
    """The garbage collector off while `run` loads its modules, then everything they
    allocated frozen (issue 13: the first bind within 1 s of the process starting).

    Loading the run path allocates ~90,000 tracked objects (classes, functions, their
    dicts), nearly all kept for the life of the process: with the collector on, that
    is ~115 young and ~10 older collections and a full one before the first bind,
    5-10% of the CPU time to it (bench/first_bind.py --timeline), for ~2,000 objects of
    cyclic garbage. Frozen (`gc.freeze`, the permanent generation), they are not walked
    by any later collection either; the ~2,000 garbage objects stay, a few hundred KB.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
