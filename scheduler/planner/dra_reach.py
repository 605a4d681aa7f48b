"""Where each DRA demand can be allocated alone, kept between planning calls
(docs/dra.md, "Whole-gang allocation").

A member's reach is one allocation of its claims on every node, and gangs of one job
(members of one template) ask alike: the same claim specs in the same namespace. For
such a demand, whether a node can serve it depends only on the devices the node reaches
and which of them are taken, the DeviceClasses, the node's labels and the namespace's
labels; DraCache.node_stamp changes whenever the first three may have, so an answer is
reused on a node until its stamp or labels change, and recomputed there only.

The set of nodes that fit (and their topology scores) is kept too, and caught up
(`caught_up`) from the nodes changed since the last call: those the snapshot's change
log names (labels, binds, nodes coming and going) and those whose stamp moved
(DraCache.nodes_changed_since), so that a call on the core's long-lived snapshot reads
the few nodes the last plans touched, not 5,000. Another snapshot, a what-if view, or
a change of reach_epoch asks every node again (each from its kept answer).

Only the yes/no is kept: the allocator's words for a refused node name the member's
claims, so the caller words them afresh. Demands with a claim allocated already are
not kept (their answer follows that allocation, which the stamps do not track), nor
anything while a slice reaches nodes by selector, allNodes or per device
(DraCache.reach_trackable).

A what-if view (cache/dra/view.py: some pods gone, their claims released) shares the
answers of the DraCache it reads: on nodes where it frees no device it answers as that
cache, stamp for stamp; on the others it has no stamp, and there nothing is kept or
reused, so a what-if can neither poison the answers nor be served stale ones.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping

from cache.dra.store import MAX_REMEMBERED_NODES, DraCache
from cache.dra.view import DeviceView
from cache.pod import NodeScores, score_hash
from cache.snapshot import Snapshot

# Demands kept at once (each holds one answer per node it was asked about, at most
# MAX_REMEMBERED_NODES); beyond this the least recently asked goes.
MAX_REMEMBERED_DEMANDS = 32


class _Answers:
    __slots__ = ("by_node", "digest", "fitting", "reach", "scores", "synced", "topology")

    def __init__(self) -> None:
        # node -> (DraCache.node_stamp, the node's labels, whether the demand fits, the
        # topology score of the allocation found, policies/dra/topology.py). The
        # labels are the snapshot's own mapping (never changed in place: a node's update
        # brings a new one), shared, not copied.
        self.by_node: dict[str, tuple[tuple[int, int], Mapping[str, str], bool, float | None]] = {}
        # The snapshot's nodes where the demand fits, each with its topology score (None:
        # neutral), as of `synced`: the snapshot, its generation, the DraCache's
        # reach_epoch and change_clock when last caught up.
        self.fitting: dict[str, float | None] = {}
        self.synced: tuple[weakref.ref[Snapshot], int, int, int] | None = None
        # `fitting` as the pods carry it, until it changes.
        self.reach: frozenset[str] | None = None
        self.topology: NodeScores | None = None
        # The fitting nodes with a score, and their NodeScores hash (cache/pod.py),
        # kept as nodes come and go.
        self.scores: dict[str, float] = {}
        self.digest = 0


class PlainGpuNodes:
    """Per kind of GPU demand (its DeviceClass and selectors): the nodes on which the
    devices it can use are exactly the shared GPUs the node shows, each plain
    (cache/dra/gpu_shares.py, `plain_shared_gpu`). On those, GpuFit on the shown
    GPUs decides whether the demand fits, so its reach needs no allocation per node
    (scheduler/planner/dra_claims.py). Kept until a slice or class changes, or the
    snapshot's nodes or labels do; only while every slice names its node."""

    def __init__(self, max_kinds: int = MAX_REMEMBERED_DEMANDS) -> None:
        self.max_kinds = max_kinds
        self._kept: dict[Hashable, tuple[Hashable, frozenset[str]]] = {}

    def nodes(
        self,
        dra: DraCache,
        snapshot: Snapshot,
        kind: Hashable,
        plain_on: Callable[[str, Mapping[str, str]], bool],
    ) -> frozenset[str]:
        """The nodes of `snapshot` where `plain_on(node, labels)` holds, for `kind`,
        kept while nothing they depend on changed (the same frozenset object then)."""
        stamp = (
            id(dra),
            dra.slice_generation,
            dra.reach_epoch,
            id(snapshot),
            snapshot.labels_generation,
        )
        kept = self._kept.get(kind)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        found = frozenset(
            name for name, node in snapshot.nodes.items() if plain_on(name, node.labels)
        )
        if kind not in self._kept and len(self._kept) >= self.max_kinds:
            del self._kept[next(iter(self._kept))]
        self._kept[kind] = (stamp, found)
        return found


class ReachMemo:
    """Per demand, per node: whether the demand's claims can be allocated there alone,
    for one DraCache at a time."""

    def __init__(self, max_demands: int = MAX_REMEMBERED_DEMANDS) -> None:
        self.max_demands = max_demands
        self._cache: weakref.ref[DraCache] | None = None
        self._demands: dict[Hashable, _Answers] = {}
        self.plain_gpus = PlainGpuNodes()

    def __len__(self) -> int:
        return len(self._demands)

    def answers(self, dra: DeviceView, demand: Hashable) -> _Answers:
        """The kept answers of `demand` against `dra` (empty the first time, or when
        another DraCache is asked about; a what-if view is asked about as the DraCache
        it reads)."""
        source = dra.reach_source
        if self._cache is None or self._cache() is not source:
            self._cache = weakref.ref(source)
            self._demands.clear()
        kept = self._demands.pop(demand, None)
        if kept is None:
            kept = _Answers()
            if len(self._demands) >= self.max_demands:
                del self._demands[next(iter(self._demands))]
        self._demands[demand] = kept  # most recently asked last
        return kept


def fits(
    answers: _Answers,
    dra: DeviceView,
    node: str,
    labels: Mapping[str, str],
    attempt: Callable[[str, Mapping[str, str]], str],
) -> bool:
    """The kept answer for `node` while its stamp and labels stay, else whether
    `attempt` (the allocator's words, "" when the claims fit) finds nothing to say,
    kept."""
    return judge(answers, dra, node, labels, lambda name, seen: (attempt(name, seen), None))[0]


def judge(
    answers: _Answers,
    dra: DeviceView,
    node: str,
    labels: Mapping[str, str],
    attempt: Callable[[str, Mapping[str, str]], tuple[str, float | None]],
) -> tuple[bool, float | None]:
    """As `fits`, with the topology score of the allocation found (None: neutral),
    kept beside the answer: it changes only with what the node reaches or holds
    (nothing is kept where `dra` has no stamp: a what-if's node)."""
    stamp = dra.node_stamp(node)
    if stamp is None:
        words, score = attempt(node, labels)
        return not words, score
    kept = answers.by_node.get(node)
    if kept is not None and kept[0] == stamp and (kept[1] is labels or kept[1] == labels):
        return kept[2], kept[3]
    words, score = attempt(node, labels)
    found = not words
    if kept is None and len(answers.by_node) >= MAX_REMEMBERED_NODES:
        answers.by_node.clear()  # node names churning: the demand's answers start over
    answers.by_node[node] = (stamp, labels, found, score)
    return found, score


def caught_up(
    answers: _Answers,
    dra: DraCache,
    snapshot: Snapshot,
    attempt: Callable[[str, Mapping[str, str]], tuple[str, float | None]],
) -> tuple[frozenset[str], NodeScores | None]:
    """The snapshot's nodes where the demand fits (those that may reach a device and
    `judge` admits) and their topology scores, asking only the nodes changed since the
    last call on the same snapshot: those the snapshot put or removed since (labels,
    binds, nodes coming and going) and those whose DraCache stamp moved. Anything else
    (another snapshot, one too far behind, a new reach_epoch) asks every node, each
    from its kept answer. For a DraCache only: a what-if view has nodes without a
    stamp, which nothing here may keep."""
    synced = answers.synced
    if (
        synced is None
        or synced[0]() is not snapshot
        or not snapshot.remembers(synced[1])
        or synced[2] != dra.reach_epoch
    ):
        names: Iterable[str] = snapshot.nodes
        answers.fitting, answers.scores, answers.digest = {}, {}, 0
        answers.reach = None
    else:
        names = set(snapshot.changed_since(synced[1]))
        names.update(dra.nodes_changed_since(synced[3]))
    fitting, scores = answers.fitting, answers.scores
    for name in names:
        node = snapshot.nodes.get(name)
        fit, score = (
            judge(answers, dra, name, node.labels, attempt)
            if node is not None and dra.may_reach_devices(name)
            else (False, None)
        )
        if fit == (name in fitting) and (not fit or fitting[name] == score):
            continue
        answers.reach = None
        old = scores.pop(name, None)
        if old is not None:
            answers.digest -= score_hash(name, old)
        if fit:
            fitting[name] = score
            if score is not None:
                scores[name] = score
                answers.digest += score_hash(name, score)
        else:
            del fitting[name]
    answers.synced = (weakref.ref(snapshot), snapshot.generation, dra.reach_epoch, dra.change_clock)
    if answers.reach is None:
        answers.reach = frozenset(fitting)
        answers.topology = NodeScores(scores, answers.digest) if scores else None
    return answers.reach, answers.topology
