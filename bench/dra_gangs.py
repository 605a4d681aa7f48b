"""The planner benchmark's DRA mode (`bench/planner.py --dra`): gangs of 8 whose
members each ask for 1-2 GPUs through a ResourceClaim, against gangs of 8 asking as
many GPUs through the annotation model (`nvidia.com/gpu`), in the same process on the
same filling cluster, so the two percentiles compare.

The cluster is bench/planner.py's (5,000 nodes, 8 annotation GPUs each, about half
busy), plus, per node, one ResourceSlice of 8 DRA GPUs of driver gpu.example.com
(productName, memory, and the standard `resource.kubernetes.io/pcieRoot` attribute, as
the vendors' drivers publish it: 4 GPUs on each of two roots), about
40% of them allocated to claims of running pods. One DeviceClass selects the driver
with CEL; each DRA member's claim asks `count` 1 or 2 with a CEL request selector on
memory and `matchAttribute` on the PCIe root. Each plan goes through what the
scheduling core calls (`plan_with_claims`: claims resolved, each member's reach over
every node, the gang's devices chosen with its nodes); its allocations are then held in
the DraCache as the core's assume holds them, so the devices fill as the nodes do.
Both kinds of gang are planned through the same call with the same DraCache (the core
resolves DRA for every gang once a DeviceClass exists). The garbage collector is set as
the scheduler process sets it (scheduler/kube/runner.py, collector_tuned_for).
"""

from __future__ import annotations

import hashlib
import random
import statistics
import time
from typing import Any

from bench.planner import MODELS, build_cluster, pod_object
from bench.planner import percentile as _percentile
from cache.cluster import ClusterCache, EventType
from cache.dra.store import DraCache
from cache.snapshot import Snapshot
from cache.volumes import VolumeCache
from policies.profile import build_profile
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, Unschedulable
from scheduler.planner.volume_claims import plan_with_claims
from scheduler.sim.replay import collector_tuned

DRIVER = "gpu.example.com"
DEVICES_PER_NODE = 8
GANG_SIZE = 8
CLASS_SELECTOR = f'device.driver == "{DRIVER}"'
REQUEST_SELECTOR = f'device.attributes["{DRIVER}"].memory >= 16'
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
SAME_ROOT = {"matchAttribute": PCIE_ROOT}
NAMESPACE = "bench"
MEMORY_GIB = {"A100": 80, "V100": 32, "T4": 16}


def slice_object(node_index: int) -> dict[str, Any]:
    """One node's 8 DRA GPUs, 4 per PCIe root."""
    node = f"node-{node_index:05d}"
    model = MODELS[node_index % len(MODELS)]
    devices = [
        {
            "name": f"gpu-{number}",
            "attributes": {
                "productName": {"string": model},
                "memory": {"int": MEMORY_GIB[model]},
                PCIE_ROOT: {"string": f"pci0000:{number // 4:02x}"},
            },
        }
        for number in range(DEVICES_PER_NODE)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus", "resourceVersion": "1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def class_object() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER, "resourceVersion": "1"},
        "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]},
    }


def claim_object(
    name: str, count: int, allocated: list[tuple[str, str]] | None = None
) -> dict[str, Any]:
    """A claim of `count` GPUs on one PCIe root; `allocated`: (pool, device) pairs it
    already holds (a running pod's claim)."""
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"claim-{name}",
            "resourceVersion": "1",
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "count": count,
                            "selectors": [{"cel": {"expression": REQUEST_SELECTOR}}],
                        },
                    }
                ],
                "constraints": [SAME_ROOT],
            }
        },
    }
    if allocated:
        results = [
            {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}
            for pool, device in allocated
        ]
        obj["status"] = {"allocation": {"devices": {"results": results}}}
    return obj


def build_devices(nodes: int, rng: random.Random) -> DraCache:
    """Slices, the class, and running pods' claims holding about 40% of the devices."""
    dra = DraCache()
    dra.apply_class("ADDED", class_object())
    for index in range(nodes):
        dra.apply_slice("ADDED", slice_object(index))
        pool = f"node-{index:05d}"
        device = 0
        for number in range(rng.randint(0, 3)):
            count = min(rng.choice((1, 2, 4)), DEVICES_PER_NODE - device)
            if count <= 0:
                break
            held = [(pool, f"gpu-{d}") for d in range(device, device + count)]
            dra.apply_claim("ADDED", claim_object(f"run-{index}-{number}", count, held))
            device += count
    return dra


def dra_gang(number: int, rng: random.Random, dra: DraCache) -> list[dict[str, Any]]:
    """A gang of 8 pods, each with its own claim of 1 or 2 GPUs (created first, as the
    resourceclaim controller would from a template)."""
    name = f"dra-{number:05d}"
    count = rng.choice((1, 2))
    pods = []
    for member in range(GANG_SIZE):
        claim = f"{name}-{member}"
        dra.apply_claim("ADDED", claim_object(claim, count))
        pod = pod_object(f"{name}-{member}", gang=name, size=GANG_SIZE, gpus=0, vgpu=0, model=None)
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        pods.append(pod)
    return pods


def annotation_gang(number: int, rng: random.Random) -> list[dict[str, Any]]:
    """A gang of 8 pods asking 1 or 2 whole GPUs through nvidia.com/gpu."""
    name = f"ann-{number:05d}"
    gpus = rng.choice((1, 2))
    return [
        pod_object(f"{name}-{i}", gang=name, size=GANG_SIZE, gpus=gpus, vgpu=0, model=None)
        for i in range(GANG_SIZE)
    ]


def plan_and_hold(
    cache: ClusterCache,
    snapshot: Snapshot,
    planner: Planner,
    dra: DraCache,
    objs: list[dict[str, Any]],
) -> tuple[float, Plan | Unschedulable, float]:
    """Add the gang's pods, plan it as the core does (timed: snapshot update and
    planning, in wall-clock and in this thread's CPU seconds), then hold its devices
    and bind its members."""
    for obj in objs:
        cache.apply_pod(EventType.ADDED, obj)
    pods = [cache.pod(obj["metadata"]["uid"]) for obj in objs]
    gang = next(iter(assemble_gangs([p for p in pods if p], {}, "gang-scheduler").gangs.values()))
    volumes = VolumeCache()
    start, cpu_start = time.perf_counter(), time.thread_time()
    cache.update_snapshot(snapshot)
    result = plan_with_claims(planner, gang, snapshot, volumes, cache, dra=dra)
    seconds = time.perf_counter() - start
    cpu = time.thread_time() - cpu_start
    if isinstance(result, Plan):
        dra.assume([(c.key, c.allocation) for c in result.claims if c.allocation is not None])
        cache.assume(result.placements, now=0)
        for placement in result.placements:
            cache.confirm(placement.pod_uid, placement.node, placement.shares)
    return seconds, result, cpu


def check_devices(result: Plan, dra: DraCache) -> None:
    """The benchmark trusts no plan: each member's claim holds 1-2 devices on one PCIe
    root of the member's own node."""
    nodes = {p.pod_uid: p.node for p in result.placements}
    for claim in result.claims:
        assert claim.allocation is not None, claim.key
        pools = {r.pool for r in claim.allocation.results}
        [consumer] = claim.reserved_for
        if pools != {nodes[consumer.uid]}:
            raise AssertionError(f"{claim.key}: devices on {pools}, pod on {nodes[consumer.uid]}")
        roots = {int(r.device.split("-")[1]) // 4 for r in claim.allocation.results}
        if len(roots) != 1:
            raise AssertionError(f"{claim.key}: devices on two PCIe roots")
    taken = [d for c in result.claims if c.allocation for d in c.allocation.charged()]
    if len(set(taken)) != len(taken):
        raise AssertionError(f"a device taken twice by plan {result.gang_key}")
    del dra


def plan_text(result: Plan | Unschedulable) -> str:
    """Every decision of a planning call, as text: each member's node and GPU shares,
    each claim's devices and users; or that the gang waits and why. The benchmark
    hashes these so that two versions of the planner run on the same seed can be told
    apart by their decisions as well as their speed."""
    if isinstance(result, Unschedulable):
        return f"{result.gang_key} waits: {result.message}"
    lines = [f"{result.gang_key} by {result.attempt}"]
    for p in result.placements:
        shares = ",".join(f"{index}:{milli}" for index, milli in p.shares)
        lines.append(f" {p.pod_uid} on {p.node} gpus {shares}")
    for claim in result.claims:
        devices = (
            ",".join(f"{r.request}={r.pool}/{r.device}" for r in claim.allocation.results)
            if claim.allocation is not None
            else "kept"
        )
        users = ",".join(c.uid for c in claim.reserved_for)
        lines.append(f" claim {claim.key} {devices} for {users}")
    return "\n".join(lines)


def run_dra(nodes: int, gangs: int, seed: int) -> dict[str, Any]:
    """`gangs` gangs of each kind, alternating, against one filling cluster."""
    rng = random.Random(seed)
    cache = build_cluster(nodes, rng)
    dra = build_devices(nodes, rng)
    planner = Planner(build_profile("binpack"))
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    timings: dict[str, list[float]] = {"annotation": [], "dra": []}
    # CPU seconds of the same spans: on a shared machine, wall-clock time also counts
    # the time other processes held the core.
    cpu_times: dict[str, list[float]] = {"annotation": [], "dra": []}
    placed = dict.fromkeys(timings, 0)
    decisions = hashlib.sha256()
    # The collector as the scheduler process sets it once its caches have synced
    # (scheduler/kube/runner.py): the cluster built above frozen out of full
    # collections, young collections every 10,000 allocations.
    with collector_tuned():
        for number in range(2 * gangs):
            kind = "dra" if number % 2 else "annotation"
            objs = dra_gang(number, rng, dra) if kind == "dra" else annotation_gang(number, rng)
            seconds, result, cpu = plan_and_hold(cache, snapshot, planner, dra, objs)
            timings[kind].append(seconds)
            cpu_times[kind].append(cpu)
            decisions.update(plan_text(result).encode() + b"\n")
            if isinstance(result, Plan):
                placed[kind] += 1
                if kind == "dra":
                    check_devices(result, dra)
    return {
        "nodes": nodes,
        "gang_size": GANG_SIZE,
        "dra_devices_per_node": DEVICES_PER_NODE,
        # sha256 of every plan in order (plan_text): equal digests, equal decisions.
        "plans_sha256": decisions.hexdigest(),
        **{
            kind: {
                "p50_ms": round(statistics.median(values) * 1000, 3),
                "p99_ms": round(_percentile(values, 0.99) * 1000, 3),
                "cpu_p50_ms": round(statistics.median(cpu_times[kind]) * 1000, 3),
                "cpu_p99_ms": round(_percentile(cpu_times[kind], 0.99) * 1000, 3),
                "placed": placed[kind],
                "attempted": len(values),
            }
            for kind, values in timings.items()
        },
    }


def print_dra(result: dict[str, Any]) -> None:
    print(
        "| nodes | gangs of 8, 1-2 GPUs each | p50 ms | p99 ms | CPU p50 ms | CPU p99 ms | placed |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind in ("annotation", "dra"):
        row = result[kind]
        print(
            f"| {result['nodes']} | {kind} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} "
            f"| {row['cpu_p50_ms']:.2f} | {row['cpu_p99_ms']:.2f} "
            f"| {row['placed']}/{row['attempted']} |"
        )
    print(f"\nplans (sha256 of every decision, in order): {result['plans_sha256']}")
