"""GPU-set topology: how well the GPUs a pod takes are joined, and what taking them
costs the node's remaining well-joined sets.

Pair scores are cache.gpu's (NVLink 100 per link, board 60, PIX 50, PXB 40, PHB 30,
NODE 20, SYS 10). The score, 0..100:

- No GPU, or a node whose links are unknown: 50, neutral, so the score never decides
  between nodes that publish no topology.
- DRA devices (a pod's ResourceClaims): the same formula on the pair scores their
  attributes give (PCIe root, NUMA node, NVLink clique; policies/dra/topology.py), for
  the set the claims get on the node, computed with the claims' reach
  (`PodInfo.dra_topology`); neutral where no device of the node has a fact.
- A set of k >= 2 devices, with `mean` its mean pair score and `best` the best mean any
  k devices of this node have when all are free:

      score = 100 * (RELATIVE_WEIGHT * min(1, mean / best)
                     + (1 - RELATIVE_WEIGHT) * min(1, mean / ABSOLUTE_SCALE))

  The relative part says whether the set is as good as this node allows (a SYS pair on
  a box that has PIX pairs scores low, a perfect NVLink set scores full whatever the
  link count); the absolute part makes a node with NVLink (mean >= one NVLink link)
  beat a PCIe-only node for the same k. With RELATIVE_WEIGHT 0.5: a best NVLink set
  100, a best PIX pair 75, a SYS pair where PIX pairs exist 15, a SYS-only box 55.
- A single device (k == 1): the cost of taking it is its pair-score sum to the other
  fully free devices (`damage`; 0 when the device is already partly used, since it is
  in no fully free pair), measured against the node's most-joined device:
  `isolation = 1 - damage / max_row_sum`. A whole GPU scores `100 * isolation`; a share
  scores `50 * isolation + 50 * used`, `used` being the fraction of the device already
  taken, so a partly used device (>= 50) beats a fully free isolated one (50), which
  beats a fully free well-joined one (< 50).
"""

from __future__ import annotations

from cache.gpu import NVLINK_SCORE_PER_LINK, DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import MILLI_PER_GPU
from policies.devices import connectivity_to_fully_free, internal_sum, link_facts
from policies.interface import MAX_SCORE, CandidateOrder, GangContext

NEUTRAL = MAX_SCORE / 2
RELATIVE_WEIGHT = 0.5
# A mean pair score of one NVLink link or more is perfect in absolute terms.
ABSOLUTE_SCALE = NVLINK_SCORE_PER_LINK


class GpuTopology:
    name = "gpu-topology"
    candidate_order: CandidateOrder | None = None

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        if not shares:
            # A pod whose GPUs are DRA devices: the score of the set its claims get
            # on this node, resolved with their reach (policies/dra/topology.py).
            dra = pod.dra_topology
            return NEUTRAL if dra is None else dra.get(node.name, NEUTRAL)
        scores = node.pair_scores
        if scores is None:
            return NEUTRAL
        if any(not 0 <= index < len(scores) for index, _ in shares):
            return NEUTRAL  # an assignment this node cannot have; judge it by other scores
        if len(shares) == 1:
            return _single_device_score(node, shares[0][0], shares[0][1])
        return _set_score(node, [index for index, _ in shares])


def _set_score(node: NodeInfo, indices: list[int]) -> float:
    assert node.pair_scores is not None
    k = len(indices)
    pairs = k * (k - 1) // 2
    mean = internal_sum(node.pair_scores, indices) / pairs
    best_mean = link_facts(node.pair_scores).best_sum(k) / pairs
    relative = min(1.0, mean / best_mean) if best_mean > 0 else 1.0
    absolute = min(1.0, mean / ABSOLUTE_SCALE)
    return MAX_SCORE * (RELATIVE_WEIGHT * relative + (1 - RELATIVE_WEIGHT) * absolute)


def _single_device_score(node: NodeInfo, index: int, milli: int) -> float:
    assert node.pair_scores is not None
    usable = node.usable_free()
    before = usable[index] if index < len(usable) else 0
    damage = connectivity_to_fully_free(node, index, usable) if before >= MILLI_PER_GPU else 0
    ceiling = link_facts(node.pair_scores).max_row_sum
    isolation = 1.0 - min(1.0, damage / ceiling) if ceiling > 0 else 1.0
    if milli >= MILLI_PER_GPU:
        return MAX_SCORE * isolation
    used = min(1.0, max(0.0, (MILLI_PER_GPU - before) / MILLI_PER_GPU))
    return MAX_SCORE * (isolation + used) / 2
