"""Device choice: which GPUs of a node a pod would take.

Whole GPUs (`count` devices with 1,000 milli each) go to the best-connected set of free
devices: the set whose pair scores (cache.gpu.LEVEL_SCORE: NVLink 100 per link, board
60, PIX 50, PXB 40, PHB 30, NODE 20, SYS 10) sum highest. Ties go to the set spanning the
fewest NUMA nodes, then to the set that leaves the best-connected devices free for the
next pod (the highest pair-score sum among the free devices it does not take), then to
the lowest indices. A share (under 1,000 milli) goes best-fit: the device with the least
free milli that still fits, ties to the device least connected to the fully free ones,
so that well-connected free sets survive for multi-GPU pods.

The chooser runs for every feasible node of every gang member, so what depends only on
a node's link matrix is computed once per distinct matrix (`link_facts`) and set searches
are remembered per (free devices, count, NUMA layout). Nodes without link information
take the lowest-index free devices with no search at all.

`TopologyChooser(share_order="index")` proposes, for a share, every fitting device in
index order instead (no grouping): the planner keeps the first of equally scored
candidates, so this reproduces a scorer that rates each device and takes the lowest
index on ties, as the FGD paper's simulator does. Whole-GPU sets are chosen alike in
both orders.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from math import comb
from typing import Literal, get_args

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import MILLI_PER_GPU
from policies.filters.gpu_fit import dra_serves_gpu

PairScores = tuple[tuple[int, ...], ...]

# A set search looks at every subset while there are at most this many; beyond, a
# deterministic greedy (from each device, add the best-joined device one at a time).
EXHAUSTIVE_LIMIT = 256
# The best set a node could offer with all devices free is computed once per link
# matrix and count, so it may afford a wider exhaustive search.
STATIC_EXHAUSTIVE_LIMIT = 5000
# Bounds on the module-level memo tables; on overflow they are simply emptied.
_FACTS_LIMIT = 4096
_CHOICE_LIMIT = 4096


def internal_sum(scores: PairScores, members: Sequence[int]) -> int:
    """Sum of pair scores over every pair inside `members`."""
    total = 0
    for position, i in enumerate(members):
        row = scores[i]
        for j in members[position + 1 :]:
            total += row[j]
    return total


def _search(
    scores: PairScores, free: Sequence[int], k: int, numa: Sequence[int | None], limit: int
) -> tuple[int, ...]:
    """The best k-subset of `free` (sorted indices, len(free) > k >= 1) by the order the
    module docstring gives: highest internal sum, fewest NUMA nodes, best-connected
    remainder, lowest indices."""
    # Pair-score sum from each free device to the other free devices: taking a set S
    # leaves the remainder with sum(all free pairs) - sum(to_free[S]) + internal(S).
    to_free = {i: sum(scores[i][j] for j in free if j != i) for i in free}
    if k == 1:
        # No pair inside; one NUMA node; the remainder is best when the device taken
        # is the least connected one.
        return (min(free, key=lambda i: (to_free[i], i)),)
    if comb(len(free), k) <= limit:
        best_key: tuple[int, int, int, tuple[int, ...]] | None = None
        for subset in combinations(free, k):
            inside = internal_sum(scores, subset)
            span = len({numa[i] for i in subset})
            # The remainder's sum up to a constant common to every subset.
            remainder = inside - sum(to_free[i] for i in subset)
            key = (-inside, span, -remainder, subset)
            if best_key is None or key < best_key:
                best_key = key
        assert best_key is not None
        return best_key[3]
    return _greedy(scores, free, k, numa, to_free)


def _greedy(
    scores: PairScores,
    free: Sequence[int],
    k: int,
    numa: Sequence[int | None],
    to_free: dict[int, int],
) -> tuple[int, ...]:
    """Grow a set from every free device in turn, each time adding the device joined best
    to the set so far (ties: fewest NUMA nodes, least joined to the rest, lowest index),
    and keep the best grown set by the exhaustive search's order. Starting from every
    device, not just the best pair, keeps the greedy out of a trap such as two NVLink
    islands where the best pair's island is one device short. Deterministic: the outcome
    depends only on the inputs. Cost O(free^2 * k), remembered per free set."""
    best_key: tuple[int, int, int, tuple[int, ...]] | None = None
    for start in free:
        chosen = [start]
        spanned = {numa[start]}
        gain = {c: scores[c][start] for c in free if c != start}
        while len(chosen) < k:
            pick = min(gain, key=lambda c: (-gain[c], len(spanned | {numa[c]}), to_free[c], c))
            del gain[pick]
            chosen.append(pick)
            spanned.add(numa[pick])
            row = scores[pick]
            for c in gain:
                gain[c] += row[c]
        subset = tuple(sorted(chosen))
        inside = internal_sum(scores, subset)
        remainder = inside - sum(to_free[i] for i in subset)
        key = (-inside, len(spanned), -remainder, subset)
        if best_key is None or key < best_key:
            best_key = key
    assert best_key is not None
    return best_key[3]


class LinkFacts:
    """What depends only on a node's link matrix, shared by every node with equal links
    (clones share the very tuple, nodes of one machine shape share its value)."""

    __slots__ = ("_best_sums", "_choices", "max_row_sum", "scores", "size")

    def __init__(self, scores: PairScores) -> None:
        self.scores = scores
        self.size = len(scores)
        # The most a single device can be joined to all others: the yardstick of how
        # much taking one device damages the free pairs.
        self.max_row_sum = max((sum(row) for row in scores), default=0)
        self._best_sums: dict[int, int] = {}
        self._choices: dict[tuple[tuple[int, ...], int, tuple[int | None, ...]], DeviceShares] = {}

    def best_sum(self, k: int) -> int:
        """The highest pair-score sum any k devices of the node have (all free)."""
        if k < 2 or k > self.size:
            return 0
        cached = self._best_sums.get(k)
        if cached is None:
            everyone = tuple(range(self.size))
            if k == self.size:
                cached = internal_sum(self.scores, everyone)
            else:
                no_numa = (None,) * self.size
                best = _search(self.scores, everyone, k, no_numa, STATIC_EXHAUSTIVE_LIMIT)
                cached = internal_sum(self.scores, best)
            self._best_sums[k] = cached
        return cached

    def choose(
        self, free: tuple[int, ...], k: int, milli: int, numa: tuple[int | None, ...]
    ) -> DeviceShares:
        """The best k of the `free` devices, each taking `milli` (memoised)."""
        key = (free, k, numa)
        shares = self._choices.get(key)
        if shares is None:
            if k == len(free):
                chosen: tuple[int, ...] = free
            else:
                chosen = _search(self.scores, free, k, numa, EXHAUSTIVE_LIMIT)
            shares = tuple((i, milli) for i in chosen)
            if len(self._choices) >= _CHOICE_LIMIT:
                self._choices.clear()
            self._choices[key] = shares
        return shares


# id(matrix) -> (matrix, facts): the fast path for a matrix object seen before. The entry
# holds the matrix itself, so its id cannot be reused by another object while cached.
_FACTS_BY_ID: dict[int, tuple[PairScores, LinkFacts]] = {}
_FACTS_BY_VALUE: dict[PairScores, LinkFacts] = {}


def link_facts(scores: PairScores) -> LinkFacts:
    """The shared LinkFacts of a link matrix."""
    entry = _FACTS_BY_ID.get(id(scores))
    if entry is not None and entry[0] is scores:
        return entry[1]
    facts = _FACTS_BY_VALUE.get(scores)
    if facts is None:
        if len(_FACTS_BY_VALUE) >= _FACTS_LIMIT:
            _FACTS_BY_VALUE.clear()
        facts = _FACTS_BY_VALUE[scores] = LinkFacts(scores)
    if len(_FACTS_BY_ID) >= _FACTS_LIMIT:
        _FACTS_BY_ID.clear()
    _FACTS_BY_ID[id(scores)] = (scores, facts)
    return facts


def best_set_score(node: NodeInfo, k: int) -> int:
    """The highest pair-score sum any k devices of `node` have when all are free; 0 when
    links are unknown or k < 2."""
    if node.pair_scores is None:
        return 0
    return link_facts(node.pair_scores).best_sum(k)


def connectivity_to_fully_free(node: NodeInfo, index: int, usable: Sequence[int]) -> int:
    """Pair-score sum from device `index` to the other devices that are fully free:
    what taking `index` whole would cost the free pairs (0 when links are unknown)."""
    scores = node.pair_scores
    if scores is None:
        return 0
    row = scores[index]
    return sum(row[j] for j, free in enumerate(usable) if j != index and free >= MILLI_PER_GPU)


ShareOrder = Literal["best-fit", "index", "index-distinct"]
"""How a share's candidate devices are proposed: "best-fit" (least free milli first, one
device per kind, the default), "index" (every fitting device, lowest index first) or
"index-distinct" (as "index", one device per free amount where links are unknown)."""


class TopologyChooser:
    """Proposes the best-connected whole-GPU set, or candidate devices for a share in the
    configured `share_order`."""

    name = "topology"

    def __init__(self, share_order: ShareOrder = "best-fit") -> None:
        if share_order not in get_args(ShareOrder):
            known = ", ".join(get_args(ShareOrder))
            raise ValueError(f"unknown share order {share_order!r}; known: {known}")
        self.share_order: ShareOrder = share_order

    def candidates(self, pod: PodInfo, node: NodeInfo) -> list[DeviceShares]:
        count, milli = pod.gpu.count, pod.gpu.milli
        if count == 0 or dra_serves_gpu(pod, node):
            return [()]  # no GPU of the node's own (DRA devices, if any, are claims)
        if count == 1 and milli < MILLI_PER_GPU:
            if self.share_order == "index":
                return _share_candidates_by_index(node, milli)
            if self.share_order == "index-distinct":
                return _share_candidates_by_index(node, milli, distinct=True)
            return _share_candidates(node, milli)
        return _set_candidates(node, count, milli)


def _set_candidates(node: NodeInfo, k: int, milli: int) -> list[DeviceShares]:
    usable = node.usable_free()
    free = tuple(i for i, room in enumerate(usable) if room >= milli)
    if len(free) < k:
        return []
    if node.pair_scores is None:
        return [tuple((i, milli) for i in free[:k])]
    numa = tuple(device.numa for device in node.devices)
    return [link_facts(node.pair_scores).choose(free, k, milli, numa)]


def _share_candidates(node: NodeInfo, milli: int) -> list[DeviceShares]:
    """Every fitting device, best fit first, one per (free milli, connectivity) class:
    devices alike in both leave the node alike, so proposing more than one of them only
    costs the planner time. Without links every device's connectivity is 0 and the
    classes are just the distinct free amounts."""
    usable = node.usable_free()
    fitting = [i for i, room in enumerate(usable) if room >= milli]
    if node.pair_scores is None:
        classes = {usable[i]: i for i in reversed(fitting)}  # lowest index per amount
        return [((classes[room], milli),) for room in sorted(classes)]
    keyed = sorted((usable[i], connectivity_to_fully_free(node, i, usable), i) for i in fitting)
    result: list[DeviceShares] = []
    last: tuple[int, int] | None = None
    for room, joined, index in keyed:
        if (room, joined) != last:
            result.append(((index, milli),))
            last = (room, joined)
    return result


def _share_candidates_by_index(
    node: NodeInfo, milli: int, distinct: bool = False
) -> list[DeviceShares]:
    """Every healthy device with room for the share, lowest index first. With
    `distinct` on a node without links, devices with the same free milli are
    interchangeable for any score of free amounts (FGD's), so only the lowest-indexed
    one is proposed: the same choice, made with fewer evaluations."""
    usable = node.usable_free()
    if not distinct or node.pair_scores is not None:
        return [((i, milli),) for i, room in enumerate(usable) if room >= milli]
    seen: set[int] = set()
    result: list[DeviceShares] = []
    for i, room in enumerate(usable):
        if room >= milli and room not in seen:
            seen.add(room)
            result.append(((i, milli),))
    return result
