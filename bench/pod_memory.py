"""Memory of the running pods (issue 31): RSS of a process holding N nodes and R running
pods (bench/kube.py's Deployment-shaped pods, bound by another scheduler), decoded by
the scheduler's pod decoder in pages of 500, as a list delivers them, and applied to a
`ClusterCache`. Prints one JSON line: RSS before and after, and MiB per 100,000 pods.

    .venv/bin/python bench/pod_memory.py [--nodes 5000] [--pods 150000] [--top 20]

--top N traces the allocations (tracemalloc: slower, and its own bookkeeping inflates
RSS) and prints the N source lines holding the most memory after the apply, to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tracemalloc
from pathlib import Path

from kube import bench_node, running_pod  # bench/kube.py: this script's directory is on sys.path

from cache.cluster import ClusterCache, EventType
from scheduler.kube.decoding import SlimPodDecoder

PAGE = 500


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args()
    if args.top:
        tracemalloc.start()
    cache = ClusterCache()
    for index in range(args.nodes):
        cache.apply_node(EventType.ADDED, bench_node(f"n{index}", "pm"))
    gc.collect()
    before = rss_mib()
    decoder = SlimPodDecoder()
    for start in range(0, args.pods, PAGE):
        pods = [
            running_pod(f"p{index}", f"n{index % args.nodes}", index, "pm")
            for index in range(start, min(args.pods, start + PAGE))
        ]
        page = json.dumps({"metadata": {"resourceVersion": "1"}, "items": pods}).encode()
        del pods
        for pod in decoder.page(page)["items"]:
            cache.apply_pod(EventType.ADDED, pod)
    gc.collect()
    after = rss_mib()
    if args.top:
        snapshot = tracemalloc.take_snapshot()
        for stat in snapshot.statistics("lineno")[: args.top]:
            where = stat.traceback[0]
            print(f"{stat.size / 2**20:8.2f} MiB {stat.count:8d}  {where}", file=sys.stderr)
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "pods": args.pods,
                "rss_mib_nodes_only": round(before, 1),
                "rss_mib": round(after, 1),
                "mib_per_100k_pods": round((after - before) * 100_000 / max(args.pods, 1), 1),
                "traced": bool(args.top),
                "load_average": [round(value, 2) for value in os.getloadavg()],
            }
        )
    )


if __name__ == "__main__":
    main()
