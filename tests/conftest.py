"""Fixtures for every test.

A lost lease ends the scheduler's process (scheduler/kube/leader.py, `lease_lost`): right
for the scheduler, fatal for a test run, where it would end pytest itself with no
summary. Here the exit is replaced, in the one place the process takes it from, by a
record: a test whose lease is lost unexpectedly fails (at its teardown, saying so), and
the run goes on. A test about losing the lease says it expects it
(`lost_leases.expected = True`). That the real default still exits is checked in a
subprocess (tests/kube/test_leader.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings

from scheduler.kube import leader

# Hypothesis' per-example deadline (200 ms) and its too-slow health check are timing
# assertions: a loaded machine fails them with nothing wrong. Off for every test.
settings.register_profile(
    "gang-scheduler", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("gang-scheduler")


@dataclass
class LostLeases:
    """How often a lease was lost during the test (each time the process would have
    exited), and whether the test expects it."""

    count: int = 0
    expected: bool = False

    def record(self) -> None:
        self.count += 1


@pytest.fixture(autouse=True)
def lost_leases(monkeypatch: pytest.MonkeyPatch) -> Iterator[LostLeases]:
    lost = LostLeases()
    monkeypatch.setattr(leader, "exit_process", lost.record)
    yield lost
    if lost.count and not lost.expected:
        pytest.fail(
            f"a leader elector lost its lease {lost.count} time(s) during this test: the "
            "process would have exited. A test not about expiry must give its lease a "
            "duration that a slow machine cannot outlast."
        )
