"""Pod-spec fields this scheduler cannot honour, found before a pod is ever planned.

kube-scheduler honours them; binding a pod while ignoring one would place it where
kube-scheduler would not. Such a pod is refused out loud instead: each message names
the field, and becomes one of the pod's problems (cache.pod.PodInfo.problems), which
the adapter publishes as a Warning event and a PodScheduled=False condition.
docs/conventions.md lists every pod-spec field and what this scheduler does with it.
DRA claims (`spec.resourceClaims`) are allocated (docs/dra.md); what of DRA is still
refused is refused when the pod is planned, per claim (scheduler/planner/dra_claims.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from cache.limits import shown

# Kubernetes 1.35's `workloadRef` (its alpha Workload API, replaced in 1.36 by
# `schedulingGroup`, which cache/pod.py reads as the gang's name): not read, so a pod
# naming its gang only there would be placed alone, a partial gang by another name.
NATIVE_GANG_FIELDS = ("workloadRef",)


def unsupported_fields(spec: Mapping[str, Any], in_gang: bool = False) -> list[str]:
    """A message for every field of `spec` this scheduler refuses, in spec order.
    `in_gang`: the pod names its gang in a way this scheduler reads (label or
    annotation), so a native gang field beside it is redundant, not refused."""
    problems: list[str] = []
    for name in NATIVE_GANG_FIELDS:
        if spec.get(name) and not in_gang:
            problems.append(
                f"spec.{name} (Kubernetes native gang scheduling) is not read by this "
                "scheduler yet, and the pod would be placed alone; name its gang with the "
                "pod-group label as well (docs/conventions.md)"
            )
    return problems


# KAI-Scheduler's GPU sharing (pod annotations its binder reads: a fraction of one GPU,
# or GPU memory in MiB). Its reservation pods and binder hand the GPU to the container;
# here the share is the resource nvidia.com/vgpu, served by the node agent's device
# plugin. Mapping the annotation onto a share the scheduler books but the kubelet never
# grants would run the pod with no GPU at all, so it is refused, naming the request to
# write instead (docs/migration.md, "KAI-Scheduler").
KAI_GPU_FRACTION_ANNOTATION = "gpu-fraction"
KAI_GPU_MEMORY_ANNOTATION = "gpu-memory"


def _vgpu_for(fraction: object) -> str:
    """The nvidia.com/vgpu request a gpu-fraction value stands for, when it reads as one."""
    try:
        value = float(fraction[:32]) if isinstance(fraction, str) else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 < value <= 1:
        return "nvidia.com/vgpu: <milli-GPUs> (1000 = one GPU)"
    return f"nvidia.com/vgpu: {max(1, round(value * 1000))} (1000 = one GPU)"


def unsupported_annotations(annotations: Mapping[str, Any]) -> list[str]:
    """A message for each peer scheduler's request this scheduler refuses to guess at."""
    problems: list[str] = []
    fraction = annotations.get(KAI_GPU_FRACTION_ANNOTATION)
    if fraction is not None:
        problems.append(
            f"annotation {KAI_GPU_FRACTION_ANNOTATION}={shown(fraction)} (KAI-Scheduler's GPU "
            "sharing) is not read by this scheduler: the pod would run without a GPU; "
            f"request {_vgpu_for(fraction)} in its resources instead and drop the annotation"
        )
    if annotations.get(KAI_GPU_MEMORY_ANNOTATION) is not None:
        problems.append(
            f"annotation {KAI_GPU_MEMORY_ANNOTATION}="
            f"{shown(annotations[KAI_GPU_MEMORY_ANNOTATION])} (KAI-Scheduler's GPU sharing by "
            "memory) is not read by this scheduler: the pod would run without a GPU; "
            "request nvidia.com/vgpu (1000 = one GPU) in its resources instead"
        )
    return problems
