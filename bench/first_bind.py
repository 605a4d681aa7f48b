"""Start-up benchmark: seconds from `gang-scheduler run` being started (a new process,
interpreter start-up and imports included) to its first bind, with 1,000 nodes and
3,000 pending gang pods waiting on the API emulator (issue 13: goal 1 s).

The emulator runs in its own process and is seeded first (bench/kube.py's nodes and
pods); then the scheduler is started as `python -m scheduler.cli.main run` with leader
election off, and the emulator's bind count is polled every 5 ms.

    .venv/bin/python bench/first_bind.py [--nodes 1000] [--pods 3000] [--gang 8] [--runs 3]
        [--bytecode] [--timeline]

Besides the wall-clock seconds it reports the scheduler's own CPU seconds at the first
bind (user + system, read from /proc as soon as the bind is seen: on a shared machine
this moves less with the load than the wall clock) and the load average before each run.

`--bytecode` runs the scheduler with a private bytecode cache (PYTHONPYCACHEPREFIX), filled
by one extra run first (not reported): every module it imports, the standard library and
the installed packages too, is then read from .pyc files, as in the container image (pip
compiles what it installs). Without it, an environment with PYTHONDONTWRITEBYTECODE=1
(this machine's) compiles the project's own modules from source at every start.

`--profile DIR` runs the scheduler under cProfile, written to DIR when it exits (a
little after the first bind: read the cumulative times up to `_schedule`).

`--timeline` runs the scheduler through bench/startup_probe.py and prints, for each run,
when each step of the start-up happened, in seconds from the process start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kube as kube_bench  # bench/kube.py: this script's directory is on sys.path

from scheduler.kube.client import create_client

REPO = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "startup_probe.py"
POLL_SECONDS = 0.005
# How long a --timeline run goes on after the first bind, for the steps after it.
TIMELINE_TAIL_SECONDS = 0.5


def timeline(path: Path, start: float) -> dict[str, Any]:
    """The probe's steps, in seconds from `start` (wall clock), and the garbage
    collector's seconds and collections by generation up to the first Binding POST."""
    steps: dict[str, Any] = {}
    collector: Any = None
    for line in path.read_text().splitlines():
        row = json.loads(line)
        steps[row["step"]] = round(row["at"] - start, 3)
        if row["step"] == "first Binding POST sent":
            collector = [round(seconds, 3) for seconds in row["gc_seconds"]], row["gc_count"]
    steps = dict(sorted(steps.items(), key=lambda item: float(item[1])))
    steps["gc seconds, collections (by generation) to the first POST"] = collector
    return steps


async def first_bind(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    kubeconfig = tmp / "kubeconfig"
    emulator, _ = kube_bench.start_emulator(100_000, kubeconfig)
    try:
        seeder = await create_client(str(kubeconfig), qps=None)
        try:
            nodes, pods = kube_bench.names(args.nodes, args.pods, args.gang, "fb")
            await kube_bench.seed(seeder, nodes, [], args.gang, "gang-scheduler", "fb")
            await kube_bench.seed(seeder, [], pods, args.gang, "gang-scheduler", "fb")
            config = tmp / "config.yaml"
            settings = {
                "http": {"address": "127.0.0.1", "port": kube_bench.free_port()},
                "leaderElection": {"enabled": False},
            }
            config.write_text(json.dumps(settings))  # JSON is YAML
            steps = tmp / "timeline.jsonl"
            command: list[str] = [sys.executable, "-m", "scheduler.cli.main", "run"]
            if args.timeline:
                command = [sys.executable, str(PROBE), str(steps), "run"]
            if args.profile:
                profile = args.profile / f"first-bind-{time.time_ns()}.prof"
                command[1:1] = ["-m", "cProfile", "-o", str(profile)]
            command += ["--kubeconfig", str(kubeconfig), "--config", str(config)]
            env = dict(os.environ)
            if args.bytecode:
                env["PYTHONPYCACHEPREFIX"] = str(args.bytecode_prefix)
                env.pop("PYTHONDONTWRITEBYTECODE", None)
            load = os.getloadavg()[0]
            wall_start = time.time()
            start = time.perf_counter()
            scheduler = subprocess.Popen([*command, "--log-level", "error"], cwd=REPO, env=env)
            try:
                while not (await kube_bench.emulator_counts(seeder))[1]:
                    if scheduler.poll() is not None:
                        raise RuntimeError(f"the scheduler exited ({scheduler.returncode})")
                    await asyncio.sleep(POLL_SECONDS)
                seconds = time.perf_counter() - start
                cpu = kube_bench.process_cpu_seconds(scheduler.pid)
                result: dict[str, Any] = {"seconds": seconds, "cpu": cpu, "load": load}
                if args.timeline:
                    await asyncio.sleep(TIMELINE_TAIL_SECONDS)
                    result["timeline"] = timeline(steps, wall_start)
                return result
            finally:
                scheduler.terminate()
                scheduler.wait(10)
        finally:
            await seeder.close()
    finally:
        emulator.terminate()
        emulator.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--gang", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bytecode", action="store_true", help="run from compiled .pyc files")
    parser.add_argument("--timeline", action="store_true", help="print each step's time")
    parser.add_argument(
        "--profile", type=Path, help="a directory: each run's cProfile of the scheduler, to exit"
    )
    args = parser.parse_args()
    args.pods -= args.pods % args.gang
    runs = []
    with tempfile.TemporaryDirectory() as cache:
        args.bytecode_prefix = Path(cache)
        for _ in range(1 if args.bytecode else 0):  # fills the bytecode cache
            with tempfile.TemporaryDirectory() as tmp:
                asyncio.run(first_bind(args, Path(tmp)))
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                runs.append(asyncio.run(first_bind(args, Path(tmp))))
    report: dict[str, Any] = {
        "nodes": args.nodes,
        "pods": args.pods,
        "gang": args.gang,
        "bytecode": args.bytecode,
        "first_bind_seconds": [round(run["seconds"], 3) for run in runs],
        "cpu_seconds_at_first_bind": [
            None if run["cpu"] is None else round(run["cpu"], 2) for run in runs
        ],
        "load_average": [round(run["load"], 2) for run in runs],
    }
    if args.timeline:
        report["timelines"] = [run["timeline"] for run in runs]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
