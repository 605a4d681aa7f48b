"""Start-up benchmark: seconds from `gang-scheduler run` being started (a new process,
interpreter start-up and imports included) to its first bind, with 1,000 nodes and
3,000 pending gang pods waiting on the API emulator (issue 13: goal 1 s).

The emulator runs in its own process and is seeded first (bench/kube.py's nodes and
pods); then the scheduler is started as `python -m scheduler.cli run` with leader
election off, and the emulator's bind count is polled every 5 ms.

    .venv/bin/python bench/first_bind.py [--nodes 1000] [--pods 3000] [--gang 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kube as kube_bench  # bench/kube.py: this script's directory is on sys.path

from scheduler.kube.client import create_client

REPO = Path(__file__).resolve().parent.parent
POLL_SECONDS = 0.005


async def first_bind(args: argparse.Namespace, tmp: Path) -> float:
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
            command = [sys.executable, "-m", "scheduler.cli", "run"]
            command += ["--kubeconfig", str(kubeconfig), "--config", str(config)]
            start = time.perf_counter()
            scheduler = subprocess.Popen([*command, "--log-level", "error"], cwd=REPO)
            try:
                while not (await kube_bench.emulator_counts(seeder))[1]:
                    if scheduler.poll() is not None:
                        raise RuntimeError(f"the scheduler exited ({scheduler.returncode})")
                    await asyncio.sleep(POLL_SECONDS)
                return time.perf_counter() - start
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
    args = parser.parse_args()
    args.pods -= args.pods % args.gang
    seconds = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            seconds.append(round(asyncio.run(first_bind(args, Path(tmp))), 3))
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "pods": args.pods,
                "gang": args.gang,
                "first_bind_seconds": seconds,
            }
        )
    )


if __name__ == "__main__":
    main()
