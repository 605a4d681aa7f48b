"""The planner: a whole gang placed against a snapshot, or nothing.

One call of `plan_gang`:
1. Members whose spec cannot be scheduled (malformed request, refused GPU shape) are
   set aside with their reason.
2. Members are grouped by shape (same requests, GPU request, selectors, tolerations);
   for each shape the feasible nodes are collected from the snapshot's free-capacity
   index, best end first, up to the profile's candidate limit, and scored once.
3. Attempts, each a greedy pass on a fresh PlanningView (so members never count the
   same capacity twice), until one places at least `needed` members:
   - the whole gang inside one topology domain, most specific level first (one host,
     then one rack, then one zone), the tightest domains that can hold it;
   - everywhere, biggest members first, best weighted score;
   - everywhere, most constrained shape first (fewest feasible nodes);
   - everywhere, biggest first, tightest node (first-fit decreasing).
   Within an attempt a node's cached score is recomputed only when a member of this
   gang changed that node.
4. A plan lists every member placed (all that fit, at least `needed`); otherwise the
   result says, per member, why, in kube-scheduler's words plus the gang count.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sortedcontainers import SortedList

from cache.cluster import Placement
from cache.gpu import PRODUCT_LABEL, DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.resources import CPU
from cache.snapshot import PlanningView, Snapshot
from policies.capacity import copies_that_fit
from policies.diagnosis import FilterMemo, first_failure, summarize
from policies.filters.inter_pod_affinity import REASON_AFFINITY
from policies.filters.pod_topology_spread import REASON_MISSING_LABEL, REASON_SKEW
from policies.filters.volume_binding import (
    BIND_CONFLICT,
    ClaimChoice,
    GangVolumes,
    VolumeAssignment,
)
from policies.gpu_models import allowed_models
from policies.interface import GangContext
from policies.node_builds import LargestNodes, NodeBuilds
from policies.pod_constraints import (
    ConstraintAttempt,
    DomainCache,
    GangConstraints,
    MemberConstraints,
)
from policies.profile import Profile
from policies.scores.inter_pod_affinity import normalize as normalize_affinity
from policies.whole_node_reserve import PlannedNode, ReserveGuard, ReserveLedger
from scheduler.gangs.gang import gate_message


class PlannableGang(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def pending(self) -> Sequence[PodInfo]: ...

    @property
    def needed(self) -> int: ...

    @property
    def min_member(self) -> int: ...

    @property
    def bound(self) -> Sequence[PodInfo]: ...

    @property
    def role_needed(self) -> Mapping[str, int]: ...

    def roles_missing(self, placed: Iterable[PodInfo]) -> Mapping[str, tuple[int, int]]: ...

    def role_of(self, pod: PodInfo) -> str | None: ...


@dataclass(frozen=True)
class Plan:
    gang_key: str
    placements: tuple[Placement, ...]
    # Pending members beyond minMember that found no room this time, with the reason.
    left_out: dict[str, str] = field(default_factory=dict)
    score: float = 0.0
    attempt: str = ""
    # pod uid -> what PreBind writes for its unbound WaitForFirstConsumer claims.
    volumes: Mapping[str, tuple[ClaimChoice, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Unschedulable:
    gang_key: str
    needed: int
    placeable: int
    message: str
    # pod uid -> the message that pod should carry (PodScheduled=False, event).
    reasons: dict[str, str] = field(default_factory=dict)


PlanResult = Plan | Unschedulable


@dataclass(slots=True)
class _Choice:
    """The best devices and weighted score for a shape on a node, at a node version."""

    version: int
    feasible: bool
    score: float = 0.0
    shares: DeviceShares = ()


_INFEASIBLE = _Choice(0, feasible=False)


@dataclass(slots=True)
class _Shape:
    pod: PodInfo
    members: list[PodInfo]
    candidates: list[str] = field(default_factory=list)
    choices: dict[str, _Choice] = field(default_factory=dict)
    ranking: _Ranking | None = None
    # Choices on snapshot nodes kept across planning calls (Planner.kept_choices):
    # node name -> (the node's generation when evaluated, the choice). None: not kept.
    kept: dict[str, tuple[int, _Choice]] | None = None


@dataclass(slots=True)
class _Attempt:
    name: str
    placements: list[Placement]
    failed: dict[str, str]  # uid -> reason phrase
    score: float
    view: PlanningView
    volumes: VolumeAssignment | None = None
    # Inter-pod affinity and spread state with this attempt's members placed (None when
    # no such constraint applies to the gang).
    constraints: ConstraintAttempt | None = None
    # The reasons the inter-pod constraints refused nodes to members that then found
    # none (what another order of placement might change).
    refused_by: set[str] = field(default_factory=set)


# Shapes whose choices the planner keeps across calls (least recently planned dropped).
KEPT_SHAPES = 64
# Node choices kept per shape before that shape's keep starts over (4x the default
# candidate limit: a run of alike pods reads about one limit's worth).
KEPT_CHOICES_PER_SHAPE = 512
# (shape, node state) choices kept at most with Profile.node_state (a few MB).
_STATE_CHOICES_KEPT = 1 << 17
# A (shape number, state number) pair as one int: shape x span + state. State numbers
# start over with the table, so they stay far below the span.
_STATE_KEY_SPAN = 1 << 32
# Filters that refuse most nodes in a replay, asked first when only whether a node
# passes matters (the reason's wording follows the profile's order elsewhere).
_MOST_REFUSING = ("resource-fit", "gpu-fit")

# How many nodes a member is offered before its claims are declared unservable.
_VOLUME_TRIES = 64


class _Ranking:
    """Every feasible node of one shape, best choice first, as the snapshot has them.

    Kept across planning calls in exhaustive mode (candidate limit 0, memoizable
    scores) and brought up to date from the snapshot's change log, so that placing a
    pod costs the nodes that changed since the shape was last placed, not every node.

    `order` is a binary heap of keys (-score, rank, name) with lazy removal: a node's
    key is valid while `keys` holds it; an entry left behind by a change is dropped
    when it reaches the head, or when stale entries outnumber valid ones. A replay
    reads only the head (each pod a gang of one), so a change costs one push, not a
    sorted-list removal and insertion; `best_first` walks the heap in order for gangs
    whose later members look further down.
    """

    __slots__ = ("choices", "generation", "keys", "order")

    def __init__(self) -> None:
        self.order: list[tuple[float, int, str]] = []  # a heap, see above
        self.keys: dict[str, tuple[float, int, str]] = {}
        self.choices: dict[str, _Choice] = {}
        self.generation = -1

    def head(self) -> tuple[float, int, str] | None:
        """The best valid key (stale entries above it are dropped), or None."""
        order, keys = self.order, self.keys
        while order:
            key = order[0]
            if keys.get(key[2]) == key:
                return key
            heapq.heappop(order)
        return None

    def candidates(self) -> list[str]:
        """Every feasible node, best first: the candidate order of the later attempts
        (first-fit decreasing keeps the first of equally tight nodes). In the order of
        `keys` instead, which is the order nodes entered the ranking, a kept ranking
        and a fresh one would break those ties differently."""
        return [name for _, _, name in sorted(self.keys.values())]

    def best_first(self) -> Iterator[tuple[float, int, str]]:
        """Every valid key, best first, without disturbing the heap: a walk of the
        heap's tree by a second heap of the frontier (a key may come twice when a node
        went back to a key it had: harmless to a search for the first that fits)."""
        order, keys = self.order, self.keys
        if not order:
            return
        frontier = [(order[0], 0)]
        size = len(order)
        while frontier:
            key, position = heapq.heappop(frontier)
            if keys.get(key[2]) == key:
                yield key
            child = 2 * position + 1
            if child < size:
                heapq.heappush(frontier, (order[child], child))
                if child + 1 < size:
                    heapq.heappush(frontier, (order[child + 1], child + 1))


# A node's place in the tight capacity walk, and a window entry's place by merit.
_WalkKey = tuple[int, str]
_BestKey = tuple[float, int, _WalkKey]
# A greedy pass's choice of node for one member: (pod, its shape, the attempt's view,
# the gang so far, the nodes allowed (None: all)) -> (node, choice), or None.
_Pick = Callable[
    [PodInfo, _Shape, PlanningView, GangContext, frozenset[str] | None],
    tuple[str, _Choice] | None,
]


class _Window:
    """For one shape planned as a lone member, the first `limit` nodes of the tight
    capacity walk that pass its filters (what `_collect_candidates` gathers), with
    their choices, ordered best first: kept across planning calls and brought up to
    date from the snapshot's change log, so that a stream of one-pod gangs of one
    template pays for the nodes that changed, not for the whole window every time.

    What makes the update exact: a node whose generation did not move keeps its walk
    key, its filter answer and its choice. So after a change, the window's nodes that
    did not change are still in (in walk order), the unchanged nodes before its last
    key are still out, and only the changed nodes, and the walk past the old last key
    when the window came up short, need looking at."""

    __slots__ = ("best", "complete", "entries", "generation", "keys")

    def __init__(self) -> None:
        self.keys = SortedList()  # walk keys (free amount, name) of the window's nodes
        # (-score, rank, walk key) of those whose choice fits: the first is the pick
        # (best score, then lower rank, then the earlier in the walk, as in the walk).
        self.best = SortedList()
        # name -> (walk key, choice, its key in `best` or None)
        self.entries: dict[str, tuple[_WalkKey, _Choice, _BestKey | None]] = {}
        # The walk reached the end of the index: every node passing the filters is in.
        self.complete = False
        # The snapshot generation it is up to date with; -1: to be built.
        self.generation = -1

    def reset(self) -> None:
        self.keys.clear()
        self.best.clear()
        self.entries.clear()
        self.complete = False
        self.generation = -1

    def add(self, key: _WalkKey, choice: _Choice, rank: int) -> None:
        ranked = (-choice.score, rank, key) if choice.feasible else None
        self.keys.add(key)
        if ranked is not None:
            self.best.add(ranked)
        self.entries[key[1]] = (key, choice, ranked)

    def drop(self, name: str) -> None:
        entry = self.entries.pop(name, None)
        if entry is not None:
            self.keys.remove(entry[0])
            if entry[2] is not None:
                self.best.remove(entry[2])


class Planner:
    """Plans gangs one at a time. Between calls it keeps filter answers for unchanged
    nodes (FilterMemo), which makes a diagnosis over every node affordable, and in
    exhaustive mode a ranking of every node per shape."""

    def __init__(self, profile: Profile, max_rankings: int = 256, explain: bool = True) -> None:
        self.profile = profile
        # Whether to word kube-scheduler style reasons for gangs that do not fit: a
        # pass over every node. A caller that only needs to know (the simulator) says no.
        self.explain = explain
        self.memo = FilterMemo(profile.filters)
        self.max_rankings = max_rankings
        self._rankings: OrderedDict[Hashable, _Ranking] = OrderedDict()
        # With Profile.node_state: each node's state key at its generation, and the
        # choice per (shape signature, state key).
        self._state_keys: dict[str, tuple[int, int]] = {}
        self._state_choices: dict[int, _Choice] = {}
        self._feasibility_filters = sorted(
            profile.filters,
            key=lambda check: (
                _MOST_REFUSING.index(check.name) if check.name in _MOST_REFUSING else 99
            ),
        )
        self._state_numbers: dict[Hashable, int] = {}
        self._shape_numbers: dict[Hashable, int] = {}
        self._ranked_snapshot: Snapshot | None = None
        # Eligible topology-spread domains, kept while node labels stay put.
        self.domains = DomainCache()
        # Bounded mode's answer to the rankings: per shape, the choice on each node it
        # was evaluated on, valid while the node's generation is the same. A run of
        # alike pods (one-pod gangs of one template, a Deployment's replicas) then pays
        # device choice and scoring only for the nodes that changed since the last of
        # them was planned (kube-scheduler 1.35 batches identical pods for this).
        self._kept: OrderedDict[Hashable, dict[str, tuple[int, _Choice]]] = OrderedDict()
        self._kept_snapshot: Snapshot | None = None
        # Profile.learning_step when the rankings, state choices, kept choices and
        # windows were kept.
        self._learning_step: tuple[int, ...] = ()
        # Lone members' windows per shape (_Window), against `_windows_snapshot`.
        self._windows: OrderedDict[Hashable, _Window] = OrderedDict()
        self._windows_snapshot: Snapshot | None = None
        # Profile.whole_node_reserve's cluster summary, caught up with `_reserve_snapshot`.
        self._reserve_ledger: ReserveLedger | None = None
        self._reserve_snapshot: Snapshot | None = None
        # What the cluster's nodes are built with, for a learnt reserve's classes,
        # caught up with `_builds_snapshot`.
        self._node_builds = NodeBuilds()
        self._builds_snapshot: Snapshot | None = None

    def plan(
        self, gang: PlannableGang, snapshot: Snapshot, volumes: GangVolumes | None = None
    ) -> PlanResult:
        """`volumes`: the members' unbound claims and attach-limited CSI volumes; each
        attempt then gives the claims PVs or provisioning on the proposed nodes, never
        one PV to two members, and never attaches more than a node's limit."""
        self._follow_learning()
        return _GangPlanning(self, gang, snapshot, volumes or GangVolumes()).run()

    def _follow_learning(self) -> None:
        """Drop the kept answers of scores whose learnt workload has moved a step since
        they were kept (Profile.learning_step): between steps they stay valid."""
        step = self.profile.learning_step()
        if step != self._learning_step:
            self._learning_step = step
            self._rankings.clear()
            self._state_choices.clear()
            self._kept.clear()
            self._windows.clear()

    @property
    def exhaustive(self) -> bool:
        return self.profile.candidate_limit == 0 and self.profile.memoizable

    def kept_choices(
        self, pod: PodInfo, snapshot: Snapshot
    ) -> dict[str, tuple[int, _Choice]] | None:
        """The choices kept for `pod`'s shape on `snapshot`'s nodes (filled in by the
        caller), or None when they cannot be kept: scores that are not a function of
        pod shape and node state. Keyed by node generation, which the cache bumps on
        every change of a node (a node with generation 0 was never through a cache and
        is evaluated every time)."""
        if not self.profile.memoizable:
            return None
        if snapshot is not self._kept_snapshot:
            self._kept.clear()
            self._kept_snapshot = snapshot
        signature = pod.node_signature()
        kept = self._kept.get(signature)
        if kept is None:
            kept = self._kept[signature] = {}
            if len(self._kept) > KEPT_SHAPES:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(signature)
            if len(kept) > KEPT_CHOICES_PER_SHAPE:
                # Bounded memory: a shape planned for days reaches every node, and
                # entries of nodes long changed are never read again. Start over.
                kept.clear()
        return kept

    def window(self, pod: PodInfo, snapshot: Snapshot) -> _Window:
        """The lone-member window of `pod`'s shape on `snapshot` (new and empty the
        first time: its generation then says it must be built)."""
        if snapshot is not self._windows_snapshot:
            self._windows.clear()
            self._windows_snapshot = snapshot
        signature = pod.node_signature()
        window = self._windows.get(signature)
        if window is None:
            window = self._windows[signature] = _Window()
            if len(self._windows) > KEPT_SHAPES:
                self._windows.popitem(last=False)
        else:
            self._windows.move_to_end(signature)
        return window

    def reserve_ledger(self, snapshot: Snapshot) -> ReserveLedger | None:
        """The whole-node reserve's summary of `snapshot` (None without a reserve),
        caught up from its change log like the rankings."""
        source = self.profile.whole_node_reserve
        if source is None:
            return None
        # A learnt reserve may have been rebuilt (more pods seen, other nodes).
        reserve = source.current(lambda: self._largest_nodes(snapshot))
        ledger = self._reserve_ledger
        anew = (
            ledger is None
            or ledger.reserve is not reserve
            or snapshot is not self._reserve_snapshot
            or not snapshot.remembers(ledger.generation)
        )
        if ledger is None or anew:
            ledger = self._reserve_ledger = ReserveLedger(reserve)
            self._reserve_snapshot = snapshot
        _catch_up(ledger, snapshot, anew)
        return ledger

    def _largest_nodes(self, snapshot: Snapshot) -> LargestNodes:
        """What the nodes of `snapshot` are built with, caught up from its change log."""
        builds = self._node_builds
        anew = snapshot is not self._builds_snapshot or not snapshot.remembers(builds.generation)
        if anew:
            builds = self._node_builds = NodeBuilds()
            self._builds_snapshot = snapshot
        _catch_up(builds, snapshot, anew)
        return builds.largest

    def reserving(self, snapshot: Snapshot) -> bool:
        """Whether a whole-node reserve has classes to keep (a learnt one has none until
        a pod asking whole GPUs some node could hold has been seen): the fast paths that
        skip it apply otherwise."""
        source = self.profile.whole_node_reserve
        if source is None:
            return False
        return bool(source.current(lambda: self._largest_nodes(snapshot)).requests)

    def rank(self, name: str) -> int:
        ranks = self.profile.node_rank
        return ranks.get(name, 0) if ranks is not None else 0

    def ranking(self, pod: PodInfo, snapshot: Snapshot) -> _Ranking:
        """The shape's ranking, caught up with the snapshot."""
        if snapshot is not self._ranked_snapshot:
            self._rankings.clear()
            self._ranked_snapshot = snapshot
        signature = pod.node_signature()
        ranking = self._rankings.get(signature)
        names: Iterable[str]
        if ranking is not None and not snapshot.remembers(ranking.generation):
            ranking = None  # too far behind to catch up: start over
        if ranking is None:
            ranking = self._rankings[signature] = _Ranking()
            if len(self._rankings) > self.max_rankings:
                self._rankings.popitem(last=False)
            names = snapshot.nodes.keys()
        else:
            self._rankings.move_to_end(signature)
            names = snapshot.changed_since(ranking.generation)
        keys, order, choices = ranking.keys, ranking.order, ranking.choices
        fresh = not keys  # a new ranking is heapified once at the end, not node by node
        added: list[tuple[float, int, str]] = []
        if self.profile.node_state is not None:
            updates = self._state_choices_of(signature, pod, snapshot, names)
        else:
            updates = self._node_choices_of(signature, pod, snapshot, names)
        rank = self.rank
        push = heapq.heappush
        for name, choice in updates:
            old = keys.get(name)
            if choice is not None and choice.feasible:
                choices[name] = choice
                score = -choice.score
                if old is None:
                    key = keys[name] = (score, rank(name), name)
                    if fresh:
                        added.append(key)
                    else:
                        push(order, key)
                elif old[0] != score:  # an unchanged key keeps its entry
                    key = keys[name] = (score, old[1], name)  # a node's rank never moves
                    push(order, key)
            elif old is not None:
                del keys[name]  # its entry is stale from now on
                del choices[name]
        if added:
            order.extend(added)
            heapq.heapify(order)
        if len(order) > 2 * len(keys) + 64:
            order[:] = keys.values()
            heapq.heapify(order)
        ranking.generation = snapshot.generation
        return ranking

    def _node_choices_of(
        self, signature: Hashable, pod: PodInfo, snapshot: Snapshot, names: Iterable[str]
    ) -> Iterator[tuple[str, _Choice | None]]:
        """The shape's choice on each named node (None: the node is gone), evaluated
        per node with the filter memo."""
        memo = self.memo.for_shape(signature, pod, snapshot.nodes.keys())
        for name in names:
            node = snapshot.nodes.get(name)
            if node is None:
                yield name, None
            elif memo.first_failure(node) is None:
                yield name, evaluate_choice(self.profile, pod, node, 0)
            else:
                yield name, _INFEASIBLE

    def _state_choices_of(
        self, signature: Hashable, pod: PodInfo, snapshot: Snapshot, names: Iterable[str]
    ) -> Iterator[tuple[str, _Choice | None]]:
        """The shape's choice on each named node (None: the node is gone), shared by
        every node in the same state (Profile.node_state). Choices are never mutated,
        so one object may serve many nodes.

        This is the hot loop of a trace replay (10^5 to 10^6 turns), written flat: the
        per-name filter memo is skipped (the (shape, state) table already answers for an
        unchanged node), and only whether some filter refuses matters, not which one, so
        the filters run in `_feasibility_filters` order (those that refuse most first)."""
        node_state = self.profile.node_state
        assert node_state is not None
        if len(self._state_keys) > 2 * len(snapshot.nodes) + 64:
            self._state_keys.clear()  # nodes that are gone
        if len(self._state_choices) >= _STATE_CHOICES_KEPT:
            # States of the past rarely come back: start over.
            self._state_choices.clear()
            self._state_numbers.clear()
            self._shape_numbers.clear()
            self._state_keys.clear()
        # States and signatures are numbered once: hashing their nested tuples on
        # every look-up would cost what the table saves. A (shape, state) pair is one
        # int: shape numbers are few, state numbers below _STATE_CHOICES_KEPT x 2.
        shape = self._shape_numbers.setdefault(signature, len(self._shape_numbers))
        base = shape * _STATE_KEY_SPAN
        state_keys, state_numbers = self._state_keys, self._state_numbers
        state_choices = self._state_choices
        nodes = snapshot.nodes
        filters = self._feasibility_filters
        profile = self.profile
        for name in names:
            node = nodes.get(name)
            if node is None:
                yield name, None
                continue
            known = state_keys.get(name)
            if known is None or known[0] != node.generation:
                number = state_numbers.setdefault(node_state(node), len(state_numbers))
                known = state_keys[name] = (node.generation, number)
            key = base + known[1]
            choice = state_choices.get(key)
            if choice is None:
                for check in filters:
                    if check.filter(pod, node) is not None:
                        choice = _INFEASIBLE
                        break
                else:
                    choice = evaluate_choice(profile, pod, node, 0)
                state_choices[key] = choice
            yield name, choice


def evaluate_choice(profile: Profile, pod: PodInfo, node: NodeInfo, version: int) -> _Choice:
    """The best device set for `pod` on `node` and its weighted node score."""
    best: _Choice | None = None
    scores = profile.node_scores
    for shares in profile.chooser.candidates(pod, node):
        # A plain loop: this runs ~10^5 times per trace replay.
        total = 0.0
        for score, weight in scores:
            total += weight * score.score(pod, node, shares, _NO_GANG)
        if best is None or total > best.score:
            best = _Choice(version, True, total, shares)
    return best or _Choice(version, feasible=False)


class _NodeSummary(Protocol):
    """A summary kept per node and caught up from a snapshot's change log."""

    generation: int

    def update(self, nodes: Mapping[str, NodeInfo], names: Iterable[str]) -> None: ...


def _catch_up(summary: _NodeSummary, snapshot: Snapshot, anew: bool) -> None:
    """Bring `summary` up to `snapshot`: every node when it is new (`anew`), else the
    nodes changed since its generation."""
    if anew:
        summary.update(snapshot.nodes, snapshot.nodes.keys())
    elif summary.generation != snapshot.generation:
        summary.update(snapshot.nodes, snapshot.changed_since(summary.generation))
    summary.generation = snapshot.generation


def _keeping(guard: ReserveGuard, view: PlanningView) -> Callable[[str, _Choice], bool]:
    """Whether placing the guarded pod on a node, on its choice's devices, keeps the
    whole-node reserve."""
    return lambda name, choice: not guard.breaks(view.node(name), choice.shares)


def _last_resort(guard: ReserveGuard, view: PlanningView) -> Callable[[str, _Choice], bool]:
    """Whether the guarded pod may go to a node when none keeps the reserve."""
    return lambda name, choice: guard.may_break(view.node(name), choice.shares)


def plan_gang(profile: Profile, gang: PlannableGang, snapshot: Snapshot) -> PlanResult:
    """Plan one gang with no memory of earlier calls."""
    return Planner(profile).plan(gang, snapshot)


def _dependence(pod: PodInfo) -> int:
    """Members whose own inter-pod constraints read where the others go are placed
    after them: unconstrained members first, then spread and anti-affinity, then
    required affinity (a member with affinity to its fellow members can only follow
    them). A member judged before the others it counts could not see them."""
    terms = pod.pod_affinity
    if terms is not None and terms.required:
        return 2
    return 1 if pod.has_pod_constraints else 0


def _size_key(pod: PodInfo) -> tuple[int, int]:
    """Biggest first: GPU milli, then CPU."""
    return (-pod.gpu.total_milli, -pod.requests.get(CPU, 0))


class _GangPlanning:
    def __init__(
        self,
        planner: Planner,
        gang: PlannableGang,
        snapshot: Snapshot,
        volumes: GangVolumes,
    ) -> None:
        self.planner = planner
        self.volumes = volumes
        self.profile = planner.profile
        self.memo = planner.memo
        self.gang = gang
        self.snapshot = snapshot
        self.versions = itertools.count(1)
        self.refused: dict[str, str] = {}
        self.shapes: dict[Hashable, _Shape] = {}
        self.members: list[PodInfo] = []
        for pod in gang.pending:
            if pod.problems:
                self.refused[pod.uid] = "; ".join(pod.problems)
                continue
            if pod.scheduling_gates:  # the API server refuses to bind a gated pod
                self.refused[pod.uid] = gate_message(pod)
                continue
            self.members.append(pod)
            signature = pod.placement_signature()
            shape = self.shapes.get(signature)
            if shape is None:
                self.shapes[signature] = _Shape(pod, [pod])
            else:
                shape.members.append(pod)
        self.shape_of = {pod.uid: shape for shape in self.shapes.values() for pod in shape.members}
        self.member_by_uid = {pod.uid: pod for pod in self.members}
        # Inter-pod affinity and topology spread: checked on top of the node filters,
        # against running pods and the members placed before in the same attempt.
        self.constraints = GangConstraints(self.members, snapshot, planner.domains)
        self.constrained = self.constraints.pods_constrained()
        self.scored = self.constraints.pods_scored()
        # While a constrained member is being placed: whether a node passes its
        # inter-pod constraints in the current attempt.
        self._admit: Callable[[str], bool] | None = None
        # While a member is picked within the whole-node reserve: whether a node and
        # choice leave every short class its nodes (None: no such restriction).
        self._keep: Callable[[str, _Choice], bool] | None = None
        self._state: ConstraintAttempt | None = None
        # The reserve ledger's reading of attempts' changed nodes, by view version.
        self._planned_nodes: dict[int, PlannedNode] = {}
        self._planned_by: ReserveLedger | None = None
        # Per member uid: Profile.preference's test of node names (None: no preference).
        self._preferred: dict[str, Callable[[str], bool] | None] = {}

    # --- the call ---------------------------------------------------------------------
    def run(self) -> PlanResult:
        needed = self.gang.needed
        if len(self.members) < needed:
            return self._refuse(needed)
        single = self._lone_member()
        if single is not None:
            plan = self._plan_lone_member(single)
            if plan is not None:
                return plan
        elif self.planner.exhaustive and self._ranking_alone():
            plan = self._plan_ranked_member()
            if plan is not None:
                return plan
        for shape in self.shapes.values():
            if shape is single:
                continue  # its candidates were collected by _plan_lone_member
            if self.planner.exhaustive:
                shape.ranking = self.planner.ranking(shape.pod, self.snapshot)
                if not self._ranking_alone():
                    shape.candidates = shape.ranking.candidates()
            else:
                shape.kept = self.planner.kept_choices(shape.pod, self.snapshot)
                self._collect_candidates(shape)
        best: _Attempt | None = None
        chosen: _Attempt | None = None
        for attempt in self._attempts():
            if best is None or len(attempt.placements) > len(best.placements):
                best = attempt
            if self._enough(attempt, needed):
                chosen = best = attempt
                break
        if best is not None and chosen is not None:
            return Plan(
                gang_key=self.gang.key,
                placements=tuple(best.placements),
                left_out={
                    uid: self._explain(uid, best) if self.planner.explain else "no room"
                    for uid in best.failed
                },
                score=best.score,
                attempt=best.name,
                volumes=(
                    {
                        uid: claims
                        for uid, claims in best.volumes.by_pod.items()
                        if uid not in best.failed
                    }
                    if best.volumes is not None
                    else {}
                ),
            )
        return self._unschedulable(needed, best)

    def _enough(self, attempt: _Attempt, needed: int) -> bool:
        """At least `needed` members placed, and every role's minimum met."""
        if len(attempt.placements) < max(needed, 1):
            return False
        placed = [self.member_by_uid[p.pod_uid] for p in attempt.placements]
        return not self.gang.roles_missing(placed)

    def _attempts(self) -> Iterator[_Attempt]:
        by_size = sorted(
            self.members, key=lambda p: (_dependence(p), _size_key(p), p.created, p.name)
        )
        if len(self.members) > 1:
            yield from self._domain_attempts(by_size)
        first = self._greedy("best-score", by_size, None, self._best_scored)
        yield first
        if self.planner.exhaustive and self._ranking_alone():
            for shape in self.shapes.values():  # the later attempts walk the candidates
                assert shape.ranking is not None
                shape.candidates = shape.ranking.candidates()
        if first.refused_by & _SPREAD_REASONS:
            # Spread first: each member to the least-filled domain of its constraints,
            # so that the gang fills the domains level by level (docs/policies.md).
            yield self._greedy("spread-balanced", by_size, None, self._least_filled)
        if len(self.shapes) > 1:
            constrained = sorted(
                self.members,
                key=lambda p: (
                    _dependence(p),
                    len(self.shape_of[p.uid].candidates),
                    _size_key(p),
                    p.name,
                ),
            )
            yield self._greedy("most-constrained-first", constrained, None, self._best_scored)
        yield self._greedy("first-fit-decreasing", by_size, None, self._tightest)
        anchors = self.constraints.anchors(self.members) if self.constrained else []
        if anchors and REASON_AFFINITY in first.refused_by:
            # Members with affinity to fellow members go first, that affinity deferred,
            # and the rest gather around them (network topology prefers their hosts);
            # the finished placement is then judged whole like every other.
            leading = {pod.uid for pod in anchors}
            order = [pod for pod in by_size if pod.uid in leading]
            order += [pod for pod in by_size if pod.uid not in leading]
            yield self._greedy("affinity-anchors-first", order, None, self._best_scored, leading)
        if self.gang.role_needed:
            # Per-role minimums (scheduler/gangs/roles.py): the members a role still needs
            # first, so that room runs out, if it does, on members beyond the minimums.
            order = _roles_first(self.gang, by_size)
            yield self._greedy("required-roles-first", order, None, self._best_scored)

    def _ranking_alone(self) -> bool:
        """Whether the "best-score" attempt needs nothing but the exhaustive ranking:
        one plain member (no inter-pod constraint or score, no volumes), which the
        ranking's head decides, so that its candidate list (every feasible node) is
        only made if a later attempt must walk it. A replay's every pod is one."""
        return (
            len(self.members) == 1 and not self.volumes and not self.constrained and not self.scored
        )

    def _plan_ranked_member(self) -> Plan | None:
        """What the "best-score" attempt decides for a lone plain member in exhaustive
        mode, without the attempt's bookkeeping (a view, a context, a record): the
        ranking's head, the gang having changed no node yet. None when the ranking is
        empty, or when the gang's roles or refused members need the general path, which
        then says why (tests/scheduler/test_planner_ranking.py compares the two)."""
        if (
            self.refused
            or self.gang.role_needed
            or self.profile.preference is not None
            or self.planner.reserving(self.snapshot)
        ):
            return None  # the general path says why, or applies the preference or reserve
        shape = next(iter(self.shapes.values()))
        ranking = self.planner.ranking(shape.pod, self.snapshot)
        head = ranking.head()
        if head is None or self.gang.roles_missing(shape.members):
            return None
        name = head[2]
        choice = ranking.choices[name]
        return Plan(
            gang_key=self.gang.key,
            placements=(Placement(shape.pod.uid, name, choice.shares),),
            score=0.0 + choice.score,
            attempt="best-score",
        )

    # --- one member: candidates and choice in one pass ----------------------------------
    def _lone_member(self) -> _Shape | None:
        """The shape of a gang with one plain member to place (a one-pod gang, or the
        last member of a partly bound one), when `_plan_lone_member` applies: bounded
        mode with kept choices, no inter-pod constraint or score, no volumes, no role
        minimum and no refused member (whose reason the general path words); with a
        node preference or whole-node reserve, only from the window, whose pick applies
        them."""
        if len(self.members) != 1 or self.refused or self.volumes:
            return None
        if self.constrained or self.scored or self.gang.role_needed:
            return None
        if self.planner.exhaustive or not self.profile.candidate_limit:
            return None
        if not self._lone_window_applies() and (
            self.profile.preference is not None or self.planner.reserving(self.snapshot)
        ):
            return None  # the general path's pick applies them; the window's does too
        shape = next(iter(self.shapes.values()))
        shape.kept = self.planner.kept_choices(shape.pod, self.snapshot)
        return shape if shape.kept is not None else None

    def _plan_lone_member(self, shape: _Shape) -> Plan | None:
        """What `_collect_candidates` and then the "best-score" attempt decide for a
        lone member, in one walk of the capacity index: the same candidates (the first
        `candidate_limit` nodes passing the filters), the same kept choices, the same
        winner (best weighted score, then lower rank, then the earlier candidate). A
        one-pod gang pays this walk on every cycle, so it is written for speed; the
        general path stays the reference (tests/scheduler/test_planner_lone_member.py
        compares them). None when no candidate fits: the general path then explains
        why, with the candidates collected here."""
        if self._lone_window_applies():
            found = self._lone_from_window(shape)
        else:
            found = self._lone_by_walk(shape)
        if found is None:
            return None
        name, choice = found
        return Plan(
            gang_key=self.gang.key,
            placements=(Placement(shape.pod.uid, name, choice.shares),),
            score=0.0 + choice.score,
            attempt="best-score",
        )

    def _lone_window_applies(self) -> bool:
        """Whether a lone member is planned from its shape's window (_Window): a tight
        walk, and a snapshot kept by a cache (whose change log catches the window up)."""
        return self.profile.prefers_tight and self.snapshot.generation > 0

    def _lone_by_walk(self, shape: _Shape) -> tuple[str, _Choice] | None:
        """The lone member's candidates and best choice from a walk of the index."""
        pod = shape.pod
        kept = shape.kept
        assert kept is not None
        limit = max(self.profile.candidate_limit, 2)
        models = allowed_models(pod)
        nodes = self.snapshot.nodes
        memo = self.memo.for_shape(pod.node_signature(), pod, nodes.keys())
        candidates = shape.candidates
        ranks = self.profile.node_rank
        best_name = ""
        best_choice: _Choice | None = None
        best_key = (float("inf"), 0)
        for name in self.snapshot.candidates(
            pod.gpu.count, pod.gpu.milli, pod.requests.get(CPU, 0), self.profile.prefers_tight
        ):
            node = nodes[name]
            if models is not None and node.labels.get(PRODUCT_LABEL) not in models:
                continue
            generation = node.generation
            entry = kept.get(name)
            if entry is not None and generation and entry[0] == generation:
                # Kept choices are only ever stored for nodes that passed the filters at
                # that generation (candidates): no need to ask the memo again.
                choice = entry[1]
            else:
                if memo.first_failure(node) is not None:
                    continue
                choice = evaluate_choice(self.profile, pod, node, 0)
                kept[name] = (generation, choice)
            candidates.append(name)
            if choice.feasible:
                key = (-choice.score, ranks.get(name, 0) if ranks is not None else 0)
                if key < best_key:
                    best_name, best_choice, best_key = name, choice, key
            if len(candidates) >= limit:
                break
        return None if best_choice is None else (best_name, best_choice)

    def _lone_from_window(self, shape: _Shape) -> tuple[str, _Choice] | None:
        """The lone member's best choice from its shape's window (see _Window), built
        on first use and then caught up with the nodes changed since."""
        pod = shape.pod
        kept = shape.kept
        assert kept is not None
        snapshot = self.snapshot
        window = self.planner.window(pod, snapshot)
        limit = max(self.profile.candidate_limit, 2)
        request = (pod.gpu.count, pod.gpu.milli, pod.requests.get(CPU, 0))
        nodes = snapshot.nodes
        models = allowed_models(pod)
        memo = self.memo.for_shape(pod.node_signature(), pod, nodes.keys())
        ranks = self.profile.node_rank

        trusted = True

        def admit(name: str, key: tuple[int, str]) -> bool:
            """Whether the node passes; into the window with its choice if so."""
            nonlocal trusted
            node = nodes[name]
            if not node.generation:
                # Never through a cache: its changes are not logged, so the window
                # cannot be caught up past this call.
                trusted = False
            if models is not None and node.labels.get(PRODUCT_LABEL) not in models:
                return False
            if memo.first_failure(node) is not None:
                return False
            choice = self._kept_choice(kept, pod, node)
            window.add(key, choice, ranks.get(name, 0) if ranks is not None else 0)
            return True

        changed = (
            snapshot.changed_since(window.generation)
            if window.generation >= 0 and snapshot.remembers(window.generation)
            else None
        )
        walk_from: tuple[int, str] | None = None
        if changed is None or len(changed) > limit:
            window.reset()  # start over: one fresh walk
            walking = True
        else:
            last = None if window.complete else window.keys[-1]
            for name in changed:
                window.drop(name)
                key = snapshot.walk_key(name, *request)
                # A changed node past the old last key is met by the walk below, if
                # the window comes up short.
                if key is not None and (last is None or key <= last):
                    admit(name, key)
            while len(window.keys) > limit:
                window.drop(window.keys[-1][1])
                window.complete = False
            walking = len(window.keys) < limit and not window.complete
            walk_from = last
        if walking:
            window.complete = True
            for key in snapshot.tight_walk(*request, walk_from):
                if admit(key[1], key) and len(window.keys) >= limit:
                    window.complete = False
                    break
        window.generation = snapshot.generation if trusted else -1
        found = self._pick_from_window(pod, window)
        if found is None:
            shape.candidates = [name for _, name in window.keys]
        return found

    def _pick_from_window(self, pod: PodInfo, window: _Window) -> tuple[str, _Choice] | None:
        """What the "best-score" attempt's pick decides among the window's nodes: the
        best (score, then rank, then walk order) of the nodes Profile.preference admits,
        else of all, first among those that keep the whole-node reserve, then among
        those its last resort allows (`_pick_within_reserve`)."""
        best = window.best
        prefer = self._preference(pod)
        guard = None
        if self.profile.whole_node_reserve is not None:
            view = PlanningView(self.snapshot, self.versions)
            guard = self._reserve_guard(pod, view)
        if guard is None and prefer is None:
            if not best:
                return None
            _, _, (_, name) = best[0]
            return name, window.entries[name][1]
        tests: list[Callable[[str, _Choice], bool] | None] = [None]
        if guard is not None:
            tests = [_keeping(guard, view)]
            if guard.reserve.last_resort != "none":
                tests.append(_last_resort(guard, view))
        for test in tests:
            fallback: tuple[str, _Choice] | None = None
            for _, _, (_, name) in best:
                choice = window.entries[name][1]
                if test is not None and not test(name, choice):
                    continue
                if prefer is None or prefer(name):
                    return name, choice
                if fallback is None:  # the best node, kept in case none is preferred
                    fallback = (name, choice)
            if fallback is not None:
                return fallback
        return None

    # --- candidates -------------------------------------------------------------------
    def _collect_candidates(self, shape: _Shape) -> None:
        pod = shape.pod
        limit = self.profile.candidate_limit
        if limit:
            limit = max(limit, 2 * len(shape.members))
        models = allowed_models(pod)
        nodes = self.snapshot.nodes
        memo = self.memo.for_shape(pod.node_signature(), pod, nodes.keys())
        names = self.snapshot.candidates(
            pod.gpu.count, pod.gpu.milli, pod.requests.get(CPU, 0), self.profile.prefers_tight
        )
        coverage = self._coverage(shape) if limit else None
        base = self.constraints.start() if pod.uid in self.constrained else None
        for name in names:
            node = nodes[name]
            if models is not None and node.labels.get(PRODUCT_LABEL) not in models:
                continue
            if memo.first_failure(node) is not None:
                continue
            if base is not None and base.excluded_for_good(pod, node) is not None:
                continue
            shape.candidates.append(name)
            if coverage is not None and coverage.see(node):
                continue  # short of domains: keep collecting past the bound
            if limit and len(shape.candidates) >= limit:
                break

    def _coverage(self, shape: _Shape) -> _DomainCoverage | None:
        """For a constrained shape, what the candidate bound must also cover: with
        required pod affinity every feasible node (the domain the gang must join is
        not known in advance); with anti-affinity or spread, enough distinct domains
        of each topology key for every member of the shape to have its own."""
        pod = shape.pod
        if pod.uid not in self.constrained:
            return None
        terms = pod.pod_affinity
        if terms is not None and terms.required:
            return _DomainCoverage((), 0, unbounded=True)
        keys = {c.topology_key for c in pod.spread if c.hard}
        if terms is not None:
            keys |= {t.topology_key for t in terms.required_anti}
        for other in self.members:
            if other.pod_affinity is not None:
                keys |= {t.topology_key for t in other.pod_affinity.required_anti}
        return _DomainCoverage(tuple(sorted(keys)), len(shape.members) + 1)

    def _choice(self, shape: _Shape, view: PlanningView, name: str) -> _Choice | None:
        """The shape's best choice on this node as the view has it; None if it does not
        fit. Candidates passed the filters on the snapshot, so only nodes this gang
        changed are filtered again."""
        version = view.version(name)
        if version == 0 and shape.ranking is not None:
            return shape.ranking.choices.get(name)
        cached = shape.choices.get(name)
        if version == 0 and shape.kept is not None and (cached is None or cached.version):
            cached = self._kept_choice(shape.kept, shape.pod, view.node(name))
            shape.choices[name] = cached
        elif cached is None or cached.version != version:
            node = view.node(name)
            if version and first_failure(self.profile.filters, shape.pod, node) is not None:
                cached = _Choice(version, feasible=False)
            else:
                cached = evaluate_choice(self.profile, shape.pod, node, version)
            shape.choices[name] = cached
        return cached if cached.feasible else None

    def _kept_choice(
        self, kept: dict[str, tuple[int, _Choice]], pod: PodInfo, node: NodeInfo
    ) -> _Choice:
        """The shape's choice on a snapshot node, from the planner's keep when the node
        has not changed since it was evaluated."""
        entry = kept.get(node.name)
        if entry is not None and node.generation and entry[0] == node.generation:
            return entry[1]
        choice = evaluate_choice(self.profile, pod, node, 0)
        kept[node.name] = (node.generation, choice)
        return choice

    # --- greedy passes ----------------------------------------------------------------
    def _greedy(
        self,
        name: str,
        order: Sequence[PodInfo],
        allowed: frozenset[str] | None,
        pick: _Pick,
        deferred: frozenset[str] | set[str] = frozenset(),
    ) -> _Attempt:
        view = PlanningView(self.snapshot, self.versions)
        context = GangContext()
        volumes = VolumeAssignment(self.volumes) if self.volumes else None
        state = self.constraints.start() if self.constrained or self.scored else None
        attempt = _Attempt(name, [], {}, 0.0, view, volumes, state)
        self._state = state
        for pod in order:
            shape = self.shape_of[pod.uid]
            admission = (
                _Admission(state, pod, view, pod.uid not in deferred)
                if state and pod.uid in self.constrained
                else None
            )
            self._admit = admission
            found = self._pick_within_reserve(pod, shape, view, context, allowed, pick)
            if found is not None and volumes is not None and self.volumes.concerns(pod.uid):
                found = self._with_volumes(pod, shape, view, context, allowed, pick, found, volumes)
            self._admit = None
            if found is None:
                attempt.failed[pod.uid] = ""
                if admission is not None:
                    attempt.refused_by |= admission.refused
                continue
            node_name, choice = found
            view.place(node_name, pod.requests, choice.shares, pod.host_ports)
            context.record(view.node(node_name), self.profile.topology_keys)
            if state is not None:
                state.place(pod, view.node(node_name))
            attempt.placements.append(Placement(pod.uid, node_name, choice.shares))
            attempt.score += choice.score
        self._state = None
        if state is not None:
            self._drop_violations(attempt, state)
        return attempt

    def _drop_violations(self, attempt: _Attempt, state: ConstraintAttempt) -> None:
        """Judge the finished placement as a whole; members that break a constraint
        once all the others are placed count as not placed."""
        placed = [
            (self.member_by_uid[p.pod_uid], attempt.view.node(p.node)) for p in attempt.placements
        ]
        broken = state.violations(placed)
        if not broken:
            return
        kept = []
        for placement in attempt.placements:
            if placement.pod_uid in broken:
                attempt.failed[placement.pod_uid] = broken[placement.pod_uid]
                member = self.member_by_uid[placement.pod_uid]
                state.place(member, attempt.view.node(placement.node), -1)
            else:
                kept.append(placement)
        attempt.placements = kept

    def _with_volumes(
        self,
        pod: PodInfo,
        shape: _Shape,
        view: PlanningView,
        context: GangContext,
        allowed: frozenset[str] | None,
        pick: _Pick,
        found: tuple[str, _Choice],
        volumes: VolumeAssignment,
    ) -> tuple[str, _Choice] | None:
        """The picked node if the member's unbound claims can be served there (a PV no
        other member took, or provisioning); else the next best node that can."""
        pool = allowed if allowed is not None else frozenset(shape.candidates)
        pool |= frozenset(n for n in view.changed_nodes() if allowed is None or n in allowed)
        for _ in range(_VOLUME_TRIES):
            name = found[0]
            if volumes.admit(pod, view.node(name)):
                return found
            pool -= {name}
            picked = pick(pod, shape, view, context, pool)
            if picked is None:
                return None
            found = picked
        return None

    def _feasible(
        self, shape: _Shape, view: PlanningView, allowed: frozenset[str] | None
    ) -> Iterator[tuple[str, _Choice]]:
        """Candidates that fit as the view has them. The inter-pod constraints
        (`self._admit`) are left to the caller, which asks only about a node that would
        beat its best so far: most candidates never need the question."""
        keep = self._keep
        for name in shape.candidates:
            if allowed is not None and name not in allowed:
                continue
            choice = self._choice(shape, view, name)
            if choice is not None and (keep is None or keep(name, choice)):
                yield name, choice

    def _best_scored(
        self,
        pod: PodInfo,
        shape: _Shape,
        view: PlanningView,
        context: GangContext,
        allowed: frozenset[str] | None,
    ) -> tuple[str, _Choice] | None:
        gang_scores = self.profile.gang_scores if context.placed else ()
        if pod.uid in self.scored and self._state is not None:
            soft = self._state.state_of(pod)
            if soft is not None:
                return self._best_with_inter_pod_scores(pod, shape, view, context, allowed, soft)
        if shape.ranking is not None and not gang_scores:
            return self._best_ranked(shape, shape.ranking, view, allowed)
        best: tuple[str, _Choice] | None = None
        best_key = (1, float("inf"), 0)
        rank = self.planner.rank
        admit = self._admit
        prefer = self._preference(pod)
        for name, choice in self._feasible(shape, view, allowed):
            total = choice.score
            if gang_scores:
                node = view.node(name)
                total += sum(w * s.score(pod, node, choice.shares, context) for s, w in gang_scores)
            key = (0 if prefer is None or prefer(name) else 1, -total, rank(name))
            if key < best_key and (admit is None or admit(name)):
                best, best_key = (name, choice), key
        return best

    def _best_with_inter_pod_scores(
        self,
        pod: PodInfo,
        shape: _Shape,
        view: PlanningView,
        context: GangContext,
        allowed: frozenset[str] | None,
        soft: MemberConstraints,
    ) -> tuple[str, _Choice] | None:
        """Best score with the inter-pod scores added. Those are normalised over the
        nodes compared (kube-scheduler's NormalizeScore), so every candidate is scored
        first; then the best admitted one wins."""
        gang_scores = self.profile.gang_scores if context.placed else ()
        rows: list[tuple[str, _Choice, float]] = []
        for name, choice in self._feasible(shape, view, allowed):
            total = choice.score
            if gang_scores:
                node = view.node(name)
                total += sum(w * s.score(pod, node, choice.shares, context) for s, w in gang_scores)
            rows.append((name, choice, total))
        if not rows:
            return None
        nodes = [view.node(name) for name, _, _ in rows]
        totals = [total for _, _, total in rows]
        weight = self.profile.pod_affinity_weight
        if soft.preferred is not None and weight:
            normal = normalize_affinity([soft.preferred.raw(node) for node in nodes])
            totals = [t + weight * n for t, n in zip(totals, normal, strict=True)]
        weight = self.profile.topology_spread_weight
        if soft.soft_spread is not None and weight:
            spread_scores = soft.soft_spread.scores(nodes)
            totals = [t + weight * n for t, n in zip(totals, spread_scores, strict=True)]
        rank = self.planner.rank
        order = sorted(range(len(rows)), key=lambda i: (-totals[i], rank(rows[i][0])))
        admit = self._admit
        for i in order:
            name, choice, _ = rows[i]
            if admit is None or admit(name):
                return name, choice
        return None

    def _best_ranked(
        self,
        shape: _Shape,
        ranking: _Ranking,
        view: PlanningView,
        allowed: frozenset[str] | None,
    ) -> tuple[str, _Choice] | None:
        """The best node from the shape's ranking, with the nodes this gang changed
        evaluated afresh."""
        best: tuple[str, _Choice] | None = None
        # (1 when Profile.preference does not admit the node, else 0; -score, rank, name)
        best_key: tuple[int, float, int, str] | None = None
        admit = self._admit
        keep = self._keep
        prefer = self._preference(shape.pod)
        choices = ranking.choices

        def fits(name: str) -> bool:
            return (
                (allowed is None or name in allowed)
                and not view.version(name)
                and (keep is None or keep(name, choices[name]))
                and (admit is None or admit(name))
            )

        head = ranking.head()
        walk: Iterable[tuple[float, int, str]] = ()
        if head is not None:
            name = head[2]
            if fits(name):
                best, best_key = (name, choices[name]), (0, *head)
                if prefer is not None and not prefer(name):
                    best_key = (1, *head)  # kept in case no node is preferred
                    walk = itertools.islice(ranking.best_first(), 1, None)
            else:
                # The head was asked already: the walk starts below it.
                walk = itertools.islice(ranking.best_first(), 1, None)
        for key in walk:
            name = key[2]
            if fits(name):
                if prefer is None or prefer(name):
                    best, best_key = (name, choices[name]), (0, *key)
                    break
                if best is None:  # the best ranked node, kept in case none is preferred
                    best, best_key = (name, choices[name]), (1, *key)
        for name in view.changed_nodes():
            if allowed is not None and name not in allowed:
                continue
            choice = self._choice(shape, view, name)
            if choice is None or (admit is not None and not admit(name)):
                continue
            if keep is not None and not keep(name, choice):
                continue
            tier = 0 if prefer is None or prefer(name) else 1
            changed_key = (tier, -choice.score, self.planner.rank(name), name)
            if best_key is None or changed_key < best_key:
                best, best_key = (name, choice), changed_key
        return best

    def _preference(self, pod: PodInfo) -> Callable[[str], bool] | None:
        """Profile.preference's test of node names for `pod`, asked once per plan."""
        preference = self.profile.preference
        if preference is None:
            return None
        if pod.uid not in self._preferred:
            self._preferred[pod.uid] = preference.preferred(pod, self.snapshot)
        return self._preferred[pod.uid]

    def _pick_within_reserve(
        self,
        pod: PodInfo,
        shape: _Shape,
        view: PlanningView,
        context: GangContext,
        allowed: frozenset[str] | None,
        pick: _Pick,
    ) -> tuple[str, _Choice] | None:
        """`pick`'s node among those that keep the whole-node reserve (every node
        without one); when none does, among those its last resort lets the pod break
        ("none": the member waits, as for a lack of room)."""
        guard = self._reserve_guard(pod, view)
        if guard is None:
            return pick(pod, shape, view, context, allowed)
        tests = [_keeping(guard, view)]
        if guard.reserve.last_resort != "none":
            tests.append(_last_resort(guard, view))
        for test in tests:
            self._keep = test
            try:
                found = pick(pod, shape, view, context, allowed)
            finally:
                self._keep = None
            if found is not None:
                return found
        return None

    def _reserve_guard(self, pod: PodInfo, view: PlanningView) -> ReserveGuard | None:
        """The whole-node reserve's guard for `pod` with this attempt's members placed
        (None: no reserve, or no class it may not use is short)."""
        ledger = self.planner.reserve_ledger(self.snapshot)
        if ledger is None:
            return None
        changed = view.changed_nodes()
        return ledger.guard(pod, (self._planned(ledger, view, name) for name in changed))

    def _planned(self, ledger: ReserveLedger, view: PlanningView, name: str) -> PlannedNode:
        """The ledger's reading of a node the attempt changed, once per change: every
        member's guard reads every node changed before it, so a gang of n would
        otherwise pay n^2 / 2 readings per attempt. View versions come from this
        planning's one counter, so a version names one node state of one attempt."""
        if ledger is not self._planned_by:
            self._planned_nodes.clear()  # its class numbers are another reserve's
            self._planned_by = ledger
        version = view.version(name)
        known = self._planned_nodes.get(version)
        if known is None:
            known = self._planned_nodes[version] = ledger.planned(view.node(name))
        return known

    def _tightest(
        self,
        pod: PodInfo,
        shape: _Shape,
        view: PlanningView,
        context: GangContext,
        allowed: frozenset[str] | None,
    ) -> tuple[str, _Choice] | None:
        best: tuple[str, _Choice] | None = None
        room = 1 << 62
        admit = self._admit
        for name, choice in self._feasible(shape, view, allowed):
            copies = copies_that_fit(pod, view.node(name))
            if copies < room and (admit is None or admit(name)):
                best, room = (name, choice), copies
        return best

    def _least_filled(
        self,
        pod: PodInfo,
        shape: _Shape,
        view: PlanningView,
        context: GangContext,
        allowed: frozenset[str] | None,
    ) -> tuple[str, _Choice] | None:
        """The feasible node whose spread domains hold the fewest matching pods; the
        best score among equals."""
        state = self._state
        members = state.state_of(pod) if state else None
        spread = members.spread if members is not None else None
        if spread is None:
            return self._best_scored(pod, shape, view, context, allowed)
        best: tuple[str, _Choice] | None = None
        best_key = (1 << 62, float("inf"), 0)
        rank = self.planner.rank
        for name, choice in self._feasible(shape, view, allowed):
            labels = view.node(name).labels
            load = sum(
                counts.get(labels.get(constraint.topology_key, ""), 0)
                for constraint, counts in zip(spread.constraints, spread.counts, strict=True)
            )
            key = (load, -choice.score, rank(name))
            if key < best_key and (self._admit is None or self._admit(name)):
                best, best_key = (name, choice), key
        return best

    # --- topology domains ---------------------------------------------------------------
    def _domain_attempts(self, order: Sequence[PodInfo]) -> Iterator[_Attempt]:
        """The whole gang inside one domain, most specific level first; at each level
        the two tightest domains that can hold every member (by resources alone)."""
        nodes = self.snapshot.nodes
        keys = self.profile.topology_keys
        # Shapes by position (their signatures are nested tuples, costly to hash per
        # node); copies per shape and candidate are the same at every level: counted once.
        shapes = list(self.shapes.values())
        wanted = [len(shape.members) for shape in shapes]
        copies_of: list[dict[str, int]] = [{} for _ in shapes]
        for level in reversed(range(len(keys))):
            key = keys[level]
            if (self.constrained or self.scored) and self.constraints.one_domain_unwanted(
                self.members, keys[level + 1 :]
            ):
                continue
            capacity: dict[str, list[int]] = {}
            members_of: dict[str, set[str]] = {}
            for position, shape in enumerate(shapes):
                counted = copies_of[position]
                for name in shape.candidates:
                    domain = nodes[name].labels.get(key)
                    if domain is None:
                        continue
                    copies = counted.get(name)
                    if copies is None:
                        copies = counted[name] = copies_that_fit(shape.pod, nodes[name])
                    counts = capacity.get(domain)
                    if counts is None:
                        counts = capacity[domain] = [0] * len(shapes)
                    counts[position] += copies
                    members_of.setdefault(domain, set()).add(name)
            fitting = [
                domain
                for domain, counts in capacity.items()
                if all(have >= need for have, need in zip(counts, wanted, strict=True))
            ]
            preference = self._preferred_domains(order[0], fitting, members_of)
            fitting.sort(key=lambda d: (-preference.get(d, 0), sum(capacity[d]), d))
            for domain in fitting[:2]:
                attempt = self._greedy(
                    "domain", order, frozenset(members_of[domain]), self._best_scored
                )
                if len(attempt.placements) == len(self.members):
                    yield attempt
                    return

    def _preferred_domains(
        self, pod: PodInfo, domains: Sequence[str], members_of: dict[str, set[str]]
    ) -> dict[str, int]:
        """Per domain, the best raw preferred-affinity score of its nodes for `pod`
        (empty when no preferred term concerns the gang): a gang kept in one domain
        goes to the one its members prefer, the tightest among equals."""
        if pod.uid not in self.scored:
            return {}
        state = self.constraints.start().state_of(pod)
        if state is None or state.preferred is None or not state.preferred.scores:
            return {}
        nodes = self.snapshot.nodes
        raw = state.preferred.raw
        return {d: max(raw(nodes[name]) for name in members_of[d]) for d in domains}

    # --- explaining ---------------------------------------------------------------------
    def _explain(self, uid: str, attempt: _Attempt) -> str:
        pod = self.shape_of[uid].pod
        memo = self.memo.for_shape(pod.node_signature(), pod, self.snapshot.nodes.keys())
        view = attempt.view
        reasons: Counter[str] = Counter()
        nodes = 0
        member = self.member_by_uid.get(uid, pod)
        state = attempt.constraints if uid in self.constrained else None
        for name, node in self.snapshot.nodes.items():
            nodes += 1
            if view.version(name):
                reason = first_failure(self.profile.filters, pod, view.node(name))
            else:
                reason = memo.first_failure(node)
            if reason is None and state is not None:
                reason = state.filter(member, view.node(name))
            if reason is not None:
                reasons[reason] += 1
        if not reasons and self.volumes.concerns(uid):
            # Every node passes alone, but the PVs that match (or the attach limits)
            # went to other members.
            return (
                f"0/{nodes} nodes are available: {nodes} {BIND_CONFLICT} or exceed max "
                f"volume count (the matching PersistentVolumes or the nodes' volume "
                f"attach limits were taken by other members of gang {self.gang.key})"
            )
        if not reasons:
            # Every node passes the filters: the gang's own members took the room, or
            # the candidate bound left the rest unseen.
            return (
                f"0/{nodes} nodes are available: the room left was taken by other "
                f"members of gang {self.gang.key}"
            )
        return summarize(nodes, reasons)

    def _gang_line(self, placeable: int, needed: int) -> str:
        total = len(self.gang.bound) + placeable
        return (
            f"gang {self.gang.key}: {total}/{self.gang.min_member} members placeable"
            if needed
            else f"gang {self.gang.key}: no room for the extra members"
        )

    def _refuse(self, needed: int) -> Unschedulable:
        reasons = dict(self.refused)
        message = (
            f"gang {self.gang.key}: {len(self.members)} of {needed} needed members can be "
            f"scheduled; the others are refused: " + "; ".join(sorted(set(reasons.values())))
        )
        for pod in self.members:
            reasons[pod.uid] = message
        return Unschedulable(self.gang.key, needed, len(self.members), message, reasons)

    def _unschedulable(self, needed: int, best: _Attempt | None) -> Unschedulable:
        placeable = len(best.placements) if best else 0
        gang_line = self._gang_line(placeable, needed)
        placed = [self.member_by_uid[p.pod_uid] for p in best.placements] if best else []
        short = self.gang.roles_missing(placed)
        if short:
            gang_line += "; " + ", ".join(
                f"role {role}: {have}/{least} placeable"
                for role, (have, least) in sorted(short.items())
            )
        reasons: dict[str, str] = {}
        first_reason = ""
        if best is not None:
            explained: dict[Hashable, str] = {}
            for uid in best.failed:
                if not self.planner.explain:
                    reasons[uid] = gang_line
                    continue
                signature = self.shape_of[uid].pod.placement_signature()
                if signature not in explained:
                    explained[signature] = self._explain(uid, best)
                reasons[uid] = f"{explained[signature]} ({gang_line})"
                first_reason = first_reason or explained[signature]
            for placement in best.placements:
                reasons[placement.pod_uid] = (
                    f"{gang_line}; this member fits but the gang is placed all or nothing"
                )
        for uid, why in self.refused.items():
            reasons[uid] = f"{why} ({gang_line})"
        message = f"{first_reason} ({gang_line})" if first_reason else gang_line
        return Unschedulable(self.gang.key, needed, placeable, message, reasons)


_SPREAD_REASONS = frozenset({REASON_SKEW, REASON_MISSING_LABEL})


def _roles_first(gang: PlannableGang, order: list[PodInfo]) -> list[PodInfo]:
    """`order` with, for each role short of its minimum, that many of its members first."""
    wanted = dict(gang.role_needed)
    first: list[PodInfo] = []
    for pod in order:
        role = gang.role_of(pod)
        if role is not None and wanted.get(role, 0) > 0:
            wanted[role] -= 1
            first.append(pod)
    chosen = {pod.uid for pod in first}
    return first + [pod for pod in order if pod.uid not in chosen]


# Node scores judge a choice alone; they are handed an empty gang context.
_NO_GANG = GangContext()


class _Admission:
    """Whether a node passes a member's inter-pod constraints in the attempt so far;
    remembers whether it refused any."""

    __slots__ = ("check_affinity", "pod", "refused", "state", "view")

    refused: set[str]

    def __init__(
        self, state: ConstraintAttempt, pod: PodInfo, view: PlanningView, check_affinity: bool
    ) -> None:
        self.state = state
        self.pod = pod
        self.view = view
        self.check_affinity = check_affinity
        self.refused = set()

    def __call__(self, name: str) -> bool:
        reason = self.state.filter(self.pod, self.view.node(name), self.check_affinity)
        if reason is None:
            return True
        self.refused.add(reason)
        return False


class _DomainCoverage:
    """Counts the distinct domains per topology key among collected candidates, to
    say when a constrained shape has enough of them."""

    def __init__(self, keys: tuple[str, ...], wanted: int, unbounded: bool = False) -> None:
        self.keys = keys
        self.wanted = wanted
        self.unbounded = unbounded
        self.seen: dict[str, set[str]] = {key: set() for key in keys}

    def see(self, node: NodeInfo) -> bool:
        """Record a candidate; True while more candidates are still wanted."""
        if self.unbounded:
            return True
        short = False
        for key in self.keys:
            values = self.seen[key]
            value = node.labels.get(key)
            if value is not None:
                values.add(value)
            if len(values) < self.wanted:
                short = True
        return short
