"""Spread: prefer the node (and, for a GPU share, the device) left emptiest.

Score = 100 x (1 - utilisation after placing the pod), the mirror image of
MostAllocated over the same weighted utilisation (policies.scores.utilisation): a
fractional pod favours the device left with the most free milli. Spreading keeps load
and failure impact even across nodes, at the cost of fragmenting GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.interface import MAX_SCORE, CandidateOrder, GangContext
from policies.scores.utilisation import DEFAULT_WEIGHTS, checked_weights, utilisation_after


class LeastAllocated:
    name: str = "least-allocated"
    candidate_order: CandidateOrder | None = "roomy"

    def __init__(self, weights: Mapping[str, float] = DEFAULT_WEIGHTS) -> None:
        self.weights = checked_weights(weights)

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        used = utilisation_after(pod, node, shares, self.weights)
        return 0.0 if used is None else MAX_SCORE * (1.0 - used)
