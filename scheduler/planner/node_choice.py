"""The node kind of choice: a shape's best devices on a node and its weighted score.

Every other part of the planner asks for these; they are evaluated as rarely as the
node states allow. Across planning calls a choice is kept per node generation (the
bounded mode's `KeptChoices`; the exhaustive mode's rankings, ranking.py; the lone
members' windows, window.py); within a call, `Shape.choice` keeps it per version of
the attempt's view, so a node is evaluated again only when a member of this gang
changed it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.snapshot import PlanningView, Snapshot
from policies.diagnosis import first_failure
from policies.interface import GangContext
from policies.profile import Profile

if TYPE_CHECKING:
    from scheduler.planner.ranking import Ranking

# Shapes whose choices the planner keeps across calls (least recently planned dropped).
KEPT_SHAPES = 64
# Node choices kept per shape before that shape's keep starts over (4x the default
# candidate limit: a run of alike pods reads about one limit's worth).
KEPT_CHOICES_PER_SHAPE = 512


@dataclass(slots=True)
class NodeChoice:
    """The best devices and weighted score for a shape on a node, at a node version."""

    version: int
    feasible: bool
    score: float = 0.0
    shares: DeviceShares = ()


INFEASIBLE = NodeChoice(0, feasible=False)

# Node scores judge a choice alone; they are handed an empty gang context.
NO_GANG = GangContext()

# node name -> (the node's generation when evaluated, the choice)
KeptByNode = dict[str, tuple[int, NodeChoice]]


def evaluate_choice(profile: Profile, pod: PodInfo, node: NodeInfo, version: int) -> NodeChoice:
    """The best device set for `pod` on `node` and its weighted node score."""
    best: NodeChoice | None = None
    scores = profile.node_scores
    for shares in profile.chooser.candidates(pod, node):
        # A plain loop: this runs ~10^5 times per trace replay.
        total = 0.0
        for score, weight in scores:
            total += weight * score.score(pod, node, shares, NO_GANG)
        if best is None or total > best.score:
            best = NodeChoice(version, True, total, shares)
    return best or NodeChoice(version, feasible=False)


def kept_choice(profile: Profile, kept: KeptByNode, pod: PodInfo, node: NodeInfo) -> NodeChoice:
    """The shape's choice on a snapshot node, from the keep when the node has not
    changed since it was evaluated (a node with generation 0 was never through a cache
    and is evaluated every time)."""
    entry = kept.get(node.name)
    if entry is not None and node.generation and entry[0] == node.generation:
        return entry[1]
    choice = evaluate_choice(profile, pod, node, 0)
    kept[node.name] = (node.generation, choice)
    return choice


class KeptChoices:
    """Bounded mode's answer to the rankings: per shape, the choice on each node it was
    evaluated on, valid while the node's generation is the same. A run of alike pods
    (one-pod gangs of one template, a Deployment's replicas) then pays device choice and
    scoring only for the nodes that changed since the last of them was planned
    (kube-scheduler 1.35 batches identical pods for this)."""

    __slots__ = ("_by_shape", "_snapshot")

    def __init__(self) -> None:
        self._by_shape: OrderedDict[Hashable, KeptByNode] = OrderedDict()
        self._snapshot: Snapshot | None = None

    def clear(self) -> None:
        self._by_shape.clear()

    def of_shape(self, pod: PodInfo, snapshot: Snapshot) -> KeptByNode:
        """The choices kept for `pod`'s shape on `snapshot`'s nodes, filled in by the
        caller (a new snapshot object starts them over)."""
        if snapshot is not self._snapshot:
            self._by_shape.clear()
            self._snapshot = snapshot
        # Choices are scored, not filtered (candidates passed the filters): pods that
        # differ only in their DRA reach share them.
        signature = pod.choice_signature()
        kept = self._by_shape.get(signature)
        if kept is None:
            kept = self._by_shape[signature] = {}
            if len(self._by_shape) > KEPT_SHAPES:
                self._by_shape.popitem(last=False)
        else:
            self._by_shape.move_to_end(signature)
            if len(kept) > KEPT_CHOICES_PER_SHAPE:
                # Bounded memory: a shape planned for days reaches every node, and
                # entries of nodes long changed are never read again. Start over.
                kept.clear()
        return kept


@dataclass(slots=True)
class Shape:
    """The members of one planning call that look alike to every filter and score
    (same requests, GPU request, selectors, tolerations), with their node choices."""

    pod: PodInfo
    members: list[PodInfo]
    # The nodes the attempts look at, in the order they are walked.
    candidates: list[str] = field(default_factory=list)
    # Within this call: node name -> choice at a view version (see `choice`).
    choices: dict[str, NodeChoice] = field(default_factory=dict)
    # Exhaustive mode: the ranking kept across calls, caught up with the snapshot.
    ranking: Ranking | None = None
    # Bounded mode: the choices kept across calls (None: scores cannot be kept).
    kept: KeptByNode | None = None

    def choice(self, profile: Profile, view: PlanningView, name: str) -> NodeChoice | None:
        """The best choice on this node as the view has it; None if it does not fit.
        Candidates passed the filters on the snapshot, so only nodes this gang changed
        are filtered again."""
        version = view.version(name)
        if version == 0 and self.ranking is not None:
            return self.ranking.choices.get(name)
        cached = self.choices.get(name)
        if version == 0 and self.kept is not None and (cached is None or cached.version):
            cached = kept_choice(profile, self.kept, self.pod, view.node(name))
            self.choices[name] = cached
        elif cached is None or cached.version != version:
            node = view.node(name)
            if version and first_failure(profile.filters, self.pod, node) is not None:
                cached = NodeChoice(version, feasible=False)
            else:
                cached = evaluate_choice(profile, self.pod, node, version)
            self.choices[name] = cached
        return cached if cached.feasible else None
