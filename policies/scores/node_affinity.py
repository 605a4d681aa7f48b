"""Preferred node affinity: prefer nodes matching the pod's weighted preferences.

kube-scheduler's NodeAffinity score gives a node the sum of the weights of the
`preferredDuringSchedulingIgnoredDuringExecution` terms it matches (a term matches
as a required term does: its requirements ANDed, an empty term matching nothing),
then normalises over the feasible nodes so that the best one gets 100. Here a score
is judged for one node at a time (the planner caches it per node state), so the sum
is normalised by the pod's own total weight instead: a node matching every term
scores 100, one matching none 0. Between nodes the order is kube-scheduler's; only
the scale differs when no node matches every term (docs/policies.md).

A pod without preferred terms scores 0 everywhere: it adds exactly nothing to a
node's total, so policies and the simulator's figures are unchanged for such pods.
"""

from __future__ import annotations

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.filters.node_affinity import terms_match
from policies.interface import MAX_SCORE, CandidateOrder, GangContext


class PreferredNodeAffinity:
    name: str = "node-affinity"
    candidate_order: CandidateOrder | None = None

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        preferred = pod.preferred_affinity
        if not preferred:
            return 0.0
        matched = 0
        total = 0
        for term in preferred:
            total += term.weight
            if terms_match((term.term,), node):
                matched += term.weight
        return MAX_SCORE * matched / total
