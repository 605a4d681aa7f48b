"""The built-in demo: a small mixed GPU cluster and a few learning tasks, scheduled by
the very same core as the real scheduler (cache, gangs, queue, planner), with binds
applied at once on a virtual clock.

It shows the behaviours this project exists for: a gang placed whole inside one
NVLink box, a parameter-server job spread over a PCIe rack on PIX pairs, notebooks
sharing one GPU, a job pinned to a GPU type, a gang that cannot fit waiting whole
(holding nothing), an incomplete gang saying what it waits for, and a refused request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cache.gpu import format_assignment
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from scheduler.sim.objects import ZONE_LABEL, node_object, nvlink_links, pcie_links


def _node(
    name: str, zone: str, model: str, gpus: int, links: list[list[str]] | None, cpu: str = "64"
) -> dict[str, Any]:
    return node_object(
        name,
        cpu=cpu,
        memory="512Gi",
        gpus=gpus,
        model=model,
        labels={ZONE_LABEL: zone},
        links=links,
        gpu_memory_mib=40960,
    )


def demo_nodes() -> list[dict[str, Any]]:
    nvlink = nvlink_links(8)
    return [
        _node("dgx-a1", "zone-a", "A100-SXM4-40GB", 8, nvlink),
        _node("dgx-a2", "zone-a", "A100-SXM4-40GB", 8, nvlink),
        _node("pcie-b1", "zone-b", "V100-PCIE-16GB", 4, pcie_links(4)),
        _node("pcie-b2", "zone-b", "V100-PCIE-16GB", 4, pcie_links(4)),
        _node("t4-b3", "zone-b", "T4", 4, None, cpu="32"),
        _node("cpu-c1", "zone-c", "", 0, None, cpu="96"),
    ]


def _pod(
    name: str,
    gang: str | None,
    min_member: int | None,
    *,
    cpu: str = "4",
    gpus: int = 0,
    vgpu: int = 0,
    product: str | None = None,
    created: int = 0,
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": "16Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    if vgpu:
        requests["nvidia.com/vgpu"] = str(vgpu)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ml",
        "uid": f"uid-{name}",
        "resourceVersion": "1",
        "labels": {},
        "annotations": {},
        "creationTimestamp": f"2026-11-01T00:{created:02d}:00Z",
    }
    if gang:
        meta["labels"]["scheduling.x-k8s.io/pod-group"] = gang
    if min_member is not None:
        meta["annotations"]["gang-scheduler.io/min-member"] = str(min_member)
    spec: dict[str, Any] = {
        "schedulerName": "gang-scheduler",
        "containers": [{"name": "main", "resources": {"requests": requests}}],
    }
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def demo_pods() -> list[dict[str, Any]]:
    pods = [_pod(f"resnet-w{i}", "resnet", 4, gpus=2, created=1) for i in range(4)]
    pods += [_pod(f"bert-ps{i}", "bert", 6, cpu="16", created=2) for i in range(2)]
    pods += [
        _pod(f"bert-w{i}", "bert", 6, gpus=2, product="V100-PCIE-16GB", created=2) for i in range(4)
    ]
    pods += [
        _pod("notebook-alice", None, None, vgpu=300, product="T4", created=3),
        _pod("notebook-bob", None, None, vgpu=500, product="T4", created=3),
    ]
    pods += [_pod(f"llm-w{i}", "llm", 2, gpus=8, created=4) for i in range(2)]
    pods += [_pod(f"gpt-w{i}", "gpt", 4, gpus=1, created=5) for i in range(3)]
    pods += [_pod("odd-share", None, None, vgpu=1500, created=6)]
    return pods


@dataclass
class DemoRow:
    gang: str
    pod: str
    node: str
    devices: str
    links: str


@dataclass
class DemoReport:
    placed: list[DemoRow] = field(default_factory=list)
    waiting: list[tuple[str, str]] = field(default_factory=list)


def _link_summary(core: SchedulingCore, node_name: str, shares: tuple[tuple[int, int], ...]) -> str:
    node = core.cache.node(node_name)
    if node is None or len(shares) < 2:
        return "" if len(shares) < 2 else "unknown"
    if node.pair_scores is None:
        return "unknown"
    indices = [i for i, _ in shares]
    worst = min(node.pair_scores[a][b] for a in indices for b in indices if a < b)
    names = {10: "SYS", 20: "NODE", 30: "PHB", 40: "PXB", 50: "PIX", 60: "BOARD"}
    return names.get(worst, f"NVLink x{worst // 100}")


def run_demo() -> DemoReport:
    core = SchedulingCore(build_profile("binpack"))
    clock = 0.0
    for node in demo_nodes():
        core.apply_node("ADDED", node, clock)
    for pod in demo_pods():
        core.apply_pod("ADDED", pod, clock)
    report = DemoReport()
    unschedulable: dict[str, str] = {}
    # Virtual time: binds land at once; a gang that failed is retried when its backoff
    # allows, and the demo ends once nothing is due within a minute.
    while True:
        attempt = core.schedule_next(clock)
        if attempt is None:
            wakeup = core.queue.next_wakeup(clock)
            if wakeup is None or wakeup > clock + 60:
                break
            clock = wakeup
            continue
        if isinstance(attempt.result, Plan):
            unschedulable.pop(attempt.gang.key, None)
            names = {p.uid: p.name for p in attempt.gang.pending}
            for placement in attempt.result.placements:
                core.bound(placement)
                report.placed.append(
                    DemoRow(
                        attempt.gang.key,
                        names[placement.pod_uid],
                        placement.node,
                        format_assignment(placement.shares) or "-",
                        _link_summary(core, placement.node, placement.shares),
                    )
                )
        else:
            unschedulable[attempt.gang.key] = attempt.result.message
    report.waiting = sorted(unschedulable.items())
    for gang, message in sorted(core.waiting(), key=lambda item: item[0].key):
        details = [message, *(problem.message for problem in gang.problems)]
        report.waiting.append((gang.key, "; ".join(details)))
    return report
