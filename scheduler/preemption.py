"""Priority preemption: which running gangs a waiting gang evicts, and holding the
room they free for it (docs/quotas.md, "Priority preemption").

The core asks `Preempter.consider` after a ready gang was found unschedulable. When
the gang's priority is above some running gangs' and none of its members says
`preemptionPolicy: Never`, the victim search (policies/preemption.py) is run on a
what-if copy of the snapshot without the candidate gangs; a set that lets the whole
gang be planned becomes a `Preemption`: the victim gangs (every bound member of
each: whole gangs only), and the preemptor's planned placements, which the cache
holds as NOMINATED (charged, never bound) so nothing else is placed onto the room
while the victims terminate. The adapter evicts the victims and nominates the nodes.

Reclaim (scheduler/reclaim.py) makes the same decision, with another pool of victims
(gangs borrowing beyond their quota's min, whatever their priority) and another order
(fewest GPUs first); it is tried first for a gang that stays within its namespace's min.

Invariants, and why:
- a gang only evicts gangs of strictly lower priority (every member lower), or, to
  reclaim, borrowed capacity, never taking another namespace below its min
  (policies/guarantees.py: a guarantee beats priority); and a gang never evicts one
  that evicted it while both are known, so A evicting B evicting A cannot happen;
- nothing is evicted unless the planner places the whole gang once the victims are
  gone and its quota admits the plan: never preempt for a gang that would still wait;
- while a decision is outstanding (victims still hold pods) the gang makes no new
  one: it keeps its hold and waits; when the victims are gone the hold is released
  just before the gang is planned again, in the same cycle, so the room goes to it.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from cache.cluster import AssumeError, ClusterCache, Placement, Reservation
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from policies.guarantees import may_take
from policies.preemption import FEWEST_GPUS, FEWEST_VICTIMS, Candidate, Rank, choose_victims
from policies.profile import Profile
from scheduler.gang import Gang
from scheduler.isolation import FATAL
from scheduler.planner import Plan, Unschedulable
from scheduler.quotas import needed_usage
from scheduler.reclaim import (
    anyone_borrows,
    floors_kept,
    holding,
    reclaimable,
    reclaimed_resources,
)
from scheduler.reclaim_cost import cost_bounded
from scheduler.victim_fit import RoomBound, VictimFit, WhatIfSnapshot

log = logging.getLogger(__name__)

NEVER = "Never"
# Why a decision evicts: `Preemption.reason`.
PRIORITY = "priority"
RECLAIM = "reclaim"
# How long a gang whose eviction was refused (a PodDisruptionBudget said 429) is not
# picked as a victim again: the budget changes when its pods become ready elsewhere.
REFUSED_VICTIM_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class VictimGang:
    key: str
    priority: int
    pods: tuple[PodInfo, ...]  # every bound member: all of them are evicted


@dataclass(frozen=True, slots=True)
class Preemption:
    """A decision for the adapter: evict `victims`, nominate `placements`."""

    preemptor: str
    priority: int
    victims: tuple[VictimGang, ...]
    placements: tuple[Placement, ...]  # the preemptor's members, held (NOMINATED)
    message: str
    # PRIORITY (victims of lower priority) or RECLAIM (victims borrowing beyond their
    # quota's min, taken back for a gang within its own min).
    reason: str = PRIORITY

    @property
    def victim_uids(self) -> frozenset[str]:
        return frozenset(pod.uid for victim in self.victims for pod in victim.pods)


@dataclass
class Preempter:
    cache: ClusterCache
    profile: Profile
    scheduler_name: str
    # Off unless the adapter carries decisions out (the Kubernetes runner evicts; the
    # simulator and the demo do not, and a hold no eviction follows would only waste room).
    enabled: bool = False
    decisions: dict[str, Preemption] = field(default_factory=dict)
    # victim gang key -> until when it is not picked again (its eviction was refused)
    refused: dict[str, float] = field(default_factory=dict)
    # What happened to the last decisions dropped, for logs and /debug.
    dropped: dict[str, str] = field(default_factory=dict)
    # Whether a gang within its quota's min may evict gangs borrowing beyond theirs.
    reclaim: bool = True
    # victim gang key -> the gangs that evicted it: a gang never evicts one of those
    # (no A-evicts-B-evicts-A); forgotten when neither gang has a pod left.
    evicted_by: dict[str, set[str]] = field(default_factory=dict)
    # The what-if copy of the snapshot the victim search plans on, kept between
    # searches (made at the first one: a second copy of every node).
    _what_if: WhatIfSnapshot | None = None

    # --- the core's hooks ---------------------------------------------------------------
    def release(self, gang_key: str) -> None:
        """Release the gang's held room before it is planned again: its own plan may
        now use it (its decision stays known until its victims are gone)."""
        decision = self.decisions.get(gang_key)
        if decision is None:
            return
        for placement in decision.placements:
            if self.cache.reservation(placement.pod_uid) == Reservation.NOMINATED:
                self.cache.forget(placement.pod_uid)

    def planned(self, gang_key: str) -> None:
        """The gang was placed: its decision is over."""
        self.decisions.pop(gang_key, None)

    def consider(
        self, gang: Gang, result: Unschedulable, snapshot: Snapshot, now: float
    ) -> Preemption | None:
        """After `gang` did not fit: keep waiting on an outstanding decision, or make a
        new one. Returns a new decision for the adapter to carry out, else None."""
        if not self.enabled:
            return None
        try:
            return self._consider(gang, snapshot, now)
        except FATAL:
            raise
        except Exception:  # a bug here must not stop the cycle: no preemption this time
            log.exception("gang %s: the preemption search failed", gang.key)
            self.release(gang.key)
            self.decisions.pop(gang.key, None)
            return None

    def _consider(self, gang: Gang, snapshot: Snapshot, now: float) -> Preemption | None:
        decision = self.decisions.get(gang.key)
        if decision is not None:
            if self._victims_remain(decision):
                self._hold(decision, now)
                return None
            del self.decisions[gang.key]  # victims gone and still no fit: start over
        if not self.may_preempt(gang):
            return None
        decision = self._reclaim(gang, snapshot, now) if self.reclaim else None
        if decision is None:
            decision = self._by_priority(gang, snapshot, now)
        if decision is not None:
            self.decisions[gang.key] = decision
            for victim in decision.victims:
                self.evicted_by.setdefault(victim.key, set()).add(gang.key)
            self._hold(decision, now)
        return decision

    def refuse(self, gang_key: str, victim_key: str | None, reason: str, now: float) -> None:
        """The adapter could not carry out the decision (an eviction refused by a
        PodDisruptionBudget, ...): release the hold; that victim is spared a while."""
        self.release(gang_key)
        decision = self.decisions.pop(gang_key, None)
        for victim in decision.victims if decision is not None else ():
            self.evicted_by.get(victim.key, set()).discard(gang_key)  # nothing was evicted
        self.dropped[gang_key] = reason
        if victim_key is not None:
            self.refused[victim_key] = now + REFUSED_VICTIM_SECONDS

    def waiting_on(self, uid: str) -> list[str]:
        """Preemptors whose victims include the pod `uid` (which just left)."""
        return [key for key, d in self.decisions.items() if uid in d.victim_uids]

    # --- rules --------------------------------------------------------------------------
    def may_preempt(self, gang: Gang) -> bool:
        if not gang.pending or any(p.preemption_policy == NEVER for p in gang.pending):
            return False
        # Claims are resolved against volumes by the core's planning path only; a
        # what-if without them could promise room the real plan would not get.
        return not any(pod.claims for pod in gang.pending)

    def candidates(self, gang: Gang, now: float) -> dict[str, VictimGang]:
        """Running gangs of ours whose every member has a lower priority than `gang` and
        was bound by this scheduler, not already being evicted for another gang, not
        recently refused, and not what another namespace's quota guarantees
        (policies/guarantees.py)."""
        if not any(pod.priority < gang.priority for pod in self.cache.pods()):
            # No pod at all ranks below the gang (often: one priority for every pod):
            # nothing to group, which is the costly part on a large cluster.
            return {}
        asked = needed_usage(gang).keys()
        book = self.cache.quotas
        return {
            key: victim
            for key, victim in self._running(gang, now).items()
            if victim.priority < gang.priority
            and may_take(book, gang.namespace, asked, holding(key, victim.pods))
        }

    def _running(self, gang: Gang, now: float) -> dict[str, VictimGang]:
        """Running gangs of ours that may be victims of `gang` at all: not itself, not
        already being evicted for another gang, not recently refused, not one that
        evicted it."""
        for key, decision in list(self.decisions.items()):
            if not any(self.cache.pod(p.pod_uid) for p in decision.placements):
                del self.decisions[key]  # the preemptor's pods are gone: so is its claim
        taken = set().union(*(d.victim_uids for d in self.decisions.values()))
        members: dict[str, list[PodInfo]] = {}
        known: set[str] = set()
        for pod in self.cache.pods():
            known.add(pod.gang_key)
            if pod.consumes_resources and pod.scheduler_name == self.scheduler_name:
                members.setdefault(pod.gang_key, []).append(pod)
        for key in list(self.evicted_by):
            self.evicted_by[key] &= known
            if key not in known or not self.evicted_by[key]:
                del self.evicted_by[key]
        found = {}
        for key, pods in members.items():
            if key == gang.key or self.refused.get(key, 0.0) > now:
                continue
            if key in self.evicted_by.get(gang.key, ()):
                continue  # it evicted this gang: never the other way round
            if any(pod.deleting or pod.uid in taken for pod in pods):
                continue  # already leaving: its room is not ours to count twice
            # Only gangs this scheduler bound, every member: a pod pinned to its node by
            # whoever created it (our schedulerName or not) is never evicted, and a gang
            # with one is not evicted in part (cache/ownership.py, docs/security.md).
            if all(self.cache.bound_by_us(pod) for pod in pods):
                found[key] = VictimGang(key, max(pod.priority for pod in pods), tuple(pods))
        return found

    # --- the search -----------------------------------------------------------------------
    def _by_priority(self, gang: Gang, snapshot: Snapshot, now: float) -> Preemption | None:
        victims = self.candidates(gang, now)
        if not victims:
            return None
        running = {key: victim.pods for key, victim in victims.items()}
        admissible = floors_kept(gang, running, self.cache.quotas)
        found = self._search(gang, snapshot, now, victims, FEWEST_VICTIMS, admissible)
        if found is None:
            return None
        picked, plan = found
        names = ", ".join(v.key for v in picked)
        message = (
            f"gang {gang.key} (priority {gang.priority}) preempts {len(picked)} "
            f"lower-priority gang(s) to fit: {names}"
        )
        return Preemption(gang.key, gang.priority, picked, tuple(plan.placements), message)

    def _reclaim(self, gang: Gang, snapshot: Snapshot, now: float) -> Preemption | None:
        book = self.cache.quotas
        asked = reclaimed_resources(gang, book)
        if not asked or not anyone_borrows(book, gang.namespace, asked):
            return None  # checked per quota before looking at every running pod
        running = self._running(gang, now)
        pods = {key: victim.pods for key, victim in running.items()}
        keys = reclaimable(gang, asked, pods, book)
        if not keys:
            return None
        victims = {key: running[key] for key in keys}
        admissible = floors_kept(gang, pods, book)
        victims, admissible = cost_bounded(gang, now, victims, admissible)
        found = self._search(gang, snapshot, now, victims, FEWEST_GPUS, admissible)
        if found is None:
            return None
        picked, plan = found
        names = ", ".join(v.key for v in picked)
        message = (
            f"gang {gang.key} reclaims the min guaranteed to quota {gang.namespace}: "
            f"evicts {len(picked)} gang(s) borrowing beyond their quota's min: {names}"
        )
        return Preemption(gang.key, gang.priority, picked, tuple(plan.placements), message, RECLAIM)

    def _search(
        self,
        gang: Gang,
        snapshot: Snapshot,
        now: float,
        victims: dict[str, VictimGang],
        rank: Rank,
        admissible: Callable[[frozenset[str]], bool],
    ) -> tuple[tuple[VictimGang, ...], Plan] | None:
        """The victim search over `victims`: the gangs chosen and the preemptor's plan
        once they are gone (placed and admitted by its quota), or None."""
        pool = [_candidate(key, victim, now) for key, victim in victims.items()]
        fit = self._victim_fit(gang, victims, snapshot, pool)
        chosen = choose_victims(pool, fit.fits, rank=rank, admissible=admissible)
        if chosen is None:
            return None
        plan = fit.plan(chosen.keys)
        if plan is None:  # the search said it fits; planning is deterministic
            return None
        return tuple(victims[c.key] for c in chosen.gangs), plan

    def _victim_fit(
        self,
        gang: Gang,
        victims: Mapping[str, VictimGang],
        snapshot: Snapshot,
        pool: Iterable[Candidate],
    ) -> VictimFit:
        """`fits(keys)` for this search, on the what-if copy kept between searches
        (scheduler/victim_fit.py: the same answers as planning every set on a fresh
        copy, at a fraction of the cost)."""
        if self._what_if is None:
            self._what_if = WhatIfSnapshot(self.cache, self.profile)
        self._what_if.sync(snapshot)
        pods = {key: victim.pods for key, victim in victims.items()}
        bound = RoomBound(gang, snapshot, self.profile)
        gpus = {candidate.key: candidate.gpu_milli for candidate in pool}
        return VictimFit(gang, pods, self._what_if, self.cache, bound, gpus)

    def _victims_remain(self, decision: Preemption) -> bool:
        for uid in decision.victim_uids:
            pod = self.cache.pod(uid)
            if pod is not None and pod.consumes_resources:
                return True
        return False

    def _hold(self, decision: Preemption, now: float) -> None:
        try:
            self.cache.nominate(decision.placements, now)
        except AssumeError as error:
            # A member was deleted or bound meanwhile: the decision no longer holds.
            log.info("gang %s: its nomination cannot be held: %s", decision.preemptor, error)
            self.decisions.pop(decision.preemptor, None)


def _candidate(key: str, victim: VictimGang, now: float) -> Candidate:
    """The victim as the search weighs it: GPUs its members hold, and how long it has
    run (since its oldest member was created). One pass over its members: a search at
    5,000 nodes weighs thousands of gangs."""
    gpu_milli = 0
    started = math.inf
    for pod in victim.pods:
        gpu_milli += pod.gpu.total_milli
        started = min(started, pod.created)
    return Candidate(key, victim.priority, gpu_milli, max(0.0, now - started))


class WhatIf:
    """The snapshot as it would be without some pods: a copy sharing the unchanged
    node records, where only the nodes of the pods taken away are re-made."""

    def __init__(self, cache: ClusterCache, snapshot: Snapshot) -> None:
        self.cache = cache
        self.base = snapshot
        self.view = Snapshot()
        for name, node in snapshot.nodes.items():
            self.view.put(node, tuple(cache.pods_on(name)))
        self.view.pods.namespace_labels = snapshot.pods.namespace_labels
        # Re-made nodes get generations above any the base has, so a planner's
        # rankings (kept by generation) see them change.
        self._generations: Iterator[int] = itertools.count(snapshot.generation + 1)
        self.view.generation = snapshot.generation
        self._changed: set[str] = set()

    def without(self, pods: Iterable[PodInfo]) -> Snapshot:
        by_node: dict[str, list[PodInfo]] = {}
        for pod in pods:
            by_node.setdefault(pod.node_name, []).append(pod)
        for name in self._changed - by_node.keys():
            self._put(name, ())
        for name, gone in by_node.items():
            self._put(name, gone)
        self._changed = {name for name in by_node if name in self.base.nodes}
        return self.view

    def _put(self, name: str, gone: Iterable[PodInfo]) -> None:
        base = self.base.nodes.get(name)
        if base is None:
            return
        node = base.clone()
        leaving = {pod.uid for pod in gone}
        for pod in gone:
            node.discharge(pod.requests, self.cache.charged_shares(pod.uid) or (), pod.host_ports)
        node.generation = next(self._generations)
        staying = tuple(p for p in self.cache.pods_on(name) if p.uid not in leaving)
        self.view.put(node, staying)
        self.view.generation = node.generation
