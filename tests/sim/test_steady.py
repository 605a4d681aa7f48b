"""The time-based replay's steady state (scheduler.sim.steady), in its JSON entry."""

from __future__ import annotations

import pytest

from scheduler.sim.report import TimelineRun, timeline_entry
from scheduler.sim.steady import utilization_mean_steady, warmup_end
from scheduler.sim.timeline import TaskOutcome, TimelineResult
from scheduler.sim.workload import Task


def result(times: list[float], milli: list[int], arrivals: list[float]) -> TimelineResult:
    outcomes = [TaskOutcome(Task(f"t{i}", at, 10.0, ())) for i, at in enumerate(arrivals)]
    return TimelineResult(
        outcomes=outcomes,
        total_gpu_milli=1000,
        times=times,
        allocated_milli=milli,
        queue_length=[0] * len(times),
        partial_gangs=0,
        mean_link_score=None,
        multi_gpu_placements=0,
        cycles=len(times),
        end_time=times[-1],
        seconds=0.0,
    )


def test_the_warm_up_is_left_out_of_the_steady_mean() -> None:
    # Arrivals from 0 to 100 s. Empty for 20 s, half full until 40 s, then 80% to the
    # end of the window: the second half's mean is 0.8, the warm-up ends when 0.72 is
    # first reached (40 s), and the steady mean is 0.8. The window's mean counts the
    # warm-up: (0 x 20 + 0.5 x 20 + 0.8 x 60) / 100 = 0.58.
    run = result([0, 20, 40, 100, 150], [0, 500, 800, 800, 0], [0, 50, 100])
    assert run.utilization_mean == pytest.approx(0.58)
    assert warmup_end(run) == 40
    assert utilization_mean_steady(run) == pytest.approx(0.8)
    entry = timeline_entry(TimelineRun("binpack", 1, run))
    assert entry["utilization_mean_steady"] == 0.8 and entry["warmup_end_s"] == 40.0
    assert entry["utilization_mean"] == 0.58  # the figure of before, unchanged


def test_all_at_once_has_no_warm_up_to_leave_out() -> None:
    run = result([0, 10, 20], [400, 400, 0], [0, 0])
    assert warmup_end(run) is None
    assert utilization_mean_steady(run) == run.utilization_mean
