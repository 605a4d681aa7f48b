"""One planning call's search: the gang's members grouped by shape, and the greedy
pass an attempt is: members in a given order, each on the node a pick finds, within
the whole-node reserve, with every other kind of choice it needs (member_choice.py)
made on that node, judged whole at the end against the inter-pod constraints."""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cache.cluster import Placement
from cache.pod import PodInfo
from cache.snapshot import PlanningView, Snapshot
from policies.interface import GangContext
from policies.pod_constraints import ConstraintAttempt, GangConstraints
from scheduler.gangs.gang import gate_message
from scheduler.planner.admission import Admission
from scheduler.planner.member_choice import MemberChoiceKind, MemberChoices, Take
from scheduler.planner.node_choice import Shape
from scheduler.planner.picks import Found, Pick, Picks, Turn
from scheduler.planner.reserve import ReserveGuards, reserve_tests
from scheduler.planner.result import PlannableGang
from scheduler.planner.slices import Slices

if TYPE_CHECKING:
    from scheduler.planner.planner import Planner

# How many nodes a member is offered before the choices it needs beside its node
# (member_choice.py) are declared out of reach.
MEMBER_CHOICE_TRIES = 64
# On how many of the nodes a kind refused (the first tried) it is asked to revisit
# earlier members' choices once no node was accepted.
MEMBER_REVISIT_NODES = 8


@dataclass(slots=True)
class Attempt:
    name: str
    placements: list[Placement]
    failed: dict[str, str]  # uid -> reason phrase
    score: float
    view: PlanningView
    # Each kind of member choice with this attempt's choices of that kind.
    choices: list[tuple[MemberChoiceKind, MemberChoices]] = field(default_factory=list)
    # Inter-pod affinity and spread state with this attempt's members placed (None when
    # no such constraint applies to the gang).
    constraints: ConstraintAttempt | None = None
    # The reasons the inter-pod constraints refused nodes to members that then found
    # none (what another order of placement might change).
    refused_by: set[str] = field(default_factory=set)


class GangSearch:
    """What one planning call knows of its gang, and its greedy passes."""

    def __init__(
        self,
        planner: Planner,
        gang: PlannableGang,
        snapshot: Snapshot,
        kinds: Sequence[MemberChoiceKind],
    ) -> None:
        self.planner = planner
        self.profile = planner.profile
        self.memo = planner.memo
        self.gang = gang
        self.snapshot = snapshot
        # The kinds of choice members need beside their node (empty for most gangs).
        self.kinds = kinds
        self.versions = itertools.count(1)
        # uid -> why a member cannot be scheduled at all (set aside before any attempt)
        self.refused: dict[str, str] = {}
        self.shapes: dict[Hashable, Shape] = {}
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
                self.shapes[signature] = Shape(pod, [pod])
            else:
                shape.members.append(pod)
        self.shape_of = {pod.uid: shape for shape in self.shapes.values() for pod in shape.members}
        self.member_by_uid = {pod.uid: pod for pod in self.members}
        # Inter-pod affinity and topology spread: checked on top of the node filters,
        # against running pods and the members placed before in the same attempt.
        self.constraints = GangConstraints(self.members, snapshot, planner.domains)
        self.constrained = self.constraints.pods_constrained()
        self.scored = self.constraints.pods_scored()
        self.picks = Picks(self.profile, snapshot, planner.rank, self.scored)
        self.guards = ReserveGuards(planner.reserve, snapshot)
        # The gang's topology requirement (None: none stated), and its slices.
        self.topology = gang.topology
        self.slices: Slices | None = None
        topology = self.topology
        if topology is not None and topology.slice_key and topology.slice_size:
            self.slices = Slices(topology.slice_key, topology.slice_size, self.members, snapshot)

    @property
    def topology_bound(self) -> bool:
        """Whether topology may refuse a member a node (a required level or slices):
        the shortcuts that place one member by its own best node do not apply."""
        return self.topology is not None and self.topology.constrains

    def preferred_levels(self) -> tuple[str, ...]:
        """The gang's preferred levels, broadest first (as Profile.topology_keys);
        empty when it states none."""
        if self.topology is None:
            return ()
        return tuple(reversed(self.topology.preferred_keys))

    def greedy(
        self,
        name: str,
        order: Sequence[PodInfo],
        allowed: frozenset[str] | None,
        pick: Pick,
        deferred: frozenset[str] | set[str] = frozenset(),
    ) -> Attempt:
        """One attempt: the members in `order`, each on the node `pick` finds among
        `allowed` (None: its shape's candidates) on a fresh view, so that members never
        count the same capacity twice. `deferred`: uids whose required affinity to
        fellow members is not checked during the pass (the end judges it)."""
        view = PlanningView(self.snapshot, self.versions)
        context = GangContext()
        choices = [(kind, kind.start()) for kind in self.kinds]
        state = self.constraints.start() if self.constrained or self.scored else None
        attempt = Attempt(name, [], {}, 0.0, view, choices, state)
        sliced = self.slices.start() if self.slices is not None else None
        if self.slices is not None:
            order = self.slices.order(order)
        for pod in order:
            here = sliced.allowed(pod, view, allowed) if sliced is not None else allowed
            turn = Turn(pod, self.shape_of[pod.uid], view, context, here, state)
            admission = (
                Admission(state, pod, view, pod.uid not in deferred)
                if state and pod.uid in self.constrained
                else None
            )
            turn.admit = admission
            found = self._pick_within_reserve(turn, pick)
            if found is not None and choices:
                concerned = [made for kind, made in choices if kind.concerns(pod.uid)]
                if concerned:
                    found = self._with_member_choices(turn, pick, found, concerned)
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
        if state is not None:
            self._drop_violations(attempt, state)
        return attempt

    def _drop_violations(self, attempt: Attempt, state: ConstraintAttempt) -> None:
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

    def _pick_within_reserve(self, turn: Turn, pick: Pick) -> Found | None:
        """`pick`'s node among those that keep the whole-node reserve (every node
        without one); when none does, among those its last resort lets the pod break
        ("none": the member waits, as for a lack of room)."""
        guard = self.guards.guard(turn.pod, turn.view)
        if guard is None:
            return pick(turn)
        for test in reserve_tests(guard, turn.view):
            turn.keep = test
            try:
                found = pick(turn)
            finally:
                turn.keep = None
            if found is not None:
                return found
        return None

    def _with_member_choices(
        self, turn: Turn, pick: Pick, found: Found, concerned: list[MemberChoices]
    ) -> Found | None:
        """The picked node if every kind of choice the member needs has one there (a
        PV no other member took, devices left in a pool...), recorded; else the next
        node `pick` finds without the refused ones, that many times at most."""
        allowed, view = turn.allowed, turn.view
        pool = allowed if allowed is not None else frozenset(turn.shape.candidates)
        pool |= frozenset(n for n in view.changed_nodes() if allowed is None or n in allowed)
        refused: list[Found] = []
        for _ in range(MEMBER_CHOICE_TRIES):
            name = found[0]
            node = view.node(name)
            takes: list[Take] = []
            for made in concerned:
                take = made.offer(turn.pod, node, found[1].shares)
                if take is None:
                    break
                takes.append(take)
            else:
                for take in takes:
                    take()
                return found
            if len(refused) < MEMBER_REVISIT_NODES:
                refused.append(found)
            pool -= {name}
            turn.allowed = pool
            picked = pick(turn)
            if picked is None:
                break
            found = picked
        return self._revisit(turn, refused, concerned)

    def _revisit(
        self, turn: Turn, refused: list[Found], concerned: list[MemberChoices]
    ) -> Found | None:
        """No node offered was accepted: on the first refused ones, in the order
        tried, each kind offers again or else revisits earlier members' choices
        (member_choice.MemberChoices.revisit); the first node all accept is taken."""
        for found in refused:
            node = turn.view.node(found[0])
            takes: list[Take] = []
            for made in concerned:
                shares = found[1].shares
                take = made.offer(turn.pod, node, shares) or made.revisit(turn.pod, node, shares)
                if take is None:
                    break
                takes.append(take)
            else:
                for take in takes:
                    take()
                return found
        return None
