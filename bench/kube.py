"""Kubernetes adapter benchmark: the whole scheduler (informers, loop, binder, events)
binding a burst of pending gangs through an API server.

By default the API emulator (tests/kubeapi) runs in its OWN process, so the CPU time and
the RSS measured here are the scheduler's alone. The benchmark seeds N nodes with 8 GPUs
each and P pending pods (1 GPU each) in gangs of G, then runs the scheduler in this
process and polls until every pod is bound. Measured from the scheduler's start to the
last bind: pods bound per second, API requests per bound pod (the emulator's counter, the
benchmark's own seeding excluded; its polling goes to `/_emulator/requests`, which is not
counted), scheduler CPU seconds per 1,000 pods (getrusage of this process) and the peak
RSS of this process.

`--running-pods R` adds R pods already running on the nodes (bound by another scheduler,
CPU and memory only, shaped like real Deployment pods: owner reference, labels, env,
probes, the service-account volume, kubelet status; about 4 KB of JSON each), spread
evenly: the cluster the scheduler must hold in memory (the issue's 5,000 nodes with
150,000 pods). On the emulator they are loaded directly (`/_emulator/seed/pods`, not
counted); on a cluster they are created and their status written.

With `--kubeconfig PATH` the nodes (plain Node objects, no kubelet) and pods are created
on that cluster instead, measured the same way (requests per pod is null there: a real
API server has no request counter we can read), and deleted again in any case.

The scheduler's client rate limits (`client.qps` and the feedback writes' `events.qps`)
are set far above what is reached (QPS 100,000), so the API server, not the client, is
the limit. `--scheduled-events` sets `events.scheduled`: the Normal Scheduled events per
pod (the default), per gang, or off.

    .venv/bin/python bench/kube.py --nodes 1000 --pods 10000 --gang 8
    .venv/bin/python bench/kube.py --nodes 1000 --pods 10000 --gang 8 --json
    .venv/bin/python bench/kube.py --nodes 1000 --pods 4096 --gang 8 --policy fgd-complete-reserve
    .venv/bin/python bench/kube.py --nodes 5000 --pods 10000 --gang 8 --running-pods 150000
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cache.pod import GANG_LABEL, MIN_MEMBER_ANNOTATION
from policies.profile import POLICIES
from scheduler.kube.client import ApiError, KubeClient, create_client
from scheduler.kube.runner import SchedulerRun, collector_tuned_for
from scheduler.process.config import SchedulerConfig, config_from_mapping
from scheduler.sim.objects import node_object

GPUS_PER_NODE = 8
NAMESPACE = "default"
# Every object the benchmark creates carries this label, so it can find them again.
BENCH_LABEL = "gang-scheduler.io/benchmark"
SCHEDULER_QPS = 100_000
SEED_CONCURRENCY = 64
RUNNING_SEED_BATCH = 2000
POLL_SECONDS = 0.05


def bench_node(name: str, run_id: str) -> dict[str, Any]:
    """A Node with 8 GPUs and a Ready condition (no kubelet will ever post one)."""
    obj = node_object(name, cpu="128", memory="1024Gi", gpus=GPUS_PER_NODE, model="A100")
    obj["metadata"]["labels"][BENCH_LABEL] = run_id
    del obj["metadata"]["resourceVersion"]
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Benchmark"}]
    return obj


def bench_pod(name: str, gang: str, size: int, scheduler: str, run_id: str) -> dict[str, Any]:
    """A pending gang member asking for one GPU."""
    requests = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {GANG_LABEL: gang, BENCH_LABEL: run_id},
            "annotations": {MIN_MEMBER_ANNOTATION: str(size)},
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": requests, "limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def running_pod(name: str, node: str, index: int, run_id: str) -> dict[str, Any]:
    """A pod of a Deployment, bound by another scheduler and running: the fields a real
    one carries (managedFields aside), so the informer parses what it would parse."""
    app = f"svc-{index % 500:03d}"
    started = "2026-11-01T08:00:00Z"
    ready = {"lastProbeTime": None, "lastTransitionTime": started, "status": "True"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"{run_id}-run-{index:08d}",
            "creationTimestamp": started,
            "generateName": f"{app}-7d9f8b6c5-",
            "labels": {"app": app, "pod-template-hash": "7d9f8b6c5", BENCH_LABEL: run_id},
            "annotations": {"kubectl.kubernetes.io/restartedAt": started},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-7d9f8b6c5",
                    "uid": f"{run_id}-rs-{index % 500:04d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "nodeName": node,
            "serviceAccountName": "default",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "securityContext": {},
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.test/{app}:1.4.2",
                    "imagePullPolicy": "IfNotPresent",
                    "args": ["--port=8080", "--log-level=info"],
                    "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                    "env": [
                        {"name": "APP", "value": app},
                        {"name": "REGION", "value": "eu-1"},
                        {
                            "name": "POD_IP",
                            "valueFrom": {
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}
                            },
                        },
                    ],
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "1Gi"},
                        "limits": {"cpu": "2", "memory": "2Gi"},
                    },
                    "readinessProbe": {
                        "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                        "periodSeconds": 10,
                        "timeoutSeconds": 1,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        }
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                }
            ],
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{why}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for why in ("not-ready", "unreachable")
            ],
            "volumes": [
                {
                    "name": "kube-api-access",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                    },
                }
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "hostIP": "10.1.0.1",
            "podIP": f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}",
            "startTime": started,
            "conditions": [
                {**ready, "type": kind}
                for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "image": f"registry.example.test/{app}:1.4.2",
                    "imageID": f"registry.example.test/{app}@sha256:{index:064x}",
                    "containerID": f"containerd://{index:064x}",
                    "state": {"running": {"startedAt": started}},
                    "lastState": {},
                }
            ],
        },
    }


def names(nodes: int, pods: int, gang: int, run_id: str) -> tuple[list[str], list[str]]:
    node_names = [f"bench-{run_id}-n{i:05d}" for i in range(nodes)]
    pod_names = [f"bench-{run_id}-g{i // gang:05d}-{i % gang}" for i in range(pods)]
    return node_names, pod_names


async def bounded(jobs: Iterable[Callable[[], Awaitable[None]]], limit: int) -> None:
    """Run `jobs` with at most `limit` in flight."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await job()

    await asyncio.gather(*(one(job) for job in jobs))


async def seed(
    client: KubeClient,
    node_names: list[str],
    pod_names: list[str],
    gang: int,
    scheduler: str,
    run_id: str,
) -> None:

    def create_node(name: str) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            await client.request_json("POST", "/api/v1/nodes", body=bench_node(name, run_id))

        return job

    def create_pod(index: int, name: str) -> Callable[[], Awaitable[None]]:
        group = f"bench-{run_id}-g{index // gang:05d}"
        body = bench_pod(name, group, gang, scheduler, run_id)

        async def job() -> None:
            await client.request_json("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=body)

        return job

    await bounded((create_node(n) for n in node_names), SEED_CONCURRENCY)
    await bounded((create_pod(i, n) for i, n in enumerate(pod_names)), SEED_CONCURRENCY)


def running_names(count: int, run_id: str) -> list[str]:
    return [f"bench-{run_id}-r{i:06d}" for i in range(count)]


async def seed_running(
    client: KubeClient, names: list[str], node_names: list[str], run_id: str, emulated: bool
) -> None:
    """Pods already running on the nodes, round robin. The emulator loads them directly;
    a cluster gets each created and its status written, as the kubelet would."""
    pods = (
        running_pod(name, node_names[i % len(node_names)], i, run_id)
        for i, name in enumerate(names)
    )
    if emulated:
        batch: list[dict[str, Any]] = []
        for pod in pods:
            batch.append(pod)
            if len(batch) == RUNNING_SEED_BATCH:
                await client.request_json("POST", "/_emulator/seed/pods", body={"items": batch})
                batch = []
        if batch:
            await client.request_json("POST", "/_emulator/seed/pods", body={"items": batch})
        return

    def create(pod: dict[str, Any]) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            status = pod.pop("status")
            del pod["metadata"]["uid"]
            path = f"/api/v1/namespaces/{NAMESPACE}/pods"
            created = await client.request_json("POST", path, body=pod)
            created["status"] = status
            name = created["metadata"]["name"]
            await client.request_json("PUT", f"{path}/{name}/status", body=created)

        return job

    await bounded((create(pod) for pod in pods), SEED_CONCURRENCY)


async def cleanup(client: KubeClient, node_names: list[str], pod_names: list[str]) -> None:
    """Delete what `seed` created (whatever of it exists); 404s are fine."""

    def delete(path: str) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            try:
                await client.request_json(
                    "DELETE", path, body={"kind": "DeleteOptions", "gracePeriodSeconds": 0}
                )
            except ApiError as error:
                if error.status != 404:
                    print(f"cleanup: {path}: {error}", file=sys.stderr)

        return job

    pods = (delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{n}") for n in pod_names)
    await bounded(pods, SEED_CONCURRENCY)
    await bounded((delete(f"/api/v1/nodes/{n}") for n in node_names), SEED_CONCURRENCY)


def fitting_pods(nodes: int, pods: int, gang: int) -> int:
    """How many of the pods can be bound: whole gangs, one GPU each. 1,000 nodes hold
    8,000 GPUs, so of 10,000 pods 8,000 bind and 250 gangs stay unschedulable (they
    still cost the scheduler attempts and the API their PodScheduled=False writes)."""
    return min(pods, nodes * GPUS_PER_NODE // gang * gang)


# --- counting ---------------------------------------------------------------------------
async def emulator_counts(client: KubeClient) -> tuple[Counter[str], int]:
    """The emulator's request counts by `verb resource[/subresource]`, and its binds."""
    answer = await client.request_json("GET", "/_emulator/requests")
    counts: Counter[str] = Counter()
    for row in answer["requests"]:
        sub = f"/{row['subresource']}" if row["subresource"] else ""
        counts[f"{row['verb']} {row['resource']}{sub}"] += int(row["count"])
    return counts, int(answer["binds"])


async def cluster_bound(client: KubeClient, run_id: str) -> int:
    """Pods of this run with a node (a real cluster: one list per poll)."""
    answer = await client.request_json(
        "GET",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        query=[("labelSelector", f"{BENCH_LABEL}={run_id}"), ("fieldSelector", "spec.nodeName!=")],
    )
    return len(answer.get("items") or [])


# --- the run ------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def bench_config(
    binding_concurrency: int, scheduled_events: str, policy: str = "binpack"
) -> SchedulerConfig:
    unlimited = {"qps": SCHEDULER_QPS, "burst": SCHEDULER_QPS}
    return config_from_mapping(
        {
            "http": {"address": "127.0.0.1", "port": free_port()},
            "leaderElection": {"enabled": False},
            "client": unlimited,
            "binding": {"concurrency": binding_concurrency},
            "events": {**unlimited, "scheduled": scheduled_events},
            "policy": {"name": policy},
        }
    )


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_rss_mib() -> float:
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


async def drive(
    run: SchedulerRun,
    client: KubeClient,
    args: argparse.Namespace,
    expected: int,
    bound_now: Callable[[], Awaitable[int]],
    emulated: bool,
) -> tuple[int, float, float, float, float, int, int]:
    """Run the scheduler until `expected` pods are bound, then stop it; returns the
    pods bound, the seconds from start to the last bind, the seconds to the caches'
    sync, CPU seconds, the CPU seconds of them spent until the sync (the initial
    lists), the feedback backlog at the last bind, and the exit code."""
    stop = asyncio.Event()
    cpu0 = cpu_seconds()
    start = time.perf_counter()
    task = asyncio.create_task(run.run(stop))
    synced_at: list[float] = []
    synced_cpu: list[float] = []

    async def note_sync() -> None:
        await run.informers.wait_synced()
        synced_at.append(time.perf_counter())
        synced_cpu.append(cpu_seconds())

    sync_watch = asyncio.create_task(note_sync())
    try:
        bound = 0
        deadline = start + args.timeout
        while bound < expected:
            if task.done():
                raise RuntimeError(f"the scheduler ended early (exit {task.result()})")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"only {bound}/{expected} bound after {args.timeout} s")
            await asyncio.sleep(POLL_SECONDS if emulated else 1.0)
            bound = await bound_now()
        seconds = time.perf_counter() - start
        sync = (synced_at[0] if synced_at else start) - start
        cpu = cpu_seconds() - cpu0
        sync_cpu = (synced_cpu[0] if synced_cpu else cpu0) - cpu0
        backlog = len(run.writes)
    finally:
        sync_watch.cancel()
        stop.set()
        code = await task
        await client.close()
    return bound, seconds, sync, cpu, sync_cpu, backlog, code


async def measure(args: argparse.Namespace, kubeconfig: str, emulated: bool) -> dict[str, Any]:
    run_id = f"{os.getpid() % 100000:05d}"
    node_names, pod_names = names(args.nodes, args.pods, args.gang, run_id)
    running = running_names(args.running_pods, run_id)
    expected = fitting_pods(args.nodes, args.pods, args.gang)
    config = bench_config(args.binding_concurrency, args.scheduled_events, args.policy)
    seeder = await create_client(kubeconfig, qps=None)
    try:
        began_seeding = time.perf_counter()
        await seed(seeder, node_names, [], args.gang, config.scheduler_name, run_id)
        await seed_running(seeder, running, node_names, run_id, emulated)
        await seed(seeder, [], pod_names, args.gang, config.scheduler_name, run_id)
        seeding = time.perf_counter() - began_seeding
        before = (await emulator_counts(seeder))[0] if emulated else Counter[str]()

        async def bound_now() -> int:
            if emulated:
                return (await emulator_counts(seeder))[1]
            return await cluster_bound(seeder, run_id)

        client = await create_client(kubeconfig, qps=SCHEDULER_QPS, burst=SCHEDULER_QPS)
        run = SchedulerRun(config, client)
        async with collector_tuned_for(run.informers):  # as `gang-scheduler run` does
            measured = await drive(run, client, args, expected, bound_now, emulated)
        # Taken after the stop: the write queue has drained the events of the last gangs.
        after = (await emulator_counts(seeder))[0] if emulated else Counter[str]()
        requests = after - before
        if not emulated:
            await cleanup(seeder, node_names, pod_names + running)
            node_names, pod_names, running = [], [], []
    finally:
        if not emulated and (node_names or pod_names or running):
            await cleanup(seeder, node_names, pod_names + running)
        await seeder.close()
    bound, seconds, sync, cpu, sync_cpu, backlog, code = measured
    return {
        "pods_per_s": round(bound / seconds, 1),
        # The same, counted from when the caches had synced (the initial lists are in).
        "pods_per_s_after_sync": round(bound / max(seconds - sync, 1e-9), 1),
        "sync_seconds": round(sync, 2),
        "requests_per_pod": round(sum(requests.values()) / bound, 3) if emulated else None,
        "cpu_s_per_1000_pods": round(cpu / bound * 1000, 3),
        # The same without the start-up lists (nodes, pods and the rest until the
        # caches synced): the cost of scheduling alone, which the start-up lists of a
        # big cluster would otherwise hide in a short run.
        "cpu_s_per_1000_pods_after_sync": round((cpu - sync_cpu) / bound * 1000, 3),
        "sync_cpu_seconds": round(sync_cpu, 2),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "nodes": args.nodes,
        "pods": args.pods,
        "running_pods": args.running_pods,
        "gang": args.gang,
        "binds": bound,
        "unschedulable_pods": args.pods - expected,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "seeding_seconds": round(seeding, 2),
        "scheduled_events": args.scheduled_events,
        "binding_concurrency": args.binding_concurrency,
        "requests": dict(sorted(requests.items())) if emulated else None,
        # Feedback writes (events, conditions) queued when the last pod was bound, and the
        # write queue's totals after the stop (it drains for at most 5 s).
        "feedback_backlog_at_last_bind": backlog,
        "feedback_writes": dataclasses.asdict(run.writes.stats),
        "exit_code": code,
    }


def start_emulator(
    history_size: int, kubeconfig: Path, *flags: str
) -> tuple[subprocess.Popen[str], str]:
    """`python -m tests.kubeapi` in its own process, writing a kubeconfig for itself at
    `kubeconfig`; returns it and its URL. This process never imports the emulator, so
    its peak RSS is the scheduler's (the emulator's CEL library alone is ~7 MiB)."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.kubeapi",
            "--port",
            "0",
            "--history-size",
            str(history_size),
            "--kubeconfig",
            str(kubeconfig),
            *flags,
        ],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("listening on "):
        process.kill()
        raise RuntimeError(f"the emulator did not start: {line!r}")
    return process, line.removeprefix("listening on ")


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of another process (Linux /proc), else None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the command name: state is field 3, utime 14 and stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.kubeconfig:
        return asyncio.run(measure(args, args.kubeconfig, emulated=False))
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        process, _ = start_emulator(max(100_000, 4 * (args.nodes + args.pods)), kubeconfig)
        try:
            result = asyncio.run(measure(args, str(kubeconfig), emulated=True))
            # The whole life of the emulator, seeding included: is the API server the limit?
            result["emulator_cpu_seconds_total"] = process_cpu_seconds(process.pid)
            return result
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def table(result: dict[str, Any]) -> str:
    rows = [
        ("nodes x GPUs", f"{result['nodes']} x {GPUS_PER_NODE}"),
        ("pods (gang size)", f"{result['pods']} ({result['gang']})"),
        ("pods running before the start", str(result["running_pods"])),
        ("bound", str(result["binds"])),
        ("left unschedulable (no room)", str(result["unschedulable_pods"])),
        ("seconds (start to last bind)", f"{result['seconds']:.2f}"),
        ("pods bound per second", f"{result['pods_per_s']:.0f}"),
        ("caches synced after (s)", f"{result['sync_seconds']:.2f}"),
        ("pods bound per second after the sync", f"{result['pods_per_s_after_sync']:.0f}"),
        (
            "API requests per bound pod",
            "n/a" if result["requests_per_pod"] is None else f"{result['requests_per_pod']:.3f}",
        ),
        ("scheduler CPU s per 1,000 pods", f"{result['cpu_s_per_1000_pods']:.3f}"),
        ("peak RSS MiB", f"{result['peak_rss_mib']:.0f}"),
        ("Scheduled events", result["scheduled_events"]),
    ]
    for name, count in (result["requests"] or {}).items():
        rows.append((f"  requests: {name}", str(count)))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--gang", type=int, default=8)
    parser.add_argument(
        "--running-pods", type=int, default=0, help="pods already running on the nodes (0)"
    )
    parser.add_argument("--kubeconfig", help="run on this cluster instead of the emulator")
    parser.add_argument(
        "--scheduled-events", choices=("pod", "gang", "off"), default="pod", help="default pod"
    )
    parser.add_argument(
        "--binding-concurrency", type=int, default=64, help="bind requests in flight (64)"
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after (s)")
    parser.add_argument(
        "--policy", default="binpack", choices=sorted(POLICIES), help="named policy (binpack)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.pods % args.gang or args.gang > GPUS_PER_NODE * args.nodes:
        parser.error("--pods must be a multiple of --gang, and a gang must fit the cluster")
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    result = run(args)
    print(json.dumps(result) if args.json else table(result))


if __name__ == "__main__":
    main()
