"""Network topology of a gang: members prefer the topology domains (zone, host, ...)
the gang already uses, so that a learning task spans as few domains as it can.

The hierarchy is a list of node label keys, broadest first (default: zone, then host).
Level i of L weighs 2^(L-1-i), so a match at one level outweighs matches at every
narrower level together (zone 2, host 1 by default). A node matches at a level when its
label value there is one that a member already placed uses; a node lacking the label
does not match there. The score is

    score = 100 * sum(weight of each matching level) / sum(all weights)

so with the default keys: same host as a member 100, same zone only 66.7, elsewhere 0.
The gang's first member (nothing placed yet) gets 50 on every node: no preference.

DRA members on multi-node NVLink: for a member with ResourceClaims, once a member of
its gang went to a node labelled `nvidia.com/gpu.clique` (NVIDIA GPU feature
discovery: the node's NVLink domain), the clique counts as one more level just above
the narrowest configured one (zone 4, clique 2, host 1 by default): a node in that
NVLink domain beats one that is only in the same zone. Gangs that never touch a
labelled node score as above.
"""

from __future__ import annotations

from collections.abc import Sequence

from cache.dra.topology import NVLINK_CLIQUE_LABEL
from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.interface import MAX_SCORE, CandidateOrder, GangContext

DEFAULT_KEYS = ("topology.kubernetes.io/zone", "kubernetes.io/hostname")
NEUTRAL = MAX_SCORE / 2


def domain_of(node: NodeInfo, key: str) -> str | None:
    """The node's domain at one level of the hierarchy: its value of label `key`, None
    when it has none (the same reading GangContext.record uses)."""
    return node.labels.get(key)


class NetworkTopology:
    name = "network-topology"
    candidate_order: CandidateOrder | None = None

    def __init__(self, keys: Sequence[str] = DEFAULT_KEYS) -> None:
        self.keys = tuple(keys)
        self._levels = _weighted(self.keys)
        with_clique = self.keys
        if self.keys and NVLINK_CLIQUE_LABEL not in self.keys:
            with_clique = (*self.keys[:-1], NVLINK_CLIQUE_LABEL, self.keys[-1])
        self._clique_levels = _weighted(with_clique)

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        if gang.placed == 0 or not self.keys:
            return NEUTRAL
        levels = self._levels
        if pod.dra_reach is not None and gang.domains.get(NVLINK_CLIQUE_LABEL):
            levels = self._clique_levels
        matched = 0
        total = 0
        for key, weight in levels:
            total += weight
            used = gang.domains.get(key)
            value = domain_of(node, key)
            if used and value is not None and used[value] > 0:
                matched += weight
        return MAX_SCORE * matched / total


def _weighted(keys: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """Each level with its weight, 2^(L-1-i): one level outweighs all narrower ones."""
    count = len(keys)
    return tuple((key, 1 << (count - 1 - level)) for level, key in enumerate(keys))
