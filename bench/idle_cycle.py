"""Idle-cycle benchmark: what one wake-up of the scheduling loop costs when nothing
is due, behind thousands of gangs that fit nowhere.

The loop wakes on every batch of watch events, including the ones its own writes
cause (PodScheduled=False conditions, PodGroup statuses: up to `events.qps`, 50 a
second by default). Each wake-up runs the cycle's bookkeeping as `SchedulerRun._cycle`
does: ask the queue (nothing due), bring gangs up to date, the
waiting messages, the problems to publish, pruning, the feedback tick and the
partial-gang review. Timed per cycle, with the feedback writes discarded.

    .venv/bin/python bench/idle_cycle.py                 # 3,000 unschedulable pods
    .venv/bin/python bench/idle_cycle.py --pods 10000 --cycles 100
    .venv/bin/python bench/idle_cycle.py --nodes 5000   # the GPU-fault look's cost

It also times the GPU-fault look (scheduler/kube/gpu_faults.py) after one node changed:
it reads the nodes changed since the last look, so its cost does not grow with
`--nodes`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cache.cluster import EventType
from cache.pod import PodInfo
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.kube.binder import PartialGangs
from scheduler.kube.events import FeedbackRecorder, Write, WriteQueue
from scheduler.kube.gpu_faults import GpuFaultNotifier
from scheduler.sim.objects import node_object


class _Discard(WriteQueue):
    """A write queue that drops every write (no API server here)."""

    def __init__(self) -> None:  # no client, no workers
        pass

    def submit(self, key: Hashable, write: Write) -> bool:
        return True


def _pod(name: str) -> dict[str, Any]:
    """A pod asking for 16 GPUs: no 8-GPU node takes it."""
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "resourceVersion": "1",
        },
        "spec": {
            "schedulerName": "gang-scheduler",
            "containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "16"}}}],
        },
        "status": {"phase": "Pending"},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--cycles", type=int, default=200)
    args = parser.parse_args()

    core = SchedulingCore(build_profile())
    for i in range(args.nodes):
        core.apply_node(
            EventType.ADDED, node_object(f"n{i}", cpu="64", memory="512Gi", gpus=8), 0.0
        )
    for i in range(args.pods):
        core.apply_pod(EventType.ADDED, _pod(f"huge-{i}"), 0.0)
    tried = 0
    while core.schedule_next(0.0) is not None:
        tried += 1
    recorder = FeedbackRecorder(_Discard())
    partial = PartialGangs()
    began = time.perf_counter()
    for _ in range(args.cycles):
        now = 1.0
        assert core.schedule_next(now) is None
        core.refresh(now)
        core.waiting()
        recorder.problems(core.gangs.values(), now)
        recorder.prune(core.gangs)
        recorder.tick(now)
        partial.review(core.gangs, now)
    seconds = (time.perf_counter() - began) / args.cycles
    print(f"unschedulable gangs tried once       {tried}")
    print(f"ms per idle cycle                    {seconds * 1000:.2f}")
    print(f"CPU share at 50 wake-ups a second    {min(1.0, seconds * 50):.0%}")
    print(f"ms per GPU-fault look after a change {_fault_look(core, args.cycles) * 1000:.3f}")


def _fault_look(core: SchedulingCore, cycles: int) -> float:
    """Seconds one GPU-fault look takes (GpuFaultNotifier.check, run every cycle by the
    runner) when one node changed since the last look (a pod started on it), with no
    fault anywhere: the common case on a busy cluster."""
    notifier = GpuFaultNotifier()
    told: list[str] = []

    def warn(pod: PodInfo, reason: str, message: str) -> None:
        told.append(message)

    notifier.check(core.cache, warn)  # the first look reads every node once
    nodes = [node.name for node in core.cache.nodes()]
    spent = 0.0
    for cycle in range(cycles):
        running = _pod(f"running-{cycle}")
        running["spec"]["nodeName"] = nodes[cycle % len(nodes)]
        running["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "10m"}
        core.cache.apply_pod(EventType.ADDED, running)
        began = time.perf_counter()
        notifier.check(core.cache, warn)
        spent += time.perf_counter() - began
    assert not told
    return spent / cycles


if __name__ == "__main__":
    main()
