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

from collections.abc import Mapping
from typing import Any

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
