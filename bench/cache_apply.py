"""Applying running pods to the cache (issue 31): CPU per 1,000 pods of
`ClusterCache.apply_pod` for R bound pods (bench/kube.py's running pods, bound by
another scheduler) spread round-robin over N nodes (8 GPUs each), as a cold start's
relist applies them. Prints one JSON line.

    .venv/bin/python bench/cache_apply.py [--nodes 5000] [--pods 150000] [--profile]
        [--gpu-neighbour]

--gpu-neighbour first binds, untimed, one 1-GPU pod of another scheduler to every node:
its devices are inferred (no signed assignment), as a GPU pod's that another scheduler
placed.

The pods are built in batches outside the timed part (building 150,000 at once would
hold gigabytes); only `apply_pod` is timed (process CPU time). The collector is off,
as it is while the scheduler applies a page. --profile prints cProfile's top entries
(by own time) to stderr instead of timing without it.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import sys
import time

from kube import bench_node, running_pod  # bench/kube.py: this script's directory is on sys.path

from cache.cluster import ClusterCache, EventType

BATCH = 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--gpu-neighbour", action="store_true")
    args = parser.parse_args()
    cache = ClusterCache()
    for index in range(args.nodes):
        cache.apply_node(EventType.ADDED, bench_node(f"n{index}", "ca"))
    if args.gpu_neighbour:
        for index in range(args.nodes):
            pod = running_pod(f"g{index}", f"n{index}", index, "ca-gpu")
            resources = pod["spec"]["containers"][0]["resources"]
            resources["requests"]["nvidia.com/gpu"] = "1"
            resources["limits"]["nvidia.com/gpu"] = "1"
            cache.apply_pod(EventType.ADDED, pod)
    profiler = cProfile.Profile() if args.profile else None
    gc.disable()
    seconds = 0.0
    for start in range(0, args.pods, BATCH):
        batch = [
            running_pod(f"p{index}", f"n{index % args.nodes}", index, "ca")
            for index in range(start, min(start + BATCH, args.pods))
        ]
        began = time.process_time()
        if profiler is not None:
            profiler.enable()
        for pod in batch:
            cache.apply_pod(EventType.ADDED, pod)
        if profiler is not None:
            profiler.disable()
        seconds += time.process_time() - began
    gc.enable()
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(15)
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "pods": args.pods,
                "pods_per_node": round(args.pods / args.nodes, 1),
                "apply_seconds": round(seconds, 3),
                "ms_per_1000_pods": round(seconds * 1e6 / args.pods, 2),
                "profiled": args.profile,
                "gpu_neighbour": args.gpu_neighbour,
                "load_average": [round(value, 2) for value in os.getloadavg()],
            }
        )
    )


if __name__ == "__main__":
    main()
