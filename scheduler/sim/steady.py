"""The steady state of a time-based replay.

A replay starts on an empty cluster: the first hours, while arriving tasks fill it, are
a warm-up whose low utilization says nothing about the policy, yet the arrival window's
mean counts them.

- Steady state: from the end of the warm-up to the last arrival. The warm-up ends at the
  first sample where utilization reaches 90% of the mean utilization over the second
  half of the arrival window: the level the cluster holds once full. (A reference, not
  a proof: a workload whose arrivals end before the cluster fills has no steady state,
  and its figure is then the mean of whatever followed the warm-up.)
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.sim.timeline import TimelineResult, time_weighted_mean

WARMUP_LEVEL = 0.9


def _clipped(
    times: Sequence[float], values: Sequence[float], start: float, end: float
) -> tuple[list[float], list[float]]:
    """The step function (values[i] from times[i] on) restricted to [start, end]."""
    clipped_times: list[float] = []
    clipped_values: list[float] = []
    current: float | None = None
    for moment, value in zip(times, values, strict=True):
        if moment <= start:
            current = value
            continue
        if moment > end:
            break
        if not clipped_times and current is not None:
            clipped_times.append(start)
            clipped_values.append(current)
        clipped_times.append(moment)
        clipped_values.append(value)
        current = value
    if not clipped_times and current is not None:
        clipped_times.append(start)
        clipped_values.append(current)
    if clipped_times and clipped_times[-1] < end:
        clipped_times.append(end)
        clipped_values.append(clipped_values[-1])
    return clipped_times, clipped_values


def arrival_span(result: TimelineResult) -> tuple[float, float] | None:
    """First and last arrival; None when all tasks arrive at one instant (or none)."""
    arrivals = [outcome.task.arrival for outcome in result.outcomes]
    if not arrivals or max(arrivals) <= min(arrivals):
        return None
    return min(arrivals), max(arrivals)


def warmup_end(result: TimelineResult) -> float | None:
    """When the warm-up ends (module doc); None without an arrival window."""
    span = arrival_span(result)
    if span is None:
        return None
    first, last = span
    utilization = result.utilization
    middle = (first + last) / 2
    reference = time_weighted_mean(*_clipped(result.times, utilization, middle, last))
    for moment, value in zip(result.times, utilization, strict=True):
        if moment >= first and value >= WARMUP_LEVEL * reference:
            return min(moment, last)
    return first


def utilization_mean_steady(result: TimelineResult) -> float:
    """Time-weighted mean utilization from the end of the warm-up to the last arrival;
    the arrival window's mean when there is no window."""
    span = arrival_span(result)
    start = warmup_end(result)
    if span is None or start is None or start >= span[1]:
        return result.utilization_mean
    return time_weighted_mean(*_clipped(result.times, result.utilization, start, span[1]))
