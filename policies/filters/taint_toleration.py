"""TaintToleration: every NoSchedule or NoExecute taint of the node must be tolerated.

PreferNoSchedule taints only steer scoring in kube-scheduler, so they never filter.
The reason names the first untolerated taint, in kube-scheduler's words.
"""

from __future__ import annotations

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.terms import SCHEDULING_EFFECTS


class TaintToleration:
    name: str = "taint-toleration"

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        tolerations = pod.tolerations
        for taint in node.taints:
            if taint.effect not in SCHEDULING_EFFECTS:
                continue
            for toleration in tolerations:
                if toleration.tolerates(taint):
                    break
            else:
                return f"node(s) had untolerated taint {taint.describe()}"
        return None
