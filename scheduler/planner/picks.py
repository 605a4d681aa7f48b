"""How a greedy pass picks one member's node: the strategies the attempts are made of
(best weighted score, tightest node, least-filled spread domain), over the shape's
candidates as the attempt's view has them."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field

from cache.pod import PodInfo
from cache.snapshot import PlanningView, Snapshot
from policies.capacity import copies_that_fit
from policies.interface import GangContext
from policies.pod_constraints import ConstraintAttempt, MemberConstraints
from policies.profile import Profile
from policies.scores.inter_pod_affinity import normalize as normalize_affinity
from scheduler.planner.node_choice import NodeChoice, Shape
from scheduler.planner.ranking import Ranking
from scheduler.planner.reserve import NodeTest

# Allowed node sets smaller than this share of the candidates are cut out once (_walk).
_SMALL_SHARE = 8
# A node picked for a member, with its choice there.
Found = tuple[str, NodeChoice]


@dataclass(slots=True)
class Turn:
    """One member's turn in a greedy pass: what its pick sees."""

    pod: PodInfo
    shape: Shape
    view: PlanningView  # the attempt's view, its earlier members placed
    context: GangContext  # where the earlier members went, for gang scores
    allowed: frozenset[str] | None  # the nodes it may go to (None: all candidates)
    # The attempt's inter-pod constraint state (None: no constraint or score applies).
    state: ConstraintAttempt | None = None
    # Its inter-pod constraints as a test of node names (None: it has none).
    admit: Callable[[str], bool] | None = None
    # The whole-node reserve's test of node and choice (None: no such restriction).
    keep: NodeTest | None = None
    # Node -> its weighted score with the gang scores, as `best_scored` added it up:
    # the view and the context stay put during a turn, so a pick again after a node
    # was refused (search.MEMBER_CHOICE_TRIES) reads them instead of scoring anew.
    totals: dict[str, float] = field(default_factory=dict)


# A pick: the member's node and choice, or None when no node will do.
Pick = Callable[[Turn], Found | None]


class Picks:
    """The picks of one planning call (they share its preference answers)."""

    def __init__(
        self,
        profile: Profile,
        snapshot: Snapshot,
        rank: Callable[[str], int],
        scored: Collection[str],
    ) -> None:
        self.profile = profile
        self.snapshot = snapshot
        self.rank = rank
        # uids of members with inter-pod scores (preferred affinity, soft spread)
        self.scored = scored
        # Per member uid: Profile.preference's test of node names (None: no preference).
        self._preferred: dict[str, Callable[[str], bool] | None] = {}
        # (candidate list, its length, allowed nodes) -> the candidates allowed (_walk).
        self._within: dict[tuple[int, int, frozenset[str]], list[str]] = {}

    def preference(self, pod: PodInfo) -> Callable[[str], bool] | None:
        """Profile.preference's test of node names for `pod`, asked once per plan."""
        preference = self.profile.preference
        if preference is None:
            return None
        if pod.uid not in self._preferred:
            self._preferred[pod.uid] = preference.preferred(pod, self.snapshot)
        return self._preferred[pod.uid]

    def feasible(self, turn: Turn) -> Iterator[Found]:
        """Candidates that fit as the view has them. The inter-pod constraints
        (`turn.admit`) are left to the caller, which asks only about a node that would
        beat its best so far: most candidates never need the question."""
        keep, allowed, view, shape = turn.keep, turn.allowed, turn.view, turn.shape
        profile = self.profile
        for name in self._walk(shape, allowed):
            choice = shape.choice(profile, view, name)
            if choice is not None and (keep is None or keep(name, choice)):
                yield name, choice

    def _walk(self, shape: Shape, allowed: frozenset[str] | None) -> Iterable[str]:
        """The shape's candidates in their order, those in `allowed` only. A small set
        of allowed nodes (one topology domain of thousands of nodes) is cut out of the
        candidates once per planning call, not scanned again for every member."""
        candidates = shape.candidates
        if allowed is None:
            return candidates
        if len(allowed) * _SMALL_SHARE >= len(candidates):
            return (name for name in candidates if name in allowed)
        key = (id(candidates), len(candidates), allowed)
        within = self._within.get(key)
        if within is None:
            within = self._within[key] = [name for name in candidates if name in allowed]
        return within

    def best_scored(self, turn: Turn) -> Found | None:
        """The best weighted score (gang scores once a member is placed, inter-pod
        scores where they apply); Profile.preference's nodes before the others."""
        pod, view, context = turn.pod, turn.view, turn.context
        gang_scores = self.profile.gang_scores if context.placed else ()
        if pod.uid in self.scored and turn.state is not None:
            soft = turn.state.state_of(pod)
            if soft is not None:
                return self._best_with_inter_pod_scores(turn, soft)
        ranking = turn.shape.ranking
        if ranking is not None and not gang_scores:
            return self._best_ranked(turn, ranking)
        best: Found | None = None
        best_key = (1, float("inf"), 0)
        rank = self.rank
        admit = turn.admit
        prefer = self.preference(pod)
        totals = turn.totals
        for name, choice in self.feasible(turn):
            total = totals.get(name)
            if total is None:
                total = choice.score
                if gang_scores:
                    node = view.node(name)
                    total += sum(
                        w * s.score(pod, node, choice.shares, context) for s, w in gang_scores
                    )
                totals[name] = total
            key = (0 if prefer is None or prefer(name) else 1, -total, rank(name))
            if key < best_key and (admit is None or admit(name)):
                best, best_key = (name, choice), key
        return best

    def _best_with_inter_pod_scores(self, turn: Turn, soft: MemberConstraints) -> Found | None:
        """Best score with the inter-pod scores added. Those are normalised over the
        nodes compared (kube-scheduler's NormalizeScore), so every candidate is scored
        first; then the best admitted one wins."""
        pod, view, context = turn.pod, turn.view, turn.context
        gang_scores = self.profile.gang_scores if context.placed else ()
        rows: list[tuple[str, NodeChoice, float]] = []
        for name, choice in self.feasible(turn):
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
        rank = self.rank
        order = sorted(range(len(rows)), key=lambda i: (-totals[i], rank(rows[i][0])))
        admit = turn.admit
        for i in order:
            name, choice, _ = rows[i]
            if admit is None or admit(name):
                return name, choice
        return None

    def _best_ranked(self, turn: Turn, ranking: Ranking) -> Found | None:
        """The best node from the shape's ranking, with the nodes this gang changed
        evaluated afresh."""
        shape, view, allowed = turn.shape, turn.view, turn.allowed
        best: Found | None = None
        # (1 when Profile.preference does not admit the node, else 0; -score, rank, name)
        best_key: tuple[int, float, int, str] | None = None
        admit = turn.admit
        keep = turn.keep
        prefer = self.preference(shape.pod)
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
            choice = shape.choice(self.profile, view, name)
            if choice is None or (admit is not None and not admit(name)):
                continue
            if keep is not None and not keep(name, choice):
                continue
            tier = 0 if prefer is None or prefer(name) else 1
            changed_key = (tier, -choice.score, self.rank(name), name)
            if best_key is None or changed_key < best_key:
                best, best_key = (name, choice), changed_key
        return best

    def tightest(self, turn: Turn) -> Found | None:
        """The feasible node where the fewest more copies of the member would fit
        (first-fit decreasing keeps the first of equally tight nodes)."""
        best: Found | None = None
        room = 1 << 62
        admit = turn.admit
        pod, view = turn.pod, turn.view
        for name, choice in self.feasible(turn):
            copies = copies_that_fit(pod, view.node(name))
            if copies < room and (admit is None or admit(name)):
                best, room = (name, choice), copies
        return best

    def least_filled(self, turn: Turn) -> Found | None:
        """The feasible node whose spread domains hold the fewest matching pods; the
        best score among equals."""
        state = turn.state
        members = state.state_of(turn.pod) if state else None
        spread = members.spread if members is not None else None
        if spread is None:
            return self.best_scored(turn)
        best: Found | None = None
        best_key = (1 << 62, float("inf"), 0)
        rank = self.rank
        admit = turn.admit
        view = turn.view
        for name, choice in self.feasible(turn):
            labels = view.node(name).labels
            load = sum(
                counts.get(labels.get(constraint.topology_key, ""), 0)
                for constraint, counts in zip(spread.constraints, spread.counts, strict=True)
            )
            key = (load, -choice.score, rank(name))
            if key < best_key and (admit is None or admit(name)):
                best, best_key = (name, choice), key
        return best
