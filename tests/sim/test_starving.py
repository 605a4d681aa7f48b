"""The starvation guard's promised bound in a replay that knows every run time
(scheduler/sim/starving.py, docs/quotas.md "No starvation"): a 64-GPU gang behind a
stream of small gangs with long-tailed runs is placed at most `guardSeconds` after it
arrived plus the longest remaining run among the pods on the nodes it reserved, plus
one backoff."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from policies.profile import build_profile
from scheduler.cycle.core import Attempt, SchedulingCore
from scheduler.sim.starving import LARGE, StarvingShape, starving_cluster, starving_workload
from scheduler.sim.timeline import TaskOutcome, TimelineResult, replay_timeline
from scheduler.sim.workload import NAMESPACE

GUARD = 300.0
BACKOFF = 60.0  # the queue's default maxBackoffSeconds
SHAPE = StarvingShape(nodes=16, hours=1.0, load=1.2, median_seconds=120.0, longest_seconds=1800.0)


@dataclass
class Watched:
    """When the large gang's reservation was first seen, and the gangs running on its
    reserved nodes then."""

    reserved_at: float | None = None
    blockers: set[str] = field(default_factory=set)


def _replay(
    guard: float, seed: int, shape: StarvingShape = SHAPE
) -> tuple[TimelineResult, Watched]:
    core = SchedulingCore(build_profile("binpack"), explain_failures=False)
    core.starvation.guard_seconds = guard
    watched = Watched()
    schedule = core.schedule_next

    def watching(now: float) -> Attempt | None:
        attempt = schedule(now)
        nodes = core.starvation_reservations().get(f"{NAMESPACE}/{LARGE}")
        if nodes and watched.reserved_at is None:
            watched.reserved_at = now
            watched.blockers = {
                pod.gang_key
                for node in nodes
                for pod in core.cache.pods_on(node)
                if pod.consumes_resources
            }
        return attempt

    core.schedule_next = watching  # type: ignore[method-assign]
    tasks = starving_workload(seed, shape)
    return replay_timeline(starving_cluster(shape), tasks, core), watched


def _large(result: TimelineResult) -> TaskOutcome:
    [large] = [o for o in result.outcomes if o.task.name == LARGE]
    return large


@pytest.mark.parametrize(("shape", "seed"), [(SHAPE, 1), (SHAPE, 2)])
def test_the_large_gang_waits_at_most_the_guard_and_the_runs_on_its_reserved_nodes(
    shape: StarvingShape, seed: int
) -> None:
    result, watched = _replay(GUARD, seed, shape)
    large = _large(result)
    assert large.start is not None and watched.reserved_at is not None
    # Reserved as soon as it starved (the stream wakes the loop every few seconds).
    assert watched.reserved_at - large.task.arrival <= GUARD + 60.0
    finish = {o.task.key: o.finish for o in result.outcomes}
    drained = max(
        (f for key in watched.blockers if (f := finish[key]) is not None),
        default=watched.reserved_at,
    )
    # Nothing placed after the reservation delays it: it starts once the pods that were
    # on its nodes have left (and one backoff for its retry).
    assert large.start <= max(drained, watched.reserved_at) + BACKOFF
    assert (result.partial_gangs, result.unfinished) == (0, 0)


def test_without_the_guard_the_stream_starves_the_large_gang() -> None:
    result, watched = _replay(0.0, 1)
    assert watched.reserved_at is None
    large = _large(result)
    # Placed only when the stream dried up (it lasts an hour).
    assert large.start is None or large.start > SHAPE.hours * 3600 * 0.75
