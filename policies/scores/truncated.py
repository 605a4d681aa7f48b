"""Integer scores, as the FGD paper's simulator reads every score plugin (kube-scheduler
scores are int64): `Truncated(inner)` returns int(inner's score) as a float.

Truncation makes ties many (every node within one point scores alike), so which of the
tied nodes wins is the planner's tie-break, not the policy's: reproducing the paper's
numbers needs both. Truncation is toward zero, as Go's int64 conversion; inner scores are
0..100, so that is the floor.
"""

from __future__ import annotations

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.interface import CandidateOrder, GangContext, Score


class Truncated:
    def __init__(self, inner: Score) -> None:
        self.inner = inner
        self.name: str = f"{inner.name}-int"
        self.candidate_order: CandidateOrder | None = inner.candidate_order
        # A score that must not be cached stays uncached when truncated.
        self.memoizable: bool = bool(getattr(inner, "memoizable", True))

    def learning_step(self) -> int:
        """The inner score's (Profile.learning_step)."""
        step = getattr(self.inner, "learning_step", None)
        return int(step()) if step is not None else 0

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        return float(int(self.inner.score(pod, node, shares, gang)))
