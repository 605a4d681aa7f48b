"""Which domain a rack-required gang gets, compared over time (issue 30): the choices
of scheduler/planner/required_domain.py: this scheduler's default (the smallest domain
that holds the gang, then the least free), the learnt-demand weighting before it,
least-free best fit (as Kueue's TAS) and first fit over domains in name order (as a
per-domain placement generator).

Not the time-based simulator (`gang-scheduler simulate` has no topology workloads yet):
a discrete-event loop over the same planner, cache and snapshot.

The cluster: 24 racks of 8-GPU nodes in three sizes (8 racks each of 4, 8 and 16
nodes: 1,792 GPUs). The workload (one seed, the same for the three): gangs arrive as
a Poisson stream, a third of them requiring one rack (`topology.kubernetes.io/rack`),
of 8 GPUs (2 members of 4), 16, 32, 64 or 128 GPUs (members of 8), the larger ones
rarer, each running an exponential time; offered load about 90% of the GPUs. The
scheduler is a plain FIFO with backfill: at each arrival and departure the waiting gangs
are planned in arrival order, each placed if it fits (the first 16 tried per event).

Figures, per choice: `stranded`, the time-average number of rack-required gangs
waiting while the cluster has enough free GPUs in total but no rack does; the p95 wait
of rack-required gangs; GPU utilisation (busy GPU-seconds over GPU-seconds, until the
last arrival).

    .venv/bin/python bench/topology_choice.py            # --gangs, --seed, --json
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.planner import percentile, pod_object
from cache.cluster import ClusterCache, EventType
from cache.snapshot import Snapshot
from cache.topology_requirement import TopologyRequirement
from policies.profile import build_profile
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.required_domain import DomainChoice
from scheduler.planner.result import Plan
from scheduler.sim.objects import node_object

RACK = "topology.kubernetes.io/rack"
RACK_SIZES = (4,) * 8 + (8,) * 8 + (16,) * 8
GPUS_PER_NODE = 8
# GPUs per gang and how often (the larger rarer), as (gpus, weight).
SIZES = ((8, 8), (16, 6), (32, 4), (64, 2), (128, 1))
REQUIRED_SHARE = 1 / 3
MEAN_RUN = 600.0
LOAD = 0.9
TRIED_PER_EVENT = 16
CHOICES: tuple[DomainChoice, ...] = ("smallest", "learnt", "best-fit", "first-fit")
REQUIREMENT = TopologyRequirement(required_key=RACK, source="bench")


def build_cluster() -> tuple[ClusterCache, dict[str, int]]:
    cache = ClusterCache()
    racks: dict[str, int] = {}
    index = 0
    for rack, size in enumerate(RACK_SIZES):
        name = f"rack-{rack:02d}"
        racks[name] = size * GPUS_PER_NODE
        for _ in range(size):
            node = node_object(
                f"node-{index:04d}",
                cpu="128",
                memory="1024Gi",
                gpus=GPUS_PER_NODE,
                labels={RACK: name},
            )
            cache.apply_node(EventType.ADDED, node)
            index += 1
    return cache, racks


def workload(gangs: int, seed: int) -> list[tuple[float, int, bool, float]]:
    """(arrival, GPUs, requires a rack, run time) per gang."""
    rng = random.Random(seed)
    total = sum(RACK_SIZES) * GPUS_PER_NODE
    sizes, weights = zip(*SIZES, strict=True)
    mean_gpus = sum(s * w for s, w in SIZES) / sum(weights)
    rate = LOAD * total / (mean_gpus * MEAN_RUN)
    now, out = 0.0, []
    for _ in range(gangs):
        now += rng.expovariate(rate)
        gpus = rng.choices(sizes, weights)[0]
        out.append((now, gpus, rng.random() < REQUIRED_SHARE, rng.expovariate(1 / MEAN_RUN)))
    return out


def members(number: int, gpus: int) -> list[dict[str, Any]]:
    per, count = (4, 2) if gpus == 8 else (8, gpus // 8)
    name = f"g{number:05d}"
    return [
        pod_object(f"{name}-{i}", gang=name, size=count, gpus=per, vgpu=0, model=None)
        for i in range(count)
    ]


def run(choice: DomainChoice, gangs: int, seed: int) -> dict[str, Any]:
    cache, racks = build_cluster()
    total = sum(racks.values())
    planner = Planner(build_profile("binpack"), explain=False)
    planner.domain_choice = choice
    snapshot = Snapshot()
    arrivals = workload(gangs, seed)
    events: list[tuple[float, int, str, int]] = [
        (t, i, "arrive", i) for i, (t, *_) in enumerate(arrivals)
    ]
    heapq.heapify(events)
    waiting: list[int] = []
    pods: dict[int, list[dict[str, Any]]] = {}
    waits: list[float] = []
    busy = 0  # GPUs
    area_busy = area_stranded = 0.0
    last = 0.0
    horizon = arrivals[-1][0]
    while events:
        now, _, kind, number = heapq.heappop(events)
        if now > horizon and not waiting:
            break
        span = min(now, horizon) - min(last, horizon)
        if span > 0:
            area_busy += busy * span
            area_stranded += _stranded(cache, snapshot, waiting, arrivals, total, busy) * span
        last = now
        if kind == "arrive":
            pods[number] = members(number, arrivals[number][1])
            for obj in pods[number]:
                cache.apply_pod(EventType.ADDED, obj)
            waiting.append(number)
        else:
            for obj in pods.pop(number):
                cache.apply_pod(EventType.DELETED, obj)
            busy -= arrivals[number][1]
        for candidate in list(waiting[:TRIED_PER_EVENT]):
            arrival, gpus, required, runs = arrivals[candidate]
            uids = [o["metadata"]["uid"] for o in pods[candidate]]
            infos = [p for u in uids if (p := cache.pod(u)) is not None]
            gang = next(iter(assemble_gangs(infos, {}, "gang-scheduler").gangs.values()))
            gang.topology = REQUIREMENT if required else None
            cache.update_snapshot(snapshot)
            result = planner.plan(gang, snapshot)
            if isinstance(result, Plan):
                cache.assume(result.placements, now=0)
                for placement in result.placements:
                    cache.confirm(placement.pod_uid, placement.node, placement.shares)
                waiting.remove(candidate)
                busy += gpus
                if required:
                    waits.append(now - arrival)
                heapq.heappush(events, (now + runs, len(arrivals) + candidate, "leave", candidate))
    return {
        "choice": choice,
        "stranded": round(area_stranded / horizon, 3),
        "p95_wait_required_s": round(percentile(waits, 0.95), 1) if waits else None,
        "mean_wait_required_s": round(statistics.mean(waits), 1) if waits else None,
        "utilisation": round(area_busy / (total * horizon), 4),
        "required_placed": len(waits),
    }


def _stranded(
    cache: ClusterCache,
    snapshot: Snapshot,
    waiting: list[int],
    arrivals: list[tuple[float, int, bool, float]],
    total: int,
    busy: int,
) -> int:
    """Rack-required gangs waiting while enough GPUs are free in total, in no rack."""
    required = [arrivals[n][1] for n in waiting if arrivals[n][2]]
    if not required:
        return 0
    cache.update_snapshot(snapshot)
    free: dict[str, int] = {}
    for node in snapshot.nodes.values():
        rack = node.labels[RACK]
        free[rack] = free.get(rack, 0) + node.free_gpu_milli // 1000
    fullest = max(free.values())
    in_total = total - busy
    return sum(1 for gpus in required if gpus <= in_total and gpus > fullest)


def _mean(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs' figures averaged (the choice kept)."""
    out: dict[str, Any] = {"choice": runs[0]["choice"], "runs": len(runs)}
    for field in ("stranded", "p95_wait_required_s", "mean_wait_required_s", "utilisation"):
        values = [r[field] for r in runs if r[field] is not None]
        out[field] = round(statistics.mean(values), 4) if values else None
    out["required_placed"] = sum(r["required_placed"] for r in runs)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gangs", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=1, help="runs averaged (seed, seed+1...)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [
        _mean([run(choice, args.gangs, args.seed + k) for k in range(args.seeds)])
        for choice in CHOICES
    ]
    if args.json:
        print(json.dumps(results))
        return 0
    print(
        "| domain choice | stranded (mean gangs) | p95 wait, rack-required (s) "
        "| mean wait (s) | GPU utilisation | rack-required placed |"
    )
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['choice']} | {r['stranded']:.3f} | {r['p95_wait_required_s']:.1f} | "
            f"{r['mean_wait_required_s']:.1f} | {r['utilisation']:.1%} | {r['required_placed']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
