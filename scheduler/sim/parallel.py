"""Independent replays (one per policy and seed) in parallel processes.

A replay is pure CPU in one thread, so several seeds use several cores only as separate
processes. The workers are forked: they inherit the trace, the arrival orders and the
profiles' inputs already in memory (nothing large is pickled on the way in; only each
result comes back), and whatever stand-ins a caller put in place.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

T = TypeVar("T")

# The work of the pool being run; read by the forked workers (set before they fork).
_work: Callable[[int], Any] | None = None


def available_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _run(index: int) -> Any:
    if _work is None:
        raise RuntimeError("no work set for this worker")
    return _work(index)


def run_jobs(
    count: int,
    work: Callable[[int], T],
    workers: int,
    done: Callable[[int], None] | None = None,
) -> list[T]:
    """`work(0) ... work(count - 1)`, in up to `workers` processes; results in index
    order. `done(i)` is called in this process as job i finishes. One worker (or one
    job, or a platform without fork) runs them here, one after the other."""
    global _work
    if workers <= 1 or count <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        results = []
        for index in range(count):
            results.append(work(index))
            if done is not None:
                done(index)
        return results
    _work = work
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(min(workers, count), mp_context=context) as pool:
            futures = {pool.submit(_run, index): index for index in range(count)}
            results_by_index: dict[int, T] = {}
            for future in as_completed(futures):
                index = futures[future]
                results_by_index[index] = future.result()
                if done is not None:
                    done(index)
        return [results_by_index[index] for index in range(count)]
    finally:
        _work = None
