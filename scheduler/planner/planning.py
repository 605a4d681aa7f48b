"""One planning call, start to end:

1. Members whose spec cannot be scheduled (malformed request, refused GPU shape,
   scheduling gates) are set aside with their reason (search.GangSearch).
2. A gang with one plain member to place takes a shortcut (lone_member.py).
3. Otherwise, per shape, the nodes its members are placed among: in exhaustive mode
   the shape's ranking (ranking.py), else the candidates (candidates.py).
4. Attempts, each a greedy pass on a fresh view (search.GangSearch.greedy), until one
   places at least `needed` members and every role's minimum. A gang that requires one
   domain of a topology level is tried only inside such domains, one at a time
   (required_domain.py), and waits if none holds it; otherwise:
   - the whole gang inside one domain of its preferred levels (domains.py);
   - the whole gang inside one topology domain (domains.py);
   - everywhere, biggest members first, best weighted score;
   - spread-balanced, when spread refused nodes in the first;
   - everywhere, most constrained shape first (fewest feasible nodes);
   - everywhere, biggest first, tightest node (first-fit decreasing);
   - affinity anchors first, when required affinity refused nodes in the first;
   - the members each role still needs first.
5. A plan lists every member placed (all that fit, at least `needed`); otherwise the
   result says, per member, why (explain.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from cache.pod import PodInfo
from cache.resources import CPU
from cache.snapshot import Snapshot
from policies.filters.inter_pod_affinity import REASON_AFFINITY
from policies.filters.pod_topology_spread import REASON_MISSING_LABEL, REASON_SKEW
from scheduler.planner.candidates import collect_candidates
from scheduler.planner.domains import domain_attempts
from scheduler.planner.explain import explain, refuse, unschedulable
from scheduler.planner.lone_member import (
    lone_shape,
    plan_lone_member,
    plan_ranked_member,
    ranking_alone,
)
from scheduler.planner.member_choice import MemberChoiceKind
from scheduler.planner.node_choice import Shape
from scheduler.planner.required_domain import RequiredDomains, required_attempts, required_domains
from scheduler.planner.result import Plan, PlannableGang, PlanResult
from scheduler.planner.search import Attempt, GangSearch

if TYPE_CHECKING:
    from scheduler.planner.planner import Planner

_SPREAD_REASONS = frozenset({REASON_SKEW, REASON_MISSING_LABEL})


def plan_call(
    planner: Planner,
    gang: PlannableGang,
    snapshot: Snapshot,
    kinds: Sequence[MemberChoiceKind],
) -> PlanResult:
    """Plan `gang` on `snapshot` with what `planner` keeps between calls."""
    return _GangPlanning(planner, gang, snapshot, kinds).run()


class _GangPlanning:
    """The course of one call (the module docstring); the search does the work."""

    def __init__(
        self,
        planner: Planner,
        gang: PlannableGang,
        snapshot: Snapshot,
        kinds: Sequence[MemberChoiceKind],
    ) -> None:
        self.planner = planner
        self.gang = gang
        self.snapshot = snapshot
        self.search = GangSearch(planner, gang, snapshot, kinds)
        # The required level's domains, once the candidates are known (None: no level).
        self.required: RequiredDomains | None = None

    def run(self) -> PlanResult:
        search, planner = self.search, self.planner
        needed = self.gang.needed
        if len(search.members) < needed:
            return refuse(search, needed)
        single = self._lone_member()
        if single is not None:
            plan = plan_lone_member(search, single)
            if plan is not None:
                return plan
        elif planner.exhaustive and ranking_alone(search):
            plan = self._plan_ranked_member()
            if plan is not None:
                return plan
        topology = search.topology
        required = topology is not None and topology.required_key is not None
        for shape in search.shapes.values():
            if shape is single:
                continue  # its candidates were collected by plan_lone_member
            if planner.exhaustive:
                shape.ranking = planner.ranking(shape.pod, self.snapshot)
                if not ranking_alone(search):
                    shape.candidates = shape.ranking.candidates()
            else:
                shape.kept = planner.kept_choices(shape.pod, self.snapshot)
                if not required:  # required_domains gives them the domains' nodes
                    collect_candidates(search, shape)
        if topology is not None and topology.required_key is not None:
            demand = planner.domain_demand
            whole = sum(p.gpu.total_milli for p in (*self.gang.pending, *self.gang.bound))
            demand.observe(self.gang.key, topology.required_key, whole)
            self.required = required_domains(
                search, topology.required_key, demand, planner.level_rooms, planner.domain_choice
            )
        best: Attempt | None = None
        chosen: Attempt | None = None
        for attempt in self._attempts():
            if best is None or len(attempt.placements) > len(best.placements):
                best = attempt
            if self._enough(attempt, needed):
                chosen = best = attempt
                break
        if best is not None and chosen is not None:
            return self._plan(best)
        shortfall = self.required.shortfall() if self.required is not None else None
        slices = search.slices
        if slices is not None:
            sliced = f"needs every {slices.size} consecutive members in one {slices.key}"
            shortfall = f"{shortfall}; {sliced}" if shortfall else sliced
        return unschedulable(search, needed, best, shortfall)

    def _plan(self, best: Attempt) -> Plan:
        search = self.search
        plan = Plan(
            gang_key=self.gang.key,
            placements=tuple(best.placements),
            left_out={
                uid: explain(search, uid, best) if self.planner.explain else "no room"
                for uid in best.failed
            },
            score=best.score,
            attempt=best.name,
        )
        for _, choices in best.choices:
            plan = choices.into_plan(plan, best.failed)
        return plan

    def _enough(self, attempt: Attempt, needed: int) -> bool:
        """At least `needed` members placed, and every role's minimum met."""
        if len(attempt.placements) < max(needed, 1):
            return False
        placed = [self.search.member_by_uid[p.pod_uid] for p in attempt.placements]
        return not self.gang.roles_missing(placed)

    def _lone_member(self) -> Shape | None:
        return lone_shape(self.search)

    def _plan_ranked_member(self) -> Plan | None:
        return plan_ranked_member(self.search)

    def _attempts(self) -> Iterator[Attempt]:
        search = self.search
        picks = search.picks
        members = search.members
        by_size = sorted(members, key=lambda p: (_dependence(p), _size_key(p), p.created, p.name))
        if self.required is not None:
            yield from required_attempts(search, by_size, self.required)
            return  # one domain of the required level, or the gang waits
        preferred = search.preferred_levels()
        if len(members) > 1 and preferred:
            yield from domain_attempts(search, by_size, preferred)
        if len(members) > 1:
            yield from domain_attempts(search, by_size)
        first = search.greedy("best-score", by_size, None, picks.best_scored)
        yield first
        if self.planner.exhaustive and ranking_alone(search):
            for shape in search.shapes.values():  # the later attempts walk the candidates
                assert shape.ranking is not None
                shape.candidates = shape.ranking.candidates()
        if first.refused_by & _SPREAD_REASONS:
            # Spread first: each member to the least-filled domain of its constraints,
            # so that the gang fills the domains level by level (docs/policies.md).
            yield search.greedy("spread-balanced", by_size, None, picks.least_filled)
        if len(search.shapes) > 1:
            constrained = sorted(
                members,
                key=lambda p: (
                    _dependence(p),
                    len(search.shape_of[p.uid].candidates),
                    _size_key(p),
                    p.name,
                ),
            )
            yield search.greedy("most-constrained-first", constrained, None, picks.best_scored)
        yield search.greedy("first-fit-decreasing", by_size, None, picks.tightest)
        anchors = search.constraints.anchors(members) if search.constrained else []
        if anchors and REASON_AFFINITY in first.refused_by:
            # Members with affinity to fellow members go first, that affinity deferred,
            # and the rest gather around them (network topology prefers their hosts);
            # the finished placement is then judged whole like every other.
            leading = {pod.uid for pod in anchors}
            order = [pod for pod in by_size if pod.uid in leading]
            order += [pod for pod in by_size if pod.uid not in leading]
            yield search.greedy("affinity-anchors-first", order, None, picks.best_scored, leading)
        if self.gang.role_needed:
            # Per-role minimums (scheduler/gangs/roles.py): the members a role still needs
            # first, so that room runs out, if it does, on members beyond the minimums.
            order = _roles_first(self.gang, by_size)
            yield search.greedy("required-roles-first", order, None, picks.best_scored)


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
