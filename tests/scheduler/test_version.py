"""`gang-scheduler --version` and gang_scheduler_build_info say which build runs."""

from __future__ import annotations

import platform
from importlib import metadata

import pytest

from scheduler.cli.main import main
from scheduler.process.metrics import SchedulerMetrics


def test_version_prints_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    installed = metadata.version("gang-scheduler")
    expected = f"gang-scheduler {installed} (Python {platform.python_version()})\n"
    assert capsys.readouterr().out == expected


def test_build_info_is_one_labelled_with_the_version() -> None:
    metrics = SchedulerMetrics()
    labels = {"version": metadata.version("gang-scheduler"), "python": platform.python_version()}
    assert metrics.registry.get_sample_value("gang_scheduler_build_info", labels) == 1.0
