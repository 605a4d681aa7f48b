"""Cold start at cluster scale (issue 31): seconds and CPU seconds from `gang-scheduler
run` being started to its caches synced (/readyz answers 200) and to its first bind,
and its peak RSS, with N nodes and R pods already running on them, then P pending.

The emulator runs in its own process and is seeded first: nodes, the running pods
(loaded directly, bench/kube.py's `seed_running`), then the pending gang pods. The
scheduler is started as `python -m scheduler.cli.main run` from `--repo` (default: this
checkout; another worktree compares two versions with the same interpreter and
packages), leader election off; /readyz and the emulator's bind count are polled.

    .venv/bin/python bench/cold_start.py [--nodes 5000] [--running-pods 150000]
        [--pods 100] [--gang 1] [--repo PATH] [--runs 1] [--no-watch-list]

CPU seconds are the scheduler's user + system time read from /proc when each moment is
seen; peak RSS is its VmHWM at the first bind and once more a second later (the lists of
the other kinds may still be finishing). The load average is taken before each run.
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

import aiohttp
import kube as kube_bench  # bench/kube.py: this script's directory is on sys.path

from scheduler.kube.client import create_client

REPO = Path(__file__).resolve().parent.parent
POLL_SECONDS = 0.02
AFTER_BIND_SECONDS = 1.0
GIVE_UP_SECONDS = 600.0


def peak_rss_mib(pid: int) -> float | None:
    """VmHWM (the resident set's high-water mark) of a process, in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


async def ready(session: aiohttp.ClientSession, port: int) -> bool:
    try:
        async with session.get(f"http://127.0.0.1:{port}/readyz") as answer:
            return answer.status == 200
    except (aiohttp.ClientError, OSError):
        return False


def stop(process: subprocess.Popen[Any]) -> None:
    """Terminate, and kill what does not end in 30 s (an emulator holding 150,000 pods
    may still be answering the last watch)."""
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


async def cold_start(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    kubeconfig = tmp / "kubeconfig"
    flags = ["--no-watch-list"] if args.no_watch_list else []
    emulator, _ = kube_bench.start_emulator(100_000, kubeconfig, *flags)
    try:
        seeder = await create_client(str(kubeconfig), qps=None)
        try:
            nodes, pods = kube_bench.names(args.nodes, args.pods, args.gang, "cs")
            await kube_bench.seed(seeder, nodes, [], args.gang, "gang-scheduler", "cs")
            running = kube_bench.running_names(args.running_pods, "cs")
            await kube_bench.seed_running(seeder, running, nodes, "cs", emulated=True)
            await kube_bench.seed(seeder, [], pods, args.gang, "gang-scheduler", "cs")
            port = kube_bench.free_port()
            config = tmp / "config.yaml"
            settings = {
                "http": {"address": "127.0.0.1", "port": port},
                "leaderElection": {"enabled": False},
            }
            config.write_text(json.dumps(settings))  # JSON is YAML
            command = [sys.executable, "-m", "scheduler.cli.main", "run"]
            command += ["--kubeconfig", str(kubeconfig), "--config", str(config)]
            load = os.getloadavg()
            start = time.perf_counter()
            scheduler = subprocess.Popen([*command, "--log-level", "error"], cwd=args.repo)
            result: dict[str, Any] = {"load": [round(x, 2) for x in load]}
            try:
                async with aiohttp.ClientSession() as session:
                    while "bind_seconds" not in result:
                        if scheduler.poll() is not None:
                            raise RuntimeError(f"the scheduler exited ({scheduler.returncode})")
                        if time.perf_counter() - start > GIVE_UP_SECONDS:
                            raise RuntimeError("no first bind in time")
                        now = time.perf_counter() - start
                        if "synced_seconds" not in result and await ready(session, port):
                            result["synced_seconds"] = round(now, 2)
                            result["synced_cpu"] = kube_bench.process_cpu_seconds(scheduler.pid)
                        if (await kube_bench.emulator_counts(seeder))[1]:
                            result["bind_seconds"] = round(time.perf_counter() - start, 2)
                            result["bind_cpu"] = kube_bench.process_cpu_seconds(scheduler.pid)
                            result["peak_rss_mib_at_bind"] = peak_rss_mib(scheduler.pid)
                        await asyncio.sleep(POLL_SECONDS)
                    while "synced_seconds" not in result:
                        if time.perf_counter() - start > GIVE_UP_SECONDS:
                            raise RuntimeError("never synced")
                        if await ready(session, port):
                            result["synced_seconds"] = round(time.perf_counter() - start, 2)
                            result["synced_cpu"] = kube_bench.process_cpu_seconds(scheduler.pid)
                        await asyncio.sleep(POLL_SECONDS)
                await asyncio.sleep(AFTER_BIND_SECONDS)
                result["peak_rss_mib"] = peak_rss_mib(scheduler.pid)
                result["load_after"] = [round(x, 2) for x in os.getloadavg()]
                print(json.dumps({"repo": str(args.repo), **result}), flush=True)
                return result
            finally:
                stop(scheduler)
        finally:
            await seeder.close()
    finally:
        stop(emulator)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--running-pods", type=int, default=150_000)
    parser.add_argument("--pods", type=int, default=100, help="pending gang pods")
    parser.add_argument("--gang", type=int, default=1)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to start")
    parser.add_argument(
        "--no-watch-list",
        action="store_true",
        help="the emulator refuses the watch-list stream: the initial state is listed",
    )
    args = parser.parse_args()
    args.pods -= args.pods % args.gang
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(asyncio.run(cold_start(args, Path(tmp))))
    report = {
        "repo": str(args.repo),
        "nodes": args.nodes,
        "running_pods": args.running_pods,
        "pending_pods": args.pods,
        "gang": args.gang,
        "watch_list": not args.no_watch_list,
        "runs": runs,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
