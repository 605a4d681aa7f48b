"""How long a relist after 410 Gone takes, and whether scheduling stalls meanwhile
(issue 31): a scheduler with N running pods, its pods watch expired by the emulator (an
ERROR event with a 410 Expired Status, as after etcd's compaction), then the relist.

The emulator runs in its own process (bench/kube.py's start_emulator), so its work of
serving the list is not counted as the scheduler's. The scheduler runs in this process
(SchedulerRun); a helper task wakes its loop every `--wake-ms`, as a busy cluster's
changes would, so a cycle is due all the time and the longest gap between two completed
cycles during the relist is the longest the scheduler stopped scheduling.

    .venv/bin/python -m bench.relist_stall --pods 20000 50000
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import kube as kube_bench
from scheduler.cycle.core import Reconciliation
from scheduler.kube.client import create_client
from scheduler.kube.runner import SchedulerRun

NODES = 500
RUN_ID = "rs"


async def relist_once(kubeconfig: Path, pods: int, wake_ms: float) -> dict[str, Any]:
    seeder = await create_client(str(kubeconfig), qps=None)
    node_names = [f"bench-{RUN_ID}-n{i:05d}" for i in range(NODES)]
    await kube_bench.seed(seeder, node_names, [], 1, "gang-scheduler", RUN_ID)
    await kube_bench.seed_running(
        seeder, kube_bench.running_names(pods, RUN_ID), node_names, RUN_ID, emulated=True
    )
    client = await create_client(str(kubeconfig), qps=None)
    run = SchedulerRun(kube_bench.bench_config(16, "off"), client)
    cycles: list[float] = []
    completed = run.metrics.cycle_completed

    def cycle_completed() -> None:
        cycles.append(time.monotonic())
        completed()

    run.metrics.cycle_completed = cycle_completed  # type: ignore[method-assign]
    informer = run.informers.pods
    marks: dict[str, float] = {}
    begin = informer._begin_relist

    def begin_relist() -> Reconciliation:
        marks.setdefault("first_read", time.monotonic())
        return begin()

    informer._begin_relist = begin_relist
    stop = asyncio.Event()
    task = asyncio.create_task(run.run(stop))

    async def wake() -> None:
        while True:
            run._wake.set()
            await asyncio.sleep(wake_ms / 1000)

    waker = asyncio.create_task(wake())
    try:
        await asyncio.wait_for(run.informers.wait_synced(), 600)
        # Past healthy_after, so the informer relists at once rather than backing off.
        await asyncio.sleep(informer.options.healthy_after + 1)
        marks.clear()
        expired_at = time.monotonic()
        answer = await seeder.request_json("POST", "/_emulator/expire/pods")
        assert answer["expired"] == 1, answer
        while informer.relists < 2:
            await asyncio.sleep(0.001)
        done = time.monotonic()
        first = marks["first_read"]
        during = [first, *(c for c in cycles if first < c < done), done]
        gap = max(b - a for a, b in itertools.pairwise(during))
        return {
            "pods": pods,
            "relist_s": round(done - expired_at, 3),
            "reconcile_s": round(done - first, 3),
            "cycles_during": len(during) - 2,
            "longest_cycle_gap_ms": round(gap * 1000, 1),
        }
    finally:
        waker.cancel()
        stop.set()
        await asyncio.wait_for(task, 120)
        await client.close()
        await seeder.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[20_000, 50_000])
    parser.add_argument("--wake-ms", type=float, default=10.0)
    args = parser.parse_args()
    for pods in args.pods:
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = Path(tmp) / "kubeconfig"
            emulator, _ = kube_bench.start_emulator(1000, kubeconfig)
            try:
                print(json.dumps(asyncio.run(relist_once(kubeconfig, pods, args.wake_ms))))
            finally:
                emulator.terminate()
                emulator.wait(30)


if __name__ == "__main__":
    main()
