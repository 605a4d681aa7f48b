"""What stops `gang-scheduler run` before it schedules anything.

A `StartupError` is a fact about the environment (a kubeconfig that cannot be read, an
API server that cannot be reached, a port already taken), not a bug: the CLI prints its
message as one line on stderr and exits with status 2, as it does for an invalid
configuration, instead of a traceback.
"""

from __future__ import annotations

import os


class StartupError(Exception):
    """The scheduler cannot start; the message says why in one line."""


def os_error_text(error: OSError) -> str:
    """The system's words for an OSError's errno ("Address already in use"; asyncio
    rewords bind errors into a sentence of its own), else its text. A name that does
    not resolve (socket.gaierror, a negative EAI_* code) keeps its own words."""
    if error.errno and error.errno > 0:
        return os.strerror(error.errno)
    return error.strerror or str(error) or type(error).__name__
