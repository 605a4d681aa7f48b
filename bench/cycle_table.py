"""How the scheduler's CPU cost grows with the cluster and the gang size (issue 13):
bench/kube.py run once per (nodes, gang size) pair, each in its own process, and its
scheduler CPU seconds per 1,000 pods set out as one markdown table.

Pods are scaled so each run takes seconds: 2,048 pods (a multiple of every gang size),
or what the cluster holds at 8 GPUs per node when that is less (768 at 100 nodes), so
every pod binds and no run measures failed attempts. Two figures per cell: CPU per
1,000 pods from the start (the start-up lists of nodes and pods included) and after the
caches synced (scheduling alone).

    .venv/bin/python bench/cycle_table.py
    .venv/bin/python bench/cycle_table.py --nodes 100 --nodes 1000 --gang 1 --runs 3
    .venv/bin/python bench/cycle_table.py --repo /path/to/another/tree   # before/after
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GPUS_PER_NODE = 8
DEFAULT_PODS = 2048
LARGEST_GANG = 64


def pods_for(nodes: int, most: int = DEFAULT_PODS) -> int:
    """`most` pods, or what `nodes` hold, in whole gangs of the largest size."""
    room = nodes * GPUS_PER_NODE // LARGEST_GANG * LARGEST_GANG
    return max(LARGEST_GANG, min(most, room))


def run_once(repo: Path, nodes: int, gang: int, pods: int) -> dict[str, Any]:
    command = [
        sys.executable,
        "bench/kube.py",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--gang",
        str(gang),
        "--json",
    ]
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def cell(results: list[dict[str, Any]], key: str) -> str:
    values = [r[key] for r in results if r.get(key) is not None]
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, action="append", help="100, 1000, 5000")
    parser.add_argument("--gang", type=int, action="append", help="1, 8, 64")
    parser.add_argument("--pods", type=int, default=DEFAULT_PODS, help="at most (2048)")
    parser.add_argument("--runs", type=int, default=1, help="runs per cell; the median")
    parser.add_argument("--repo", type=Path, default=REPO, help="the tree whose bench runs")
    parser.add_argument("--json", action="store_true", help="every run's result")
    args = parser.parse_args()
    node_counts = args.nodes or [100, 1000, 5000]
    gangs = args.gang or [1, 8, 64]
    rows: list[tuple[int, int, int, list[dict[str, Any]]]] = []
    for nodes in node_counts:
        pods = pods_for(nodes, args.pods)
        for gang in gangs:
            results = [run_once(args.repo, nodes, gang, pods) for _ in range(args.runs)]
            rows.append((nodes, gang, pods, results))
            print(
                f"{nodes} nodes, gang {gang}: {cell(results, 'cpu_s_per_1000_pods')}",
                file=sys.stderr,
            )
    if args.json:
        print(json.dumps([{"nodes": n, "gang": g, "pods": p, "runs": r} for n, g, p, r in rows]))
        return
    print(
        "| nodes | gang | pods | CPU s per 1,000 pods | after the sync | pods/s | "
        "start-up lists, CPU s |"
    )
    print("|---|---|---|---|---|---|---|")
    for nodes, gang, pods, results in rows:
        print(
            f"| {nodes} | {gang} | {pods} | {cell(results, 'cpu_s_per_1000_pods')} | "
            f"{cell(results, 'cpu_s_per_1000_pods_after_sync')} | "
            f"{statistics.median(r['pods_per_s'] for r in results):.0f} | "
            f"{cell(results, 'sync_cpu_seconds')} |"
        )


if __name__ == "__main__":
    main()
