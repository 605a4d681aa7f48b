"""Preemption benchmark: one scheduling cycle of a gang of 8 that needs victims, on a
full cluster of 5,000 nodes shared by 100 ElasticQuotas.

The cluster (8 GPUs per node, as bench/planner.py's nodes) is filled with running
gangs of mixed shapes (1 to 8 members, 1 to 8 GPUs each) and priorities (0, 100,
1000), then every GPU left is taken by one-GPU pods: nothing is free. 100 namespaces
each have an ElasticQuota of min 400 GPUs and max 1,000 (the mins add up to the
cluster); half of them use 200 GPUs, the other half 600 (borrowing 200 each).

Each repetition adds two gangs of 8 members (2, 4 or 8 GPUs each, in turn), one at a
time, and times `SchedulingCore.schedule_next` for each: gang assembly, the snapshot
update, the quota check, the planner failing on the full cluster (diagnosis over every
node included), then the victim search (scheduler/sharing/preemption.py and
policies/preemption.py: grouping running pods into candidate gangs, the what-if
snapshot, a planning pass per victim set tried) until a decision is made.

- priority: at priority 500 in a namespace without a quota (nothing to reclaim, and
  no quota to admit it): only priority preemption can help, by lower-priority gangs
  (of the quotas' namespaces, only what they borrow);
- reclaim: at priority 0 (no running gang ranks lower) in a namespace under its min:
  only reclaim can help, by gangs of namespaces borrowing beyond their min.

The first cycle is timed apart (it makes the what-if copy of the snapshot that later
searches keep). The decision is checked (its kind, whole gangs of lower priority or of
borrowing namespaces, 8 placements), then dropped and the gang deleted, so every
repetition meets the same full cluster.

    .venv/bin/python bench/preemption.py                  # table
    .venv/bin/python bench/preemption.py --json
    .venv/bin/python bench/preemption.py --profile        # cProfile of the cycles
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import heapq
import json
import os
import pstats
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.planner import BENCH_KEY, bench_node, percentile
from cache.cluster import ClusterCache, EventType
from cache.gpu import ASSIGNMENT_ANNOTATION, SIGNATURE_ANNOTATION, parse_assignment, sign_assignment
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.kube.runner import GC_YOUNG_THRESHOLD
from scheduler.sharing.preemption import PRIORITY, RECLAIM

GPUS_PER_NODE = 8
NAMESPACES = 100
QUOTA_MIN_GPUS = 400
QUOTA_MAX_GPUS = 1000
LIGHT_GPUS, HEAVY_GPUS = 200, 600  # what half the namespaces use, and the other half
RUNNING_SHAPES = ((1, 1), (1, 2), (2, 2), (2, 4), (4, 4), (1, 8), (2, 8), (4, 8), (8, 8))
RUNNING_PRIORITIES = (0, 100, 1000)
PREEMPTOR_PRIORITY = 500
RECLAIMER_PRIORITY = 0  # no running gang ranks lower: only reclaim can help it
KINDS = (PRIORITY, RECLAIM)
UNGOVERNED = "batch"  # the priority preemptors' namespace: no ElasticQuota
PREEMPTOR_SHAPES = (2, 4, 8)  # GPUs per member of the gang of 8
NOW = 1_790_000_000.0
DAY = 86_400.0


def namespace(index: int) -> str:
    return f"team-{index:03d}"


def quota_object(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": "quota",
            "namespace": namespace(index),
            "uid": f"quota-{index}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "min": {"nvidia.com/gpu": str(QUOTA_MIN_GPUS)},
            "max": {"nvidia.com/gpu": str(QUOTA_MAX_GPUS)},
        },
    }


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_object(
    name: str,
    ns: str,
    *,
    gang: str | None,
    size: int,
    gpus: int,
    priority: int,
    created: float,
    node: str = "",
    devices: tuple[int, ...] = (),
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": f"{ns}.{name}",
        "resourceVersion": "1",
        "creationTimestamp": _stamp(created),
        "labels": {},
        "annotations": {},
    }
    if gang:
        meta["labels"]["scheduling.x-k8s.io/pod-group"] = gang
        meta["annotations"]["gang-scheduler.io/min-member"] = str(size)
    spec: dict[str, Any] = {
        "schedulerName": "gang-scheduler",
        "priority": priority,
        "containers": [
            {
                "name": "c",
                "resources": {
                    "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": str(gpus)}
                },
            }
        ],
    }
    if node:
        spec["nodeName"] = node
        assignment = ",".join(f"{d}:1000" for d in devices)
        shares = parse_assignment(assignment)
        meta["annotations"][ASSIGNMENT_ANNOTATION] = assignment
        meta["annotations"][SIGNATURE_ANNOTATION] = sign_assignment(
            BENCH_KEY, meta["uid"], node, shares
        )
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


class Filler:
    """Places running members first-fit over the nodes (whole devices, in order)."""

    def __init__(self, nodes: int) -> None:
        self.free = [GPUS_PER_NODE] * nodes
        self.cursor = 0

    def place(self, gpus: int) -> tuple[str, tuple[int, ...]] | None:
        for index in range(self.cursor, len(self.free)):
            if self.free[index] >= gpus:
                first = GPUS_PER_NODE - self.free[index]
                self.free[index] -= gpus
                while self.cursor < len(self.free) and self.free[self.cursor] == 0:
                    self.cursor += 1
                return f"node-{index:05d}", tuple(range(first, first + gpus))
        return None

    def place_all(self, size: int, gpus: int) -> list[tuple[str, tuple[int, ...]]] | None:
        """Every member placed, or none (the free counts are left as they were)."""
        free, cursor = list(self.free), self.cursor
        placed = [self.place(gpus) for _ in range(size)]
        if any(p is None for p in placed):
            self.free, self.cursor = free, cursor
            return None
        return [p for p in placed if p is not None]


def build(nodes: int, rng: random.Random) -> tuple[SchedulingCore, dict[str, int]]:
    cache = ClusterCache(assignment_key=BENCH_KEY)
    core = SchedulingCore(build_profile("binpack"), cache=cache)
    core.preempter.enabled = True
    for index in range(nodes):
        core.apply_node(EventType.ADDED, bench_node(index), NOW - DAY)
    for index in range(NAMESPACES):
        core.apply_elasticquota(EventType.ADDED, quota_object(index), NOW - DAY)
    # Namespaces take turns by what they still have to use, so each ends near its target.
    targets = [LIGHT_GPUS if i % 2 == 0 else HEAVY_GPUS for i in range(NAMESPACES)]
    scale = nodes * GPUS_PER_NODE / (NAMESPACES * QUOTA_MIN_GPUS)
    wanting = [(-round(t * scale), i) for i, t in enumerate(targets)]
    heapq.heapify(wanting)
    filler = Filler(nodes)
    counts = {"gangs": 0, "pods": 0}
    number = 0
    while wanting:
        left, ns_index = heapq.heappop(wanting)
        size, gpus = rng.choice(RUNNING_SHAPES)
        placements = filler.place_all(size, gpus)
        if placements is None:
            break  # the cluster is full for this shape: one-GPU pods take the rest
        name = f"run-{number:05d}"
        number += 1
        priority = rng.choice(RUNNING_PRIORITIES)
        created = NOW - rng.uniform(60.0, DAY)
        for i, (node, devices) in enumerate(placements):
            pod = pod_object(
                f"{name}-{i}",
                namespace(ns_index),
                gang=name,
                size=size,
                gpus=gpus,
                priority=priority,
                created=created,
                node=node,
                devices=devices,
            )
            core.apply_pod(EventType.ADDED, pod, NOW - DAY)
            counts["pods"] += 1
        counts["gangs"] += 1
        if -left - size * gpus > 0:
            heapq.heappush(wanting, (left + size * gpus, ns_index))
    # Every GPU left over: one-GPU pods (gangs of one) of the namespaces in turn.
    for node_index, free in enumerate(filler.free):
        for device in range(GPUS_PER_NODE - free, GPUS_PER_NODE):
            ns = namespace(number % NAMESPACES)
            pod = pod_object(
                f"single-{number:05d}",
                ns,
                gang=None,
                size=1,
                gpus=1,
                priority=rng.choice(RUNNING_PRIORITIES),
                created=NOW - rng.uniform(60.0, DAY),
                node=f"node-{node_index:05d}",
                devices=(device,),
            )
            number += 1
            core.apply_pod(EventType.ADDED, pod, NOW - DAY)
            counts["pods"] += 1
            counts["gangs"] += 1
    while core.schedule_next(NOW - DAY) is not None:
        pass
    return core, counts


def preemptor(number: int, rng: random.Random, kind: str = PRIORITY) -> list[dict[str, Any]]:
    gpus = PREEMPTOR_SHAPES[number % len(PREEMPTOR_SHAPES)]
    if kind == RECLAIM:
        ns = namespace(2 * rng.randrange(NAMESPACES // 2))  # a light one: under its min
        priority = RECLAIMER_PRIORITY
    else:
        ns = UNGOVERNED  # no quota: it does not reclaim
        priority = PREEMPTOR_PRIORITY
    name = f"{kind}-{number:04d}-{gpus}gpu"
    return [
        pod_object(
            f"{name}-{i}",
            ns,
            gang=name,
            size=8,
            gpus=gpus,
            priority=priority,
            created=NOW - 1.0,
        )
        for i in range(8)
    ]


def cycle(
    core: SchedulingCore, objs: list[dict[str, Any]], now: float, kind: str = PRIORITY
) -> tuple[float, float, int]:
    """Time one cycle for the gang `objs`; returns (seconds, CPU seconds of this
    process, victim gangs chosen). On a shared machine the wall time includes waiting
    for a core; the CPU time is what the cycle itself costs."""
    for obj in objs:
        core.apply_pod(EventType.ADDED, obj, now)
    start, cpu = time.perf_counter(), time.process_time()
    attempt = core.schedule_next(now)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert attempt is not None and attempt.gang.key.endswith(
        objs[0]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"]
    )
    decision = attempt.preemption
    victims = 0
    if decision is not None:
        # The benchmark trusts no decision: its kind, whole gangs, the right victims.
        assert len(decision.placements) == 8, decision
        assert decision.reason == kind, decision
        preemptor_ns = objs[0]["metadata"]["namespace"]
        for victim in decision.victims:
            if kind == PRIORITY:
                assert victim.priority < PREEMPTOR_PRIORITY
                assert all(pod.priority < PREEMPTOR_PRIORITY for pod in victim.pods)
            else:  # the heavy (odd) namespaces borrow; the reclaimer's is a light one
                assert victim.holding.namespace != preemptor_ns
                assert int(victim.holding.namespace.rsplit("-", 1)[1]) % 2 == 1
        victims = len(decision.victims)
        core.preempter.refuse(decision.preemptor, None, "benchmark", now)
    for obj in objs:
        core.apply_pod(EventType.DELETED, obj, now)
    core.refresh(now)
    return seconds, cpu, victims


def run(nodes: int, repetitions: int, seed: int, profile: bool) -> dict[str, Any]:
    rng = random.Random(seed)
    started = time.perf_counter()
    core, counts = build(nodes, rng)
    built = time.perf_counter() - started
    # As `gang-scheduler run` sets the collector once its caches are synced
    # (scheduler/kube/runner.py, collector_tuned_for): full collections would
    # otherwise walk the whole cache now and then, inside a timed cycle.
    gc.set_threshold(max(gc.get_threshold()[0], GC_YOUNG_THRESHOLD), *gc.get_threshold()[1:])
    gc.freeze()
    # The first search copies the snapshot for the what-if view kept afterwards
    # (scheduler/sharing/victim_fit.py): timed apart, as the cost of the first preemption.
    first, _, first_victims = cycle(core, preemptor(repetitions, rng), NOW - 1.0)
    profiler = cProfile.Profile() if profile else None
    rows = [(kind, gpus) for kind in KINDS for gpus in PREEMPTOR_SHAPES]
    timings: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    cpu: dict[tuple[str, int], list[float]] = {row: [] for row in rows}
    victims: dict[tuple[str, int], list[int]] = {row: [] for row in rows}
    for number in range(repetitions):
        gpus = PREEMPTOR_SHAPES[number % len(PREEMPTOR_SHAPES)]
        for kind in KINDS:
            objs = preemptor(number, rng, kind)
            if profiler:
                profiler.enable()
            seconds, cpu_seconds, chosen = cycle(core, objs, NOW + number, kind)
            if profiler:
                profiler.disable()
            timings[kind, gpus].append(seconds)
            cpu[kind, gpus].append(cpu_seconds)
            victims[kind, gpus].append(chosen)
    if profiler:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
    load = os.getloadavg()[0]

    def of(kind: str) -> dict[str, Any]:
        keys = [row for row in rows if row[0] == kind]
        return _summary(
            [t for row in keys for t in timings[row]],
            [t for row in keys for t in cpu[row]],
            [v for row in keys for v in victims[row]],
        )

    return {
        "nodes": nodes,
        "quotas": NAMESPACES,
        "running_gangs": counts["gangs"],
        "running_pods": counts["pods"],
        "build_seconds": round(built, 1),
        "first_cycle_ms": round(first * 1000, 2),
        "first_cycle_victims": first_victims,
        "load_average": round(load, 2),
        "by_kind": {
            kind: {
                "all": of(kind),
                "by_gpus_per_member": {
                    str(gpus): _summary(timings[kind, gpus], cpu[kind, gpus], victims[kind, gpus])
                    for gpus in PREEMPTOR_SHAPES
                },
            }
            for kind in KINDS
        },
    }


def _summary(values: list[float], cpu: list[float], victims: list[int]) -> dict[str, Any]:
    return {
        "p50_ms": round(statistics.median(values) * 1000, 2),
        "p99_ms": round(percentile(values, 0.99) * 1000, 2),
        "max_ms": round(max(values) * 1000, 2),
        "cpu_p50_ms": round(statistics.median(cpu) * 1000, 2),
        "cpu_p99_ms": round(percentile(cpu, 0.99) * 1000, 2),
        "cycles": len(values),
        "preempted": sum(1 for v in victims if v),
        "victims_max": max(victims),
    }


def print_table(result: dict[str, Any]) -> None:
    print(
        f"{result['nodes']} nodes, {result['quotas']} quotas, {result['running_gangs']} "
        f"running gangs ({result['running_pods']} pods), built in {result['build_seconds']} s; "
        f"first cycle (copies the snapshot for the what-if view): {result['first_cycle_ms']} ms; "
        f"load average {result['load_average']}"
    )
    print(
        "| preemptor: gang of 8 | p50 ms | p99 ms | max ms | CPU p50 / p99 ms "
        "| decisions | most victims |"
    )
    print("|---|---|---|---|---|---|---|")
    rows = []
    for kind, of_kind in result["by_kind"].items():
        rows.append((f"{kind}: all", of_kind["all"]))
        rows += [(f"{kind}: {g} GPUs each", s) for g, s in of_kind["by_gpus_per_member"].items()]
    for label, row in rows:
        print(
            f"| {label} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['max_ms']:.2f} "
            f"| {row['cpu_p50_ms']:.2f} / {row['cpu_p99_ms']:.2f} "
            f"| {row['preempted']}/{row['cycles']} | {row['victims_max']} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repetitions", type=int, default=150)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--profile", action="store_true", help="cProfile on stderr")
    args = parser.parse_args()
    result = run(args.nodes, args.repetitions, args.seed, args.profile)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
