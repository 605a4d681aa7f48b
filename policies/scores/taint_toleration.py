"""PreferNoSchedule taints: prefer nodes with fewer of them left untolerated.

kube-scheduler's TaintToleration score counts the node's PreferNoSchedule taints the
pod does not tolerate (only tolerations with effect PreferNoSchedule or no effect
count), then normalises over the feasible nodes reversed: the node with the most gets
0, nodes with none 100. Judged one node at a time here, a node with `c` such taints
scores 100 / (1 + c): none gives 100 as in kube-scheduler, and more taints always
score lower, so between nodes the order is kube-scheduler's (docs/policies.md).

NoSchedule and NoExecute taints are the filter's (policies/filters/taint_toleration.py).
"""

from __future__ import annotations

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.terms import Taint, Toleration
from policies.interface import MAX_SCORE, CandidateOrder, GangContext

PREFER_NO_SCHEDULE = "PreferNoSchedule"


def intolerable_preferences(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> int:
    """How many PreferNoSchedule taints no toleration of effect PreferNoSchedule (or
    of any effect) tolerates."""
    relevant = [t for t in tolerations if t.effect in ("", PREFER_NO_SCHEDULE)]
    count = 0
    for taint in taints:
        if taint.effect != PREFER_NO_SCHEDULE:
            continue
        if not any(toleration.tolerates(taint) for toleration in relevant):
            count += 1
    return count


class PreferNoScheduleTaints:
    name: str = "taint-toleration"
    candidate_order: CandidateOrder | None = None

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        taints = node.taints
        if not taints:
            return MAX_SCORE
        return MAX_SCORE / (1 + intolerable_preferences(taints, pod.tolerations))
