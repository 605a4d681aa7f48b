"""deploy/examples/: every object is valid, and every example learning task is placed whole
by the real scheduling core, built from the deployed configuration, on a small mixed
cluster (each example on a fresh one)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from cache.pod import GANG_LABEL
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from scheduler.process.config import build_core_from, parse_config
from scheduler.sim.objects import ZONE_LABEL, node_object, nvlink_links, pcie_links
from tests.deploy.render import DEPLOY, one, rendered, scheduler_config_text

EXAMPLES = DEPLOY / "examples"
A100 = "NVIDIA-A100-SXM4-80GB"


def example(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((EXAMPLES / name).read_text()) if doc]


def example_files() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def test_there_are_the_four_examples() -> None:
    assert [p.name for p in example_files()] == [
        "gpu-type-pinned.yaml",
        "notebook-fractional.yaml",
        "ps-worker.yaml",
        "topology-8gpu.yaml",
    ]


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_every_example_object_is_valid(path: Path) -> None:
    crd = one(rendered(), "CustomResourceDefinition", "podgroups.scheduling.x-k8s.io")
    podgroup_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    objects = example(path.name)
    assert objects
    for obj in objects:
        if obj["kind"] == "PodGroup":
            assert obj["apiVersion"] == f"{crd['spec']['group']}/v1alpha1"
            jsonschema.validate(obj, podgroup_schema)
        else:
            kubernetes_validate.validate(obj, "1.32", strict=True)
        for pod in pods_of(obj):
            assert pod["spec"]["schedulerName"] == "gang-scheduler"


# --- through the scheduling core ---------------------------------------------------------
def cluster() -> list[dict[str, Any]]:
    """An NVLink box, an 8-GPU PCIe box (SYS across its two halves), two 4-GPU boxes and
    a CPU node, in three zones."""

    def node(name: str, zone: str, model: str, gpus: int, links: Any) -> dict[str, Any]:
        return node_object(
            name,
            cpu="96",
            memory="1Ti",
            gpus=gpus,
            model=model,
            labels={ZONE_LABEL: zone},
            links=links,
            gpu_memory_mib=81920 if gpus else 0,
        )

    return [
        node("dgx-a1", "zone-a", A100, 8, nvlink_links(8)),
        node("pcie-b1", "zone-b", "Tesla-V100-PCIE-32GB", 8, pcie_links(8)),
        node("pcie-b2", "zone-b", "Tesla-T4", 4, pcie_links(4)),
        node("pcie-b3", "zone-b", "Tesla-T4", 4, pcie_links(4)),
        node("cpu-c1", "zone-c", "", 0, None),
    ]


def pods_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a controller would create from `obj` (Job: parallelism; Deployment:
    replicas), as the API server would show them before scheduling."""
    if obj["kind"] == "Job":
        count = obj["spec"].get("parallelism", 1)
    elif obj["kind"] == "Deployment":
        count = obj["spec"].get("replicas", 1)
    else:
        return []
    template = obj["spec"]["template"]
    pods = []
    for i in range(count):
        name = f"{obj['metadata']['name']}-{i}"
        meta = copy.deepcopy(template.get("metadata", {}))
        meta.update(
            name=name,
            namespace=obj["metadata"].get("namespace", "default"),
            uid=f"uid-{name}",
            resourceVersion="1",
            creationTimestamp="2026-11-01T00:00:00Z",
        )
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": copy.deepcopy(template["spec"]),
                "status": {"phase": "Pending"},
            }
        )
    return pods


def deployed_core() -> SchedulingCore:
    return build_core_from(parse_config(scheduler_config_text(rendered())))


def schedule(name: str) -> tuple[SchedulingCore, dict[str, Plan], list[dict[str, Any]]]:
    """Apply the example to a fresh cluster and schedule until nothing is due."""
    core = deployed_core()
    for node in cluster():
        core.apply_node("ADDED", node, 0.0)
    pods = []
    for obj in example(name):
        if obj["kind"] == "PodGroup":
            core.apply_podgroup("ADDED", {**obj, "metadata": {**obj["metadata"], "uid": "pg"}}, 0)
        pods += pods_of(obj)
    for pod in pods:
        core.apply_pod("ADDED", pod, 0.0)
    plans: dict[str, Plan] = {}
    while (attempt := core.schedule_next(0.0)) is not None:
        assert isinstance(attempt.result, Plan), attempt.result.message
        plans[attempt.gang.key] = attempt.result
        for placement in attempt.result.placements:
            core.bound(placement)
    assert core.waiting() == []
    return core, plans, pods


def placed(plan: Plan, pods: list[dict[str, Any]]) -> dict[str, tuple[str, tuple[Any, ...]]]:
    names = {p["metadata"]["uid"]: p["metadata"]["name"] for p in pods}
    return {names[p.pod_uid]: (p.node, p.shares) for p in plan.placements}


def test_the_parameter_server_job_is_placed_whole() -> None:
    _, plans, pods = schedule("ps-worker.yaml")
    (key,) = plans
    assert key == "default/mnist-dist"
    where = placed(plans[key], pods)
    assert len(where) == 5  # the parameter server and the 4 workers, together
    workers = {n: w for n, w in where.items() if n.startswith("mnist-dist-worker")}
    assert len(workers) == 4 and all(len(shares) == 1 for _, shares in workers.values())
    assert where["mnist-dist-ps-0"][1] == ()  # no GPU for the parameter server


def test_the_notebook_gets_three_tenths_of_one_gpu() -> None:
    _, plans, pods = schedule("notebook-fractional.yaml")
    (plan,) = plans.values()
    ((node, shares),) = placed(plan, pods).values()
    assert node != "cpu-c1"
    assert len(shares) == 1 and shares[0][1] == 300


def test_the_pinned_job_lands_on_the_gpu_type_it_names() -> None:
    _, plans, pods = schedule("gpu-type-pinned.yaml")
    (plan,) = plans.values()
    where = placed(plan, pods)
    assert len(where) == 2
    assert {node for node, _ in where.values()} == {"dgx-a1"}
    assert all(len(shares) == 2 for _, shares in where.values())


def test_the_topology_job_lands_on_one_nvlink_node() -> None:
    core, plans, pods = schedule("topology-8gpu.yaml")
    (plan,) = plans.values()
    where = placed(plan, pods)
    assert len(where) == 2
    assert {node for node, _ in where.values()} == {"dgx-a1"}  # not the 8-GPU PCIe box
    node = core.cache.node("dgx-a1")
    assert node is not None and node.pair_scores is not None
    for _, shares in where.values():
        devices = [index for index, _ in shares]
        assert len(devices) == 4
        assert all(node.pair_scores[a][b] >= 100 for a in devices for b in devices if a != b)


def test_the_examples_use_the_scheduler_s_gang_label() -> None:
    for path in example_files():
        for obj in example(path.name):
            for pod in pods_of(obj):
                labels = pod["metadata"].get("labels", {})
                if obj["kind"] == "Job":
                    assert GANG_LABEL in labels, path.name
