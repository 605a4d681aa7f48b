"""Builders of Kubernetes JSON objects for tests, and their parsed records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cache.node import NodeInfo, node_from_api
from cache.pod import GANG_LABEL, MIN_MEMBER_ANNOTATION, PodInfo, pod_from_api
from scheduler.sim.objects import node_object, nvlink_links, pcie_links


def node_obj(
    name: str,
    *,
    cpu: str = "64",
    memory: str = "256Gi",
    pods: int = 110,
    gpus: int = 0,
    vgpu: int | None = None,
    model: str = "",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    links: Sequence[Sequence[str]] | None = None,
    extra: Mapping[str, str] | None = None,
    resource_version: str = "1",
) -> dict[str, Any]:
    """A Node; with `links`, a topology annotation describing `gpus` devices."""
    capacity = dict(extra or {})
    if gpus and vgpu is not None:
        capacity["nvidia.com/vgpu"] = str(vgpu)
    obj = node_object(
        name,
        cpu=cpu,
        memory=memory,
        pods=pods,
        gpus=gpus,
        model=model,
        labels=labels,
        links=links,
        gpu_memory_mib=81920,
        extra=capacity,
        resource_version=resource_version,
    )
    if model and not gpus:
        obj["metadata"]["labels"]["nvidia.com/gpu.product"] = model
    obj["spec"] = {"taints": list(taints), "unschedulable": unschedulable}
    return obj


def pod_obj(
    name: str,
    *,
    namespace: str = "default",
    cpu: str = "1",
    memory: str = "1Gi",
    gpus: int = 0,
    vgpu: int = 0,
    gang: str | None = None,
    min_member: str | int | None = None,
    scheduler: str = "gang-scheduler",
    node_name: str = "",
    priority: int = 0,
    created: str = "2026-01-01T00:00:00Z",
    node_selector: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
    annotations: Mapping[str, str] | None = None,
    phase: str = "Pending",
    uid: str | None = None,
    resource_version: str = "1",
) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    if vgpu:
        requests["nvidia.com/vgpu"] = str(vgpu)
    labels = {GANG_LABEL: gang} if gang else {}
    all_annotations = dict(annotations or {})
    if min_member is not None:
        all_annotations[MIN_MEMBER_ANNOTATION] = str(min_member)
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "priority": priority,
        "containers": [{"name": "main", "image": "trainer", "resources": {"requests": requests}}],
        "tolerations": list(tolerations),
    }
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = dict(affinity)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{namespace}-{name}",
            "labels": labels,
            "annotations": all_annotations,
            "creationTimestamp": created,
            "resourceVersion": resource_version,
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def make_node(name: str, **kwargs: Any) -> NodeInfo:
    return node_from_api(node_obj(name, **kwargs))


def make_pod(name: str, **kwargs: Any) -> PodInfo:
    return pod_from_api(pod_obj(name, **kwargs))


# `nvidia-smi topo -m` link matrices of real machine shapes, for topology tests.
def dgx_links(count: int = 8) -> list[list[str]]:
    """All pairs on NVLink (NV12), as a DGX A100 reports."""
    return nvlink_links(count)


def pcie_two_switch_links() -> list[list[str]]:
    """4 GPUs: 0-1 and 2-3 share a PCIe switch (PIX), the pairs join over SYS."""
    return pcie_links(4)


def podgroup_obj(name: str, min_member: int, namespace: str = "default") -> dict[str, Any]:
    """A PodGroup (scheduling.x-k8s.io/v1alpha1) as the API serves it."""
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member},
    }


def gang_pods(
    name: str,
    size: int,
    *,
    min_member: int | None = None,
    nodes: Sequence[str] = (),
    **fields: Any,
) -> list[dict[str, Any]]:
    """The `size` members `<name>-<i>` of gang `name` (minMember `size` unless given):
    member i bound to `nodes[i]` when nodes are given, else unbound; `fields` are
    pod_obj's (the same for every member)."""
    return [
        pod_obj(
            f"{name}-{i}",
            gang=name,
            min_member=min_member or size,
            node_name=nodes[i] if nodes else "",
            **fields,
        )
        for i in range(size)
    ]
