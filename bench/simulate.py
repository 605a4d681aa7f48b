"""Simulator speed: seconds for one replay of the default openb trace at 130% load,
per policy, through the full scheduling core (every node scored, as the paper's
protocol wants).

    .venv/bin/python bench/simulate.py                  # table
    .venv/bin/python bench/simulate.py --json
    .venv/bin/python bench/simulate.py --policy fgd --seed 43
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cache.pod import pod_from_api
from scheduler.sim.openb import (
    NODE_FILE,
    TRACES,
    arrival_order,
    bundled_file,
    cluster_size,
    load_nodes,
    load_pods,
    pod_object,
)
from scheduler.sim.profiles import BEST_POLICY, openb_profile
from scheduler.sim.replay import replay_openb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--policy", action="append", help=f"repeatable; default: bestfit, fgd, {BEST_POLICY}"
    )
    parser.add_argument("--trace", default="default", choices=sorted(TRACES))
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    nodes = load_nodes(bundled_file(NODE_FILE))
    pods = load_pods(bundled_file(TRACES[args.trace]))
    size = cluster_size(nodes)
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]
    order = arrival_order(pods, size.total_gpu_milli, args.seed)
    rows = []
    for policy in args.policy or ["bestfit", "fgd", BEST_POLICY]:
        profile = openb_profile(
            policy,
            seed=args.seed,
            max_cpu_milli=size.max_cpu_milli,
            max_gpu_milli=size.max_gpu_milli,
            history=history,
            cluster_cpu_milli=size.total_cpu_milli,
            cluster_gpu_milli=size.total_gpu_milli,
        )
        cpu_started = time.process_time()
        result = replay_openb(nodes, order, profile)
        cpu_seconds = time.process_time() - cpu_started
        rows.append(
            {
                "policy": policy,
                "pods": result.pods,
                "seconds": round(result.seconds, 2),
                # CPU time of this process: on a shared machine, wall time counts waits.
                "cpu_seconds": round(cpu_seconds, 2),
                "us_per_pod": round(result.seconds / result.pods * 1e6, 1),
                "allocation_pct_130": round(result.allocation_pct[130] or 0.0, 2),
            }
        )
    peak = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if args.json:
        print(
            json.dumps(
                {
                    "trace": args.trace,
                    "seed": args.seed,
                    "nodes": len(nodes),
                    "results": rows,
                    "peak_rss_mib": peak,
                }
            )
        )
        return 0
    print(f"trace {args.trace}, seed {args.seed}, {len(nodes)} nodes, peak RSS {peak} MiB")
    print("| policy | pods | seconds | CPU seconds | µs per pod | GPU allocation % at 130% |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['policy']} | {row['pods']} | {row['seconds']} | {row['cpu_seconds']} "
            f"| {row['us_per_pod']} "
            f"| {row['allocation_pct_130']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
