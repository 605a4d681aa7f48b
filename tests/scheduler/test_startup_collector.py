"""The garbage collector stays out of `gang-scheduler run`'s module loading (issue 13:
the first bind within 1 s of start-up). Structural, not timed: whether collections ran
while the run path loaded, and whether what it loaded was frozen. Speed itself is
measured by bench/first_bind.py (--timeline shows the collector's share)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from scheduler.process.startup import collector_paused_while_loading

# `run` up to its configuration (the file does not exist: the command stops there with
# exit status 2, after loading everything it runs with).
RUN_UNTIL_CONFIG = """
import gc, json, sys
from scheduler.cli.main import main
young = gc.get_stats()[0]["collections"]
code = main(["run", "--config", sys.argv[1]])
print(json.dumps({
    "code": code,
    "young_collections": gc.get_stats()[0]["collections"] - young,
    "frozen": gc.get_freeze_count(),
    "enabled": gc.isenabled(),
}))
"""


def test_run_loads_its_modules_without_collections_and_freezes_them(tmp_path: object) -> None:
    missing = f"{tmp_path}/no-such-config.yaml"
    done = subprocess.run(
        [sys.executable, "-c", RUN_UNTIL_CONFIG, missing],
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(done.stdout)
    assert found["code"] == 2  # stopped at the configuration, as meant
    # Loading the run path with the collector on runs ~100 young collections; reading
    # the (missing) configuration after it may allocate enough for one or two.
    assert found["young_collections"] <= 2
    # Every module object of the run path (~90,000 tracked objects) is frozen.
    assert found["frozen"] > 20_000
    assert found["enabled"] is True


@pytest.fixture
def collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.usefixtures("collector_restored")
def test_no_collection_runs_inside_and_what_was_allocated_is_frozen() -> None:
    gc.enable()
    young = gc.get_stats()[0]["collections"]
    with collector_paused_while_loading():
        assert not gc.isenabled()
        # Far more container allocations than the young generation's threshold.
        kept = [[index] for index in range(5 * gc.get_threshold()[0])]
    assert gc.get_stats()[0]["collections"] == young
    assert gc.get_freeze_count() >= len(kept)
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_restored")
def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with collector_paused_while_loading():
        pass
    assert not gc.isenabled()
