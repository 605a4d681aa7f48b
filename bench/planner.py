"""Planner benchmark: time to place one gang against clusters of 500 to 5,000 nodes.

Each node has 8 GPUs (DGX-like NVLink boxes, PCIe boxes with PIX/SYS pairs, and nodes
with no published topology; A100, V100 and T4 models), 40 nodes to a rack. The
cluster starts about half full with running pods, then a mixed queue of gangs (1, 2,
4, 8 and 32 members; whole GPUs and shares; a fifth pinned to a GPU model) is planned
one gang at a time; each plan is assumed and confirmed, so the cluster fills as it
would. Timed per gang: the snapshot update plus the planner call (what one scheduling
cycle spends before binding).

    .venv/bin/python bench/planner.py                 # table for 500..5000 nodes
    .venv/bin/python bench/planner.py --nodes 5000 --json
    .venv/bin/python bench/planner.py --constraints   # gangs of 8 with and without
                                                      # inter-pod constraints, 5000 nodes
    .venv/bin/python bench/planner.py --dra           # gangs of 8 asking GPUs through DRA
                                                      # claims and through nvidia.com/gpu
    .venv/bin/python bench/planner.py --topology      # gangs of 64 requiring one rack,
                                                      # in 8-pod clique slices (5000 nodes)

With --constraints, gangs of 8 alternate between plain ones and constrained ones: one
worker per node (required pod anti-affinity on kubernetes.io/hostname) and a zone
spread (topologySpreadConstraints, maxSkew 1, DoNotSchedule; the zone label is the
rack here, 40 nodes each). Both kinds run in the same process against the same filling
cluster, so the two percentiles compare; the constrained gangs' pods stay, so later
gangs are judged against thousands of running pods with anti-affinity terms.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cache.cluster import ClusterCache, EventType
from cache.gpu import (
    ASSIGNMENT_ANNOTATION,
    SIGNATURE_ANNOTATION,
    parse_assignment,
    sign_assignment,
)
from cache.snapshot import Snapshot
from cache.topology_requirement import TopologyRequirement
from policies.profile import build_profile
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, Unschedulable
from scheduler.sim.objects import ZONE_LABEL, node_object, nvlink_links

GANG_SIZES = (1, 2, 4, 8, 32)
MODELS = ("A100", "V100", "T4")
NODES_PER_RACK = 40
BENCH_KEY = b"bench-assignment-signing-key"


def _links(kind: str) -> list[list[str]] | None:
    if kind == "nvlink":
        return nvlink_links(8)
    if kind == "pcie":
        # Two GPUs per PCIe switch, two switches per CPU socket, two sockets.
        return [
            [
                "X"
                if i == j
                else ("PIX" if i // 2 == j // 2 else ("NODE" if i // 4 == j // 4 else "SYS"))
                for j in range(8)
            ]
            for i in range(8)
        ]
    return None


def bench_node(index: int, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    name = f"node-{index:05d}"
    labels = {ZONE_LABEL: f"rack-{index // NODES_PER_RACK:03d}", **(extra_labels or {})}
    return node_object(
        name,
        cpu="128",
        memory="1024Gi",
        gpus=8,
        model=MODELS[index % len(MODELS)],
        labels=labels,
        links=_links(("nvlink", "pcie", "unknown")[(index // 3) % 3]),
        gpu_memory_mib=40960,
    )


def pod_object(
    name: str,
    *,
    gang: str | None,
    size: int,
    gpus: int,
    vgpu: int,
    model: str | None,
    node: str = "",
    assignment: str = "",
) -> dict[str, Any]:
    requests = {"cpu": "4", "memory": "32Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    if vgpu:
        requests["nvidia.com/vgpu"] = str(vgpu)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "bench",
        "uid": name,
        "resourceVersion": "1",
        "labels": {},
        "annotations": {},
    }
    if gang:
        meta["labels"]["scheduling.x-k8s.io/pod-group"] = gang
        meta["annotations"]["gang-scheduler.io/min-member"] = str(size)
    if assignment and node:
        # Signed as the scheduler's binder signs, so the cache charges it as written.
        shares = parse_assignment(assignment)
        meta["annotations"][ASSIGNMENT_ANNOTATION] = assignment
        meta["annotations"][SIGNATURE_ANNOTATION] = sign_assignment(BENCH_KEY, name, node, shares)
    spec: dict[str, Any] = {
        "schedulerName": "gang-scheduler",
        "containers": [{"name": "c", "resources": {"requests": requests}}],
    }
    if node:
        spec["nodeName"] = node
    if model:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": model}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def build_cluster(
    nodes: int,
    rng: random.Random,
    labels_of: Callable[[int], dict[str, str]] | None = None,
) -> ClusterCache:
    """`labels_of`: more labels per node index (topology levels of --topology)."""
    cache = ClusterCache(assignment_key=BENCH_KEY)
    for index in range(nodes):
        extra = labels_of(index) if labels_of is not None else None
        cache.apply_node(EventType.ADDED, bench_node(index, extra))
    # About half the GPUs busy: whole-GPU pods and shares on their own devices.
    for index in range(nodes):
        name = f"node-{index:05d}"
        device = 0
        for number in range(rng.randint(0, 3)):
            if device >= 8:
                break
            if rng.random() < 0.4:
                milli = rng.choice((250, 500, 700))
                pod = pod_object(
                    f"run-{index}-{number}",
                    gang=None,
                    size=1,
                    gpus=0,
                    vgpu=milli,
                    model=None,
                    node=name,
                    assignment=f"{device}:{milli}",
                )
                device += 1
            else:
                count = min(rng.choice((1, 2, 4)), 8 - device)
                shares = ",".join(f"{d}:1000" for d in range(device, device + count))
                pod = pod_object(
                    f"run-{index}-{number}",
                    gang=None,
                    size=1,
                    gpus=count,
                    vgpu=0,
                    model=None,
                    node=name,
                    assignment=shares,
                )
                device += count
            cache.apply_pod(EventType.ADDED, pod)
    return cache


JOB_LABEL = "bench/job"


def constrain(objs: list[dict[str, Any]], name: str) -> None:
    """One worker per node and a zone spread of maxSkew 1 for the gang's pods."""
    selector = {"matchLabels": {JOB_LABEL: name}}
    for obj in objs:
        obj["metadata"]["labels"][JOB_LABEL] = name
        obj["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
        obj["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE_LABEL,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            }
        ]


def run_constrained(nodes: int, gangs: int, seed: int) -> dict[str, Any]:
    """Gangs of 8, every other one with one-per-node anti-affinity and a zone spread."""
    rng = random.Random(seed)
    cache = build_cluster(nodes, rng)
    planner = Planner(build_profile("binpack"))
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    timings: dict[str, list[float]] = {"plain": [], "constrained": []}
    placed = dict.fromkeys(timings, 0)
    for number in range(2 * gangs):
        kind = "constrained" if number % 2 else "plain"
        objs = gang_pods(number, 8, rng)
        name = objs[0]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"]
        if kind == "constrained":
            constrain(objs, name)
        seconds, result = plan_and_place(cache, snapshot, planner, objs)
        timings[kind].append(seconds)
        if isinstance(result, Plan):
            placed[kind] += 1
            if kind == "constrained":
                check_constrained(result, snapshot)
    return {
        "nodes": nodes,
        "gang_size": 8,
        **{
            kind: {
                "p50_ms": round(statistics.median(values) * 1000, 3),
                "p99_ms": round(percentile(values, 0.99) * 1000, 3),
                "placed": placed[kind],
                "attempted": len(values),
            }
            for kind, values in timings.items()
        },
    }


def check_constrained(result: Plan, snapshot: Snapshot) -> None:
    """The benchmark trusts no plan: one member per node, at most one per rack more
    than the emptiest rack holds (all racks hold none of a new gang's pods before it,
    so at most one per rack)."""
    hosts = [p.node for p in result.placements]
    racks = [snapshot.nodes[n].labels[ZONE_LABEL] for n in hosts]
    if len(set(hosts)) != len(hosts) or len(set(racks)) != len(racks):
        raise AssertionError(f"constraint broken by plan {result.gang_key}: {hosts}")


def gang_pods(number: int, size: int, rng: random.Random) -> list[dict[str, Any]]:
    name = f"gang-{number:05d}-size{size}"
    model = rng.choice(MODELS) if rng.random() < 0.2 else None
    if size == 1 and rng.random() < 0.5:
        gpus, vgpu = 0, rng.choice((250, 300, 500))
    else:
        gpus, vgpu = rng.choice((1, 2, 4, 8) if size <= 8 else (1, 2)), 0
    return [
        pod_object(f"{name}-{i}", gang=name, size=size, gpus=gpus, vgpu=vgpu, model=model)
        for i in range(size)
    ]


def plan_and_place(
    cache: ClusterCache,
    snapshot: Snapshot,
    planner: Planner,
    objs: list[dict[str, Any]],
    topology: TopologyRequirement | None = None,
) -> tuple[float, Plan | Unschedulable]:
    """Add one gang's pods, plan it (timed: snapshot update and planning), and bind what
    the plan places, as a watch confirming the binds would. `topology`: the gang's
    requirement, set as its PodGroup would set it."""
    for obj in objs:
        cache.apply_pod(EventType.ADDED, obj)
    pods = [cache.pod(obj["metadata"]["uid"]) for obj in objs]
    gang = next(iter(assemble_gangs([p for p in pods if p], {}, "gang-scheduler").gangs.values()))
    if topology is not None:
        gang.topology = topology
    start = time.perf_counter()
    cache.update_snapshot(snapshot)
    result = planner.plan(gang, snapshot)
    seconds = time.perf_counter() - start
    if isinstance(result, Plan):
        cache.assume(result.placements, now=0)
        for placement in result.placements:
            cache.confirm(placement.pod_uid, placement.node, placement.shares)
    return seconds, result


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def run(nodes: int, gangs_per_size: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    cache = build_cluster(nodes, rng)
    planner = Planner(build_profile("binpack"))
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    timings: dict[int, list[float]] = {size: [] for size in GANG_SIZES}
    placed: dict[int, int] = dict.fromkeys(GANG_SIZES, 0)
    queue = [size for size in GANG_SIZES for _ in range(gangs_per_size)]
    rng.shuffle(queue)
    for number, size in enumerate(queue):
        objs = gang_pods(number, size, rng)
        seconds, result = plan_and_place(cache, snapshot, planner, objs)
        timings[size].append(seconds)
        if isinstance(result, Plan):
            placed[size] += 1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "nodes": nodes,
        "gangs": {
            str(size): {
                "p50_ms": round(statistics.median(values) * 1000, 3),
                "p99_ms": round(percentile(values, 0.99) * 1000, 3),
                "p50_ms_per_pod": round(statistics.median(values) * 1000 / size, 3),
                "p99_ms_per_pod": round(percentile(values, 0.99) * 1000 / size, 3),
                "placed": placed[size],
                "attempted": len(values),
            }
            for size, values in timings.items()
        },
        "peak_rss_mib": round(peak, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, help="one cluster size (default: 500..5000)")
    parser.add_argument(
        "--gangs",
        type=int,
        help="gangs of each size (default: nodes / 12, so every cluster "
        "ends about equally full and sizes compare)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument(
        "--constraints",
        action="store_true",
        help="gangs of 8 with and without one-per-node anti-affinity and a zone spread "
        "(default 5000 nodes; --gangs of each kind, default 600: the cluster fills and "
        "the last gangs fail)",
    )
    parser.add_argument(
        "--dra",
        action="store_true",
        help="gangs of 8 asking 1-2 GPUs each through DRA ResourceClaims, alternating "
        "with gangs asking as many through nvidia.com/gpu (bench/dra_gangs.py; default "
        "5000 nodes, --gangs of each kind, default 300)",
    )
    parser.add_argument(
        "--topology",
        action="store_true",
        help="gangs of 64 one-GPU members requiring one rack, each 8 consecutive members "
        "in one NVLink clique, alternating with plain gangs of 8 (bench/topology_gangs.py; "
        "default 5000 nodes, --gangs of each kind, default 100)",
    )
    args = parser.parse_args()
    if args.topology:
        from bench.topology_gangs import print_topology, run_topology

        result = run_topology(args.nodes or 5000, args.gangs or 100, args.seed)
        if args.json:
            print(json.dumps(result))
        else:
            print_topology(result)
        return 0
    if args.dra:
        from bench.dra_gangs import print_dra, run_dra

        result = run_dra(args.nodes or 5000, args.gangs or 300, args.seed)
        if args.json:
            print(json.dumps(result))
        else:
            print_dra(result)
        return 0
    if args.constraints:
        result = run_constrained(args.nodes or 5000, args.gangs or 600, args.seed)
        if args.json:
            print(json.dumps(result))
        else:
            print_constrained(result)
        return 0
    if args.nodes:
        result = run(args.nodes, args.gangs or max(10, args.nodes // 12), args.seed)
        if args.json:
            print(json.dumps(result))
        else:
            print_table([result])
        return 0
    # Each size in its own process, so that peak RSS is that size's.
    results = []
    for nodes in (500, 1000, 2000, 5000):
        command = [sys.executable, __file__, "--nodes", str(nodes), "--seed", str(args.seed)]
        if args.gangs:
            command += ["--gangs", str(args.gangs)]
        out = subprocess.run(
            [*command, "--json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        results.append(json.loads(out))
    if args.json:
        print(json.dumps({"results": results}))
    else:
        print_table(results)
    return 0


def print_constrained(result: dict[str, Any]) -> None:
    print("| nodes | gangs of 8 | p50 ms | p99 ms | placed |")
    print("|---|---|---|---|---|")
    for kind in ("plain", "constrained"):
        row = result[kind]
        print(
            f"| {result['nodes']} | {kind} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} "
            f"| {row['placed']}/{row['attempted']} |"
        )


def print_table(results: list[dict[str, Any]]) -> None:
    sizes = [str(s) for s in GANG_SIZES]
    print(
        "| nodes | "
        + " | ".join(f"gang of {s}: p50 / p99 ms" for s in sizes)
        + " | ms per pod (p50), gang of 8 / 32 | placed | peak RSS MiB |"
    )
    print("|---" * (len(sizes) + 4) + "|")
    for result in results:
        gangs = result["gangs"]
        cells = [f"{gangs[s]['p50_ms']:.2f} / {gangs[s]['p99_ms']:.2f}" for s in sizes]
        placed = sum(g["placed"] for g in gangs.values())
        attempted = sum(g["attempted"] for g in gangs.values())
        per_pod = f"{gangs['8']['p50_ms_per_pod']:.3f} / {gangs['32']['p50_ms_per_pod']:.3f}"
        print(
            f"| {result['nodes']} | "
            + " | ".join(cells)
            + f" | {per_pod} | {placed}/{attempted} | {result['peak_rss_mib']:.1f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
