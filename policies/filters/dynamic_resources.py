"""DynamicResources (kube-scheduler framework/plugins/dynamicresources), as a filter:
the nodes where each of the pod's DRA claims can be allocated (or, allocated already,
used) are resolved before the pod is planned, against the devices others hold
(scheduler/planner/dra_claims.py, `PodInfo.dra_reach`); a node outside them fails with
kube-scheduler's words. What the gang's own members take from each other is the
member-choice kind's business (scheduler/planner/dra_choice.py), on top of this."""

from __future__ import annotations

from cache.node import NodeInfo
from cache.pod import PodInfo

CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"


class DynamicResources:
    name: str = "dynamic-resources"
    # Its answer rests on the pod's DRA reach, which PodInfo.filter_signature leaves
    # out: the filter memo asks it afresh (policies/diagnosis.FilterMemo).
    kept_by_signature: bool = False

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        reach = pod.dra_reach
        if reach is None or node.name in reach[0]:
            return None
        return reach[1]
