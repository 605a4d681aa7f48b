"""The version this process runs, as installed (the package's metadata): shown by
`gang-scheduler --version` and the `gang_scheduler_build_info` metric."""

from __future__ import annotations

import platform
from importlib import metadata

PACKAGE = "gang-scheduler"


def version() -> str:
    """The installed package's version; "unknown" when run from a tree not installed."""
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown"


def python_version() -> str:
    return platform.python_version()
