"""`gang-scheduler run` with a timeline of its start-up, for bench/first_bind.py --timeline.

    python bench/startup_probe.py TIMELINE_FILE run --kubeconfig ... --config ...

Runs the same `scheduler.cli.main.main` as `python -m scheduler.cli.main`, after wrapping the
functions that mark each step of the start-up (config read, client made, /version
answered, each informer's first list, caches synced, the first cycle, the first plan,
the first Binding POST sent and answered). Each step is appended to TIMELINE_FILE as
one JSON line {"step": ..., "at": time.time(), "gc_seconds": [...], "gc_count": [...]}
the first time it happens, so the benchmark can subtract the moment it started the
process; gc_* are the garbage collector's seconds and collections so far, by
generation. The wrappers only read the clock: the process does the same work as without
them (apart from the wrappers' few calls and this module's own imports, which are
counted in "imports").
"""

from __future__ import annotations

import time

STARTED = time.time()  # before any import of this module's: the interpreter is up

import functools  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from typing import Any  # noqa: E402

_PATH = sys.argv[1]
_SEEN: set[str] = set()
# Seconds spent in the garbage collector, and collections, by generation.
_GC_SECONDS = [0.0, 0.0, 0.0]
_GC_COUNT = [0, 0, 0]
_gc_began = 0.0


def _collector(phase: str, info: dict[str, int]) -> None:
    global _gc_began
    if phase == "start":
        _gc_began = time.perf_counter()
    else:
        _GC_SECONDS[info["generation"]] += time.perf_counter() - _gc_began
        _GC_COUNT[info["generation"]] += 1


gc.callbacks.append(_collector)


def mark(step: str) -> None:
    """Record `step` at the current time, once."""
    if step in _SEEN:
        return
    _SEEN.add(step)
    # With the garbage collector's work so far: seconds and collections by generation.
    row = {"step": step, "at": time.time(), "gc_seconds": _GC_SECONDS, "gc_count": _GC_COUNT}
    with open(_PATH, "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


def after(step: Callable[..., str | None], function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, marking step(args, result) when a call returns."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        name = step(args, result)
        if name:
            mark(name)
        return result

    return wrapper


def after_async(
    step: Callable[..., str | None], function: Callable[..., Awaitable[Any]]
) -> Callable[..., Any]:
    """`function` (a coroutine function), marking step(args, result) when it returns."""

    @functools.wraps(function)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = await function(*args, **kwargs)
        name = step(args, result)
        if name:
            mark(name)
        return result

    return wrapper


def install() -> None:
    """Wrap the marked functions (imports the run path: counted as imports)."""
    import scheduler.kube.connect as connect

    # What `run` imports before it reads its configuration (scheduler/cli/main.py's _run).
    import scheduler.kube.runner
    import scheduler.process.config as config
    import scheduler.process.logs
    import scheduler.process.startup  # noqa: F401
    from scheduler.cycle.core import SchedulingCore
    from scheduler.kube.client import KubeClient
    from scheduler.kube.informer import ClusterInformers, Informer
    from scheduler.planner.result import Plan

    mark("imports")
    config.load_config = after(lambda a, r: "config read", config.load_config)
    connect.open_client = after_async(lambda a, r: "client made", connect.open_client)
    connect.server_version = after_async(lambda a, r: "/version answered", connect.server_version)
    Informer.relist = after_async(  # type: ignore[method-assign]
        lambda a, r: f"listed {a[0].kind.name}", Informer.relist
    )
    ClusterInformers.wait_synced = after_async(  # type: ignore[method-assign]
        lambda a, r: "caches synced", ClusterInformers.wait_synced
    )

    def planned(args: tuple[Any, ...], attempt: Any) -> str | None:
        if attempt is not None and isinstance(attempt.result, Plan):
            return "first plan"
        return None

    schedule_next = after(planned, SchedulingCore.schedule_next)

    @functools.wraps(schedule_next)
    def first_cycle(*args: Any, **kwargs: Any) -> Any:
        mark("first cycle")
        return schedule_next(*args, **kwargs)

    SchedulingCore.schedule_next = first_cycle  # type: ignore[method-assign]
    opened = KubeClient.open

    @functools.wraps(opened)
    async def open_marked(self: KubeClient, method: str, path: str, **kwargs: Any) -> Any:
        binding = method == "POST" and path.endswith("/binding")
        if binding:
            mark("first Binding POST sent")
        response = await opened(self, method, path, **kwargs)
        if binding:
            mark("first Binding POST answered")
        return response

    KubeClient.open = open_marked  # type: ignore[method-assign]


def main() -> int:
    _SEEN.add("interpreter")
    with open(_PATH, "a", encoding="utf-8") as out:
        out.write(json.dumps({"step": "interpreter", "at": STARTED}) + "\n")
    import contextlib

    import scheduler.process.startup
    from scheduler.cli.main import main as cli_main

    # install() imports what `run` imports: in the same state of the garbage collector
    # as `run` does (scheduler/cli/main.py's _run), where the tree has that.
    loading = getattr(
        scheduler.process.startup, "collector_paused_while_loading", contextlib.nullcontext
    )
    with loading():
        install()
    return cli_main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
