"""The planner benchmark's topology mode (`bench/planner.py --topology`): gangs of 64
one-GPU members that require one rack (`topology.kubernetes.io/rack`, 40 nodes of 8
GPUs each) with every 8 consecutive members in one NVLink clique
(`nvidia.com/gpu.clique`, 2 nodes each), alternating with plain gangs of 8, in the same
process on the same filling cluster (bench/planner.py's: about half busy), so the
percentiles compare. Every plan is checked: one rack, one clique per slice.

The garbage collector is set as the running scheduler sets it once its caches have
synced (scheduler/kube/runner.py collector_tuned_for: a higher young threshold, the
cache frozen): without it, a full collection walking 5,000 nodes and their pods lands
in some plan's timing (about 250 ms) and measures the benchmark's process, not the
planner.
"""

from __future__ import annotations

import gc
import random
import statistics
from typing import Any

from bench.planner import (
    NODES_PER_RACK,
    build_cluster,
    gang_pods,
    percentile,
    plan_and_place,
    pod_object,
)
from cache.snapshot import Snapshot
from cache.topology_requirement import TopologyRequirement
from policies.profile import build_profile
from scheduler.kube.runner import GC_YOUNG_THRESHOLD
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan

RACK = "topology.kubernetes.io/rack"
CLIQUE = "nvidia.com/gpu.clique"
NODES_PER_CLIQUE = 2
GANG_SIZE = 64
SLICE = 8
REQUIREMENT = TopologyRequirement(
    required_key=RACK, slice_size=SLICE, slice_key=CLIQUE, source="bench"
)


def topology_labels(index: int) -> dict[str, str]:
    rack = index // NODES_PER_RACK
    return {RACK: f"rack-{rack:03d}", CLIQUE: f"clique-{index // NODES_PER_CLIQUE:05d}"}


def topology_gang(number: int) -> list[dict[str, Any]]:
    name = f"topo-{number:05d}"
    return [
        pod_object(f"{name}-{i:02d}", gang=name, size=GANG_SIZE, gpus=1, vgpu=0, model=None)
        for i in range(GANG_SIZE)
    ]


def check_topology(result: Plan, snapshot: Snapshot) -> None:
    """The benchmark trusts no plan: one rack, and each slice of 8 consecutive members
    (by name: the members are created together) in one clique."""
    by_name = sorted(result.placements, key=lambda p: p.pod_uid)
    racks = {snapshot.nodes[p.node].labels[RACK] for p in by_name}
    slices = [
        {snapshot.nodes[p.node].labels[CLIQUE] for p in by_name[i : i + SLICE]}
        for i in range(0, len(by_name), SLICE)
    ]
    if len(racks) != 1 or any(len(cliques) != 1 for cliques in slices):
        raise AssertionError(f"topology broken by plan {result.gang_key}: {racks} {slices}")


def run_topology(nodes: int, gangs: int, seed: int, tune_gc: bool = True) -> dict[str, Any]:
    """`tune_gc`: set the collector as the scheduler does (process-wide: not in tests)."""
    rng = random.Random(seed)
    cache = build_cluster(nodes, rng, topology_labels)
    planner = Planner(build_profile("binpack"))
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    if tune_gc:
        first, *older = gc.get_threshold()
        gc.set_threshold(max(first, GC_YOUNG_THRESHOLD), *older)
        gc.freeze()
    timings: dict[str, list[float]] = {"plain of 8": [], "rack + clique slices of 64": []}
    placed = dict.fromkeys(timings, 0)
    for number in range(2 * gangs):
        topology = number % 2 == 1
        kind = "rack + clique slices of 64" if topology else "plain of 8"
        objs = topology_gang(number) if topology else gang_pods(number, 8, rng)
        seconds, result = plan_and_place(
            cache, snapshot, planner, objs, REQUIREMENT if topology else None
        )
        timings[kind].append(seconds)
        if isinstance(result, Plan):
            placed[kind] += 1
            if topology:
                check_topology(result, snapshot)
    return {
        "nodes": nodes,
        **{
            kind: {
                "p50_ms": round(statistics.median(values) * 1000, 3),
                "p99_ms": round(percentile(values, 0.99) * 1000, 3),
                # The first gang of a kind builds what later ones catch up (the
                # level's room per shape: every node once).
                "first_ms": round(values[0] * 1000, 3),
                "max_ms": round(max(values) * 1000, 3),
                "placed": placed[kind],
                "attempted": len(values),
            }
            for kind, values in timings.items()
        },
    }


def print_topology(result: dict[str, Any]) -> None:
    print("| nodes | gangs | p50 ms | p99 ms | first ms | max ms | placed |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("plain of 8", "rack + clique slices of 64"):
        row = result[kind]
        print(
            f"| {result['nodes']} | {kind} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} "
            f"| {row['first_ms']:.2f} | {row['max_ms']:.2f} | {row['placed']}/{row['attempted']} |"
        )
