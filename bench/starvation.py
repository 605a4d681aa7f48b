"""The starvation guard on a workload built to starve (scheduler/sim/starving.py): a
64-GPU gang behind a stream of 1-4-GPU gangs with long-tailed runs, on 16 nodes of 8
GPUs, the stream of the large gang's priority or above it. Prints the figures behind
docs/benchmarks.md ("The starvation guard on a workload built to starve"), guard off
and on, for the tree it runs on (run it on two trees for a before and after).

    .venv/bin/python bench/starvation.py
    .venv/bin/python bench/starvation.py --seeds 1 2 3 --guard 300
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.sim.starving import LARGE, StarvingShape, starving_cluster, starving_workload
from scheduler.sim.timeline import replay_timeline


def large_wait(shape: StarvingShape, seed: int, guard: float) -> tuple[float, bool, float]:
    """The large gang's wait (to the end of the replay if it never started), whether
    it started, and the replay's CPU seconds."""
    core = SchedulingCore(build_profile("binpack"), explain_failures=False)
    core.starvation.guard_seconds = guard
    started = time.process_time()
    result = replay_timeline(starving_cluster(shape), starving_workload(seed, shape), core)
    [large] = [o for o in result.outcomes if o.task.name == LARGE]
    if large.start is None:
        return result.end_time - large.task.arrival, False, time.process_time() - started
    return large.waited, True, time.process_time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--guard", type=float, default=300.0)
    parser.add_argument("--hours", type=float, default=2.0)
    args = parser.parse_args()
    same = StarvingShape(hours=args.hours)
    # An urgent stream that does not starve itself (below the cluster's size): the
    # large gang then waits for smaller work only.
    urgent = dataclasses.replace(same, small_priority=100, load=0.9)
    print("| stream | seed | wait, no guard | wait, guard | CPU s (no guard / guard) |")
    print("|---|---|---|---|---|")
    for name, shape in (("priority 0, load 1.3", same), ("priority 100, load 0.9", urgent)):
        for seed in args.seeds:
            off, off_started, off_cpu = large_wait(shape, seed, 0.0)
            on, on_started, on_cpu = large_wait(shape, seed, args.guard)
            print(
                f"| {name} | {seed} | {off / 60:.0f} min{'' if off_started else ' (never)'} "
                f"| {on / 60:.0f} min{'' if on_started else ' (never)'} "
                f"| {off_cpu:.1f} / {on_cpu:.1f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
