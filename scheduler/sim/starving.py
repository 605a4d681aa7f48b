"""A workload built to starve a large gang (docs/benchmarks.md, "The starvation guard"):
one 64-GPU gang arriving behind a steady stream of 1- to 4-GPU gangs that asks more
than the cluster has, with long-tailed run times, on a cluster of 8-GPU nodes; the
stream may have a higher priority than the large gang (small urgent work starves a
large batch job just as surely).

Without a guard the large gang waits as long as the stream lasts: every GPU that frees
is taken by the next small gang before eight whole nodes are ever empty. With the guard
(scheduler/sharing/starvation.py) it waits at most `guardSeconds` plus the longest remaining
run among the pods on the nodes it reserved, plus one backoff; the replay knows the run
times (the scheduler does not), so that bound can be checked (tests/sim/test_starving.py).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from scheduler.sim.cluster_spec import parse_cluster
from scheduler.sim.workload import Role, Task

GIB = 1024**3
LARGE = "large"


@dataclass(frozen=True, slots=True)
class StarvingShape:
    nodes: int = 16  # of 8 GPUs each
    hours: float = 4.0  # how long the stream of small gangs lasts
    load: float = 1.3  # GPUs the stream asks / GPUs the cluster has
    median_seconds: float = 300.0  # of a small gang's run (log-normal)
    sigma: float = 1.2  # of the log of a small gang's run: a long tail
    longest_seconds: float = 4 * 3600.0  # the tail is cut here (a replay must end)
    small_priority: int = 0  # above large_priority: a stream of more urgent work
    large_priority: int = 0
    large_gpus: int = 64  # as 8-GPU pods
    large_at: float = 600.0
    large_seconds: float = 1800.0


def starving_cluster(shape: StarvingShape) -> list[dict[str, Any]]:
    """`shape.nodes` nodes of 8 GPUs (NVLink), as Node objects."""
    return parse_cluster(
        "pools:\n"
        f"  - {{name: box, count: {shape.nodes}, cpu: 128, memory: 1024Gi, gpus: 8, "
        "gpu_model: A100, links: nvlink}\n"
    )


def starving_workload(seed: int, shape: StarvingShape = StarvingShape()) -> list[Task]:
    """The stream of small gangs (Poisson arrivals, 1, 2 or 4 GPUs in one pod) and the
    large gang `large` (8-GPU pods) arriving at `shape.large_at`."""
    rng = random.Random(seed)
    sizes = (1, 2, 4)
    mean_gpus = sum(sizes) / len(sizes)
    mean_run = shape.median_seconds * math.exp(shape.sigma**2 / 2)
    # Arrivals per second so that GPUs asked x run time = load x GPUs of the cluster.
    rate = shape.load * shape.nodes * 8 / (mean_gpus * mean_run)
    tasks: list[Task] = []
    now = 0.0
    while True:
        now += rng.expovariate(rate)
        if now > shape.hours * 3600:
            break
        gpus = rng.choice(sizes)
        run = min(
            rng.lognormvariate(math.log(shape.median_seconds), shape.sigma), shape.longest_seconds
        )
        role = Role("worker", 1, 4000, 16 * GIB, gpus=gpus)
        name = f"small-{len(tasks):05d}"
        tasks.append(Task(name, round(now, 3), round(run, 3), (role,), shape.small_priority))
    pods = shape.large_gpus // 8
    large = Role("worker", pods, 32000, 128 * GIB, gpus=8)
    tasks.append(Task(LARGE, shape.large_at, shape.large_seconds, (large,), shape.large_priority))
    return tasks
