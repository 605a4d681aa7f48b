"""NodeUnschedulable: a cordoned node (`spec.unschedulable`) takes no new pods.

As in kube-scheduler, a pod that tolerates the taint the node lifecycle controller puts
on cordoned nodes (`node.kubernetes.io/unschedulable:NoSchedule`) may still go there
(DaemonSet pods do).
"""

from __future__ import annotations

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.terms import Taint

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
REASON = "node(s) were unschedulable"


class NodeUnschedulable:
    name: str = "node-unschedulable"

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        if not node.unschedulable:
            return None
        for toleration in pod.tolerations:
            if toleration.tolerates(UNSCHEDULABLE_TAINT):
                return None
        return REASON
