"""Pod-spec fields this scheduler cannot honour, found before a pod is ever planned.

kube-scheduler honours them; binding a pod while ignoring one would place it where
kube-scheduler would not (a DRA claim never allocated leaves the pod stuck in
ContainerCreating on a node that may not even have the device). Such a pod is refused
out loud instead: each message names the field, and becomes one of the pod's problems
(cache.pod.PodInfo.problems), which the adapter publishes as a Warning event and a
PodScheduled=False condition. docs/conventions.md lists every pod-spec field and
what this scheduler does with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DRA_MESSAGE = (
    "spec.resourceClaims (dynamic resource allocation) is not supported by this "
    "scheduler: no claim would be allocated; schedule the pod with kube-scheduler"
)


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
    if spec.get("resourceClaims"):
        problems.append(DRA_MESSAGE)
    else:
        # A container's resources.claims must name one of spec.resourceClaims (the API
        # server validates that), so it is refused with them; checked on its own only
        # for objects built by hand.
        for kind in ("initContainers", "containers"):
            for container in spec.get(kind) or ():
                claims = (container.get("resources") or {}).get("claims")
                if claims:
                    name = container.get("name") or "?"
                    problems.append(
                        f"spec.{kind}[{name}].resources.claims (dynamic resource "
                        "allocation) is not supported by this scheduler"
                    )
    return problems
