"""Random, the paper's weakest baseline: a random feasible node and, for a share, a random
device that fits.

Each call returns a fresh uniform number in [0, 100) from the score's own seeded
generator, so a planner that keeps the highest score picks uniformly among the
candidates it scores (continuous values almost never tie, so candidate order does not
bias the pick). With TopologyChooser(share_order="index") every fitting device is a
candidate, so a share lands on a uniformly random fitting device as in the simulator;
with the default chooser, equal devices are proposed once, so the pick is uniform over
kinds of device instead. Answers must not be cached across calls (`memoizable = False`):
a cached score would make the same node win again and again. The sequence of picks is
reproducible for one seed and one order of calls.
"""

from __future__ import annotations

import random

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.interface import MAX_SCORE, CandidateOrder, GangContext


class RandomScore:
    name = "random"
    candidate_order: CandidateOrder | None = None
    memoizable = False

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rng = random.Random(seed)

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        return self._rng.random() * MAX_SCORE
