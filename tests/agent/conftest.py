"""Fixtures of the agent tests that serve or call gRPC on unix sockets."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A fresh directory for unix sockets, removed after the test."""
    # Short, under /tmp: a unix socket path must fit in 108 bytes, pytest's tmp_path may not.
    directory = Path(tempfile.mkdtemp(prefix="ag", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def plugin_dir(socket_dir: Path) -> Path:
    """The kubelet's device-plugin directory (its kubelet.sock and the plugins' sockets)."""
    return socket_dir
