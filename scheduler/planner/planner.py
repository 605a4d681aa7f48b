"""The Planner: a whole gang placed against a snapshot, or nothing, with what is worth
keeping between calls kept (the package's map: docs/architecture.md, "The planner
package"; one call's course: planning.py).

What it keeps, each caught up from the snapshot's change log or keyed by node
generation, so that a call pays for the nodes changed since the last one:
- filter answers per shape and node (FilterMemo), which makes a diagnosis over every
  node affordable;
- exhaustive mode: a ranking of every feasible node per shape (ranking.py);
- bounded mode: each shape's choices per node (node_choice.KeptChoices) and, for lone
  members, each shape's window of nodes (window.py);
- the whole-node reserve's summary of the cluster (reserve.py);
- the eligible topology-spread domains (DomainCache);
- per DRA demand, the nodes its claims fit alone, caught up from the DraCache's
  per-node stamps (dra_reach.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from cache.pod import PodInfo
from cache.snapshot import Snapshot
from policies.diagnosis import FilterMemo
from policies.domain_demand import DomainDemand
from policies.filters.volume_binding import GangVolumes
from policies.pod_constraints import DomainCache
from policies.profile import Profile
from policies.whole_node_reserve import ReserveLedger
from scheduler.planner.dra_reach import ReachMemo
from scheduler.planner.level_room import LevelRooms
from scheduler.planner.member_choice import MemberChoiceKind
from scheduler.planner.node_choice import KeptByNode, KeptChoices
from scheduler.planner.planning import plan_call
from scheduler.planner.ranking import Ranking, Rankings
from scheduler.planner.required_domain import DomainChoice
from scheduler.planner.reserve import ReserveMemory
from scheduler.planner.result import PlannableGang, PlanResult
from scheduler.planner.volume_choice import VolumeChoiceKind
from scheduler.planner.window import Window, Windows


class Planner:
    """Plans gangs one at a time, keeping between calls what the module docstring
    lists."""

    def __init__(self, profile: Profile, max_rankings: int = 256, explain: bool = True) -> None:
        self.profile = profile
        # Whether to word kube-scheduler style reasons for gangs that do not fit: a
        # pass over every node. A caller that only needs to know (the simulator) says no.
        self.explain = explain
        self.memo = FilterMemo(profile.filters)
        self.max_rankings = max_rankings
        self._rankings = Rankings(profile, self.memo, max_rankings, self.rank)
        # Eligible topology-spread domains, kept while node labels stay put.
        self.domains = DomainCache()
        self._kept = KeptChoices()
        self._windows = Windows()
        self.reserve = ReserveMemory(profile)
        # Where each DRA demand can be allocated alone, per node (dra_reach.py).
        self.dra_reach = ReachMemo()
        # The GPU sizes of gangs that require one topology domain, per level: the
        # choice of their domain keeps large domains for large gangs (required_domain.py).
        self.domain_demand = DomainDemand()
        # How a required level's fitting domains are ordered (required_domain.py).
        self.domain_choice: DomainChoice = "smallest"
        # Per level and shape, its domains' room, caught up from the snapshot's changes.
        self.level_rooms = LevelRooms()
        # Profile.learning_step when the rankings, kept choices and windows were kept.
        self._learning_step: tuple[int, ...] = ()
        # The planner of Profile.step_aside's fallback, made when first needed.
        self._stepped_aside: Planner | None = None

    def plan(
        self,
        gang: PlannableGang,
        snapshot: Snapshot,
        volumes: GangVolumes | None = None,
        choices: Sequence[MemberChoiceKind] = (),
    ) -> PlanResult:
        """`volumes`: the members' unbound claims and attach-limited CSI volumes; each
        attempt then gives the claims PVs or provisioning on the proposed nodes, never
        one PV to two members, and never attaches more than a node's limit. `choices`:
        other kinds of choice members need beside their node (member_choice.py)."""
        step_aside = self.profile.step_aside
        if step_aside is not None and step_aside.applies(*self.reserve.cluster_totals(snapshot)):
            # CPU runs out first: FGD's choice stands (policies/cpu_bound.py). A planner
            # of its own, so that neither's kept answers serve the other.
            if self._stepped_aside is None:
                self._stepped_aside = Planner(step_aside.fallback, self.max_rankings, self.explain)
            return self._stepped_aside.plan(gang, snapshot, volumes, choices)
        self._follow_learning()
        kinds: list[MemberChoiceKind] = [VolumeChoiceKind(volumes)] if volumes else []
        kinds.extend(choices)
        return plan_call(self, gang, snapshot, kinds)

    def _follow_learning(self) -> None:
        """Drop the kept answers of scores whose learnt workload has moved a step since
        they were kept (Profile.learning_step): between steps they stay valid."""
        step = self.profile.learning_step()
        if step != self._learning_step:
            self._learning_step = step
            self._rankings.forget_choices()
            self._kept.clear()
            self._windows.clear()

    @property
    def exhaustive(self) -> bool:
        return self.profile.candidate_limit == 0 and self.profile.memoizable

    def rank(self, name: str) -> int:
        ranks = self.profile.node_rank
        return ranks.get(name, 0) if ranks is not None else 0

    def ranking(self, pod: PodInfo, snapshot: Snapshot) -> Ranking:
        """The shape's ranking, caught up with the snapshot (exhaustive mode)."""
        return self._rankings.ranking(pod, snapshot)

    def kept_choices(self, pod: PodInfo, snapshot: Snapshot) -> KeptByNode | None:
        """The choices kept for `pod`'s shape on `snapshot`'s nodes (filled in by the
        caller), or None when they cannot be kept: scores that are not a function of
        pod shape and node state. Keyed by node generation, which the cache bumps on
        every change of a node."""
        if not self.profile.memoizable:
            return None
        return self._kept.of_shape(pod, snapshot)

    def window(self, pod: PodInfo, snapshot: Snapshot) -> Window:
        """The lone-member window of `pod`'s shape on `snapshot`."""
        return self._windows.of_shape(pod, snapshot)

    def reserve_ledger(self, snapshot: Snapshot) -> ReserveLedger | None:
        """The whole-node reserve's summary of `snapshot` (None without a reserve)."""
        return self.reserve.ledger(snapshot)

    def reserving(self, snapshot: Snapshot) -> bool:
        """Whether a whole-node reserve has classes to keep (reserve.ReserveMemory)."""
        return self.reserve.reserving(snapshot)


def plan_gang(profile: Profile, gang: PlannableGang, snapshot: Snapshot) -> PlanResult:
    """Plan one gang with no memory of earlier calls."""
    return Planner(profile).plan(gang, snapshot)
