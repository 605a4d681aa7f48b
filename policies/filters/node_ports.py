"""NodePorts: the pod's host ports must be free on the node.

Semantics are kube-scheduler's NodePorts (cache.ports says which ports count and when
two clash). The node's taken ports include the members of the gang already placed in
the same plan (the planner's PlanningView charges them), so two members asking for
one host port never share a node.
"""

from __future__ import annotations

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.ports import conflicts

REASON = "node(s) didn't have free ports for the requested pod ports"


class NodePorts:
    name: str = "node-ports"

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        wanted = pod.host_ports
        if not wanted:
            return None
        used = node.used_ports
        if not used:
            return None
        for port in wanted:
            if conflicts(used, port):
                return REASON
        return None
