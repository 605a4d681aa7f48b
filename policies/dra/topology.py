"""GPU-set topology for DRA devices: pair scores from where devices sit
(cache/dra/topology.py), the set a request should take first, and how tight the set a
node gives is, in the spirit and weights of the device-plugin GPUs' topology
(policies/devices.py, policies/scores/gpu_topology.py).

A pair scores the best level its facts guarantee, on cache.gpu's scale: the same NVLink
domain 100 (one NVLink link), the same PCIe root complex 30 (PHB: the pair may sit
under one switch, PIX or PXB, but the root is all the attribute says), the same NUMA
node 20 (NODE), anything else or unknown 10 (SYS). Devices with no fact at all score
SYS with every device, so a node that publishes nothing keeps kube-scheduler's order.

`preferred_set`: among the free devices that fit one request, the k to take first:
the highest pair-score sum inside the set plus its pair scores to the devices the pod
(or the gang, on this node) took already; ties to the set that leaves the free
devices best joined (members fill a root or domain before they open another); then
the earliest in the allocator's order. Exhaustive over at most EXHAUSTIVE_LIMIT
subsets, else a greedy grown from every device, as policies/devices.py does;
remembered per (topologies, k, anchors), since nodes of one shape repeat them.

This is a preference only: the allocator tries that set first and every other set
after it, so which allocations exist (and what a matchAttribute constraint admits) is
unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import combinations
from math import comb

from cache.dra.slices import DeviceId
from cache.dra.store import NodeDevices
from cache.dra.topology import DeviceTopology, device_topology
from cache.gpu import LEVEL_SCORE, NVLINK_SCORE_PER_LINK, LinkLevel
from policies.devices import internal_sum, link_facts
from policies.interface import MAX_SCORE
from policies.scores.gpu_topology import ABSOLUTE_SCALE, RELATIVE_WEIGHT

SAME_NVLINK = NVLINK_SCORE_PER_LINK
SAME_PCIE_ROOT = LEVEL_SCORE[LinkLevel.PHB]
SAME_NUMA = LEVEL_SCORE[LinkLevel.NODE]
APART = LEVEL_SCORE[LinkLevel.SYS]
EXHAUSTIVE_LIMIT = 256
# Devices of one node scored together (a node score): past this the node is judged
# neutral rather than building a larger matrix (a slice holds at most 128 devices).
MAX_SCORED_DEVICES = 128
_CHOICE_LIMIT = 4096
_choices: dict[tuple[tuple[DeviceTopology, ...], int, tuple[DeviceTopology, ...]], tuple[int, ...]]
_choices = {}


def pair_score(a: DeviceTopology, b: DeviceTopology) -> int:
    if a.nvlink is not None and a.nvlink == b.nvlink:
        return SAME_NVLINK
    if a.pcie_root is not None and a.pcie_root == b.pcie_root:
        return SAME_PCIE_ROOT
    if a.numa is not None and a.numa == b.numa:
        return SAME_NUMA
    return APART


def _matrix(tops: Sequence[DeviceTopology]) -> tuple[tuple[int, ...], ...]:
    return tuple(
        tuple(0 if i == j else pair_score(a, b) for j, b in enumerate(tops))
        for i, a in enumerate(tops)
    )


def preferred_set(
    tops: tuple[DeviceTopology, ...], k: int, anchors: tuple[DeviceTopology, ...] = ()
) -> tuple[int, ...] | None:
    """Positions in `tops` (the free fitting devices, in the allocator's order) of the
    k to take first; None when there is no preference to state (no device has a fact,
    or there is no choice)."""
    if k < 1 or k >= len(tops) or not any(t.known for t in tops):
        return None
    key = (tops, k, anchors)
    chosen = _choices.get(key)
    if chosen is None:
        chosen = _best_set(tops, k, anchors)
        if len(_choices) >= _CHOICE_LIMIT:
            _choices.clear()
        _choices[key] = chosen
    return chosen


def _best_set(
    tops: tuple[DeviceTopology, ...], k: int, anchors: tuple[DeviceTopology, ...]
) -> tuple[int, ...]:
    scores = _matrix(tops)
    n = len(tops)
    pull = [sum(pair_score(t, a) for a in anchors) for t in tops]
    to_free = [sum(row) for row in scores]

    def rank(subset: tuple[int, ...]) -> tuple[int, int, tuple[int, ...]]:
        inside = internal_sum(scores, subset)
        gain = inside + sum(pull[i] for i in subset)
        # The remainder's pair sum, up to a constant common to every subset.
        remainder = inside - sum(to_free[i] for i in subset)
        return (-gain, -remainder, subset)

    if comb(n, k) <= EXHAUSTIVE_LIMIT:
        return min(rank(s) for s in combinations(range(n), k))[2]
    best: tuple[int, int, tuple[int, ...]] | None = None
    for start in range(n):
        chosen = [start]
        gain = {c: scores[c][start] + pull[c] for c in range(n) if c != start}
        while len(chosen) < k:
            pick = min(gain, key=lambda c: (-gain[c], to_free[c], c))
            del gain[pick]
            chosen.append(pick)
            row = scores[pick]
            for c in gain:
                gain[c] += row[c]
        ranked = rank(tuple(sorted(chosen)))
        if best is None or ranked < best:
            best = ranked
    assert best is not None
    return best[2]


def set_score(
    tops: Sequence[DeviceTopology], free: Sequence[bool], chosen: Sequence[int]
) -> float | None:
    """0..100 for taking the devices at `chosen` of a node whose devices are `tops`
    (`free`: which of them nothing holds), by gpu_topology's formula on these pair
    scores; None (neutral) when no device has a fact or nothing is taken."""
    k = len(chosen)
    if k == 0 or not any(t.known for t in tops):
        return None
    scores = _matrix(tops)
    facts = link_facts(scores)
    if k >= 2:
        pairs = k * (k - 1) // 2
        mean = internal_sum(scores, chosen) / pairs
        best_mean = facts.best_sum(k) / pairs
        relative = min(1.0, mean / best_mean) if best_mean > 0 else 1.0
        absolute = min(1.0, mean / ABSOLUTE_SCALE)
        return MAX_SCORE * (RELATIVE_WEIGHT * relative + (1 - RELATIVE_WEIGHT) * absolute)
    index = chosen[0]
    row = scores[index]
    damage = sum(row[j] for j, open_ in enumerate(free) if open_ and j != index)
    ceiling = facts.max_row_sum
    return MAX_SCORE * (1.0 - min(1.0, damage / ceiling) if ceiling > 0 else 1.0)


def allocation_score(
    node: NodeDevices,
    labels: Mapping[str, str],
    taken: Sequence[DeviceId],
    holder: Callable[[DeviceId], str],
) -> float | None:
    """How tight the devices `taken` on `node` are, among the node's devices of the
    same drivers (others, a NIC beside a GPU, are not its peers); None: neutral."""
    if not taken:
        return None
    drivers = {device.driver for device in taken}
    peers = [c for c in node.candidates if c.device_id.driver in drivers]
    if len(peers) > MAX_SCORED_DEVICES:
        return None
    wanted = set(taken)
    tops = [device_topology(c.device_id.driver, c.device, labels) for c in peers]
    free = [c.device_id in wanted or not holder(c.device_id) for c in peers]
    chosen = [i for i, c in enumerate(peers) if c.device_id in wanted]
    if len(chosen) != len(wanted):
        return None  # a device this node does not reach: judge by other scores
    return set_score(tops, free, chosen)
