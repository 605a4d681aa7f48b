"""The policies of the openb experiment as scheduling profiles of the same planner.

Each name maps to a profile of production plug-ins (policies/scores/...), set up as
the paper's simulator runs them: every node looked at (candidate limit 0), the policy's
score the only score, integer scores, and ties broken by a random rank of the nodes
drawn from the seed. Nothing here is a second implementation of a policy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence

from cache.pod import PodInfo
from policies.devices import TopologyChooser
from policies.filters import default_filters
from policies.interface import Score
from policies.profile import Profile
from policies.scores.best_fit import BestFit
from policies.scores.dot_product import DotProduct
from policies.scores.fragmentation import Fragmentation, TargetWorkload
from policies.scores.gpu_packing import GpuPacking
from policies.scores.random_choice import RandomScore
from policies.scores.truncated import Truncated

OPENB_POLICIES = ("random", "bestfit", "dotprod", "packing", "fgd")
BEST_POLICY = "fgd"
PAPER_NAMES = {
    "random": "Random",
    "bestfit": "BestFit",
    "dotprod": "DotProd",
    "packing": "Packing",
    "fgd": "FGD",
}


class SeededRank(Mapping[str, int]):
    """A random rank for every node name, drawn from the seed: the same name always gets
    the same rank for one seed, without knowing the node list up front."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._ranks: dict[str, int] = {}

    def __getitem__(self, name: str) -> int:
        rank = self._ranks.get(name)
        if rank is None:
            digest = hashlib.blake2b(f"{self.seed}\0{name}".encode(), digest_size=8).digest()
            rank = self._ranks[name] = int.from_bytes(digest, "big")
        return rank

    def __iter__(self) -> Iterator[str]:
        return iter(self._ranks)

    def __len__(self) -> int:
        return len(self._ranks)


def openb_profile(
    name: str,
    *,
    seed: int,
    max_cpu_milli: int,
    max_gpu_milli: int,
    history: Sequence[PodInfo],
) -> Profile:
    """The profile for one of OPENB_POLICIES. `history` (the trace's original pods)
    gives FGD its target workload, as the paper does; max_* normalise BestFit and
    DotProd as the paper's simulator does (the largest node's CPU and GPU milli)."""
    chooser = TopologyChooser()
    score: Score
    if name == "random":
        score, chooser = RandomScore(seed), TopologyChooser("index")
    elif name == "bestfit":
        score = BestFit(max_cpu_milli, max_gpu_milli)
    elif name == "dotprod":
        score = DotProduct(max_cpu_milli, max_gpu_milli)
    elif name == "packing":
        score = GpuPacking()
    elif name == "fgd":
        workload = TargetWorkload.from_pods(history)
        score, chooser = Truncated(Fragmentation(workload)), TopologyChooser("index")
    else:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(OPENB_POLICIES)}")
    return Profile(
        filters=default_filters(),
        chooser=chooser,
        node_scores=((score, 1.0),),
        gang_scores=(),
        topology_keys=(),
        candidate_limit=0,
        node_rank=SeededRank(seed),
    )
