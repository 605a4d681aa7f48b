"""Priority preemption: which running gangs a waiting gang evicts, and holding the
room they free for it (docs/quotas.md, "Priority preemption").

The core asks `Preempter.consider` after a ready gang was found unschedulable. When
the gang's priority is above some running gangs' and none of its members says
`preemptionPolicy: Never`, the victim search (policies/preemption.py) is run on a
what-if copy of the snapshot without the candidate gangs; a set that lets the whole
gang be planned becomes a `Preemption`: the victim gangs (every member of each that
this scheduler bound: whole gangs only, less what it did not bind), and the
preemptor's planned placements, which the cache holds as NOMINATED (charged, never
bound) so nothing else is placed onto the room while the victims terminate. The
adapter evicts the victims and nominates the nodes.

Reclaim (scheduler/sharing/reclaim.py) makes the same decision, with another pool of victims
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
  just before the gang is planned again, in the same cycle, so the room goes to it;
- a gang whose members mount volume claims is planned in the what-if as on the core's
  own path (scheduler/planner/volume_claims.py: its claims resolved, the victims no longer
  using theirs), and the static PVs that plan chose are held with its room;
- a gang whose members use DRA claims is planned in the what-if with the victims'
  ResourceClaims released as the resourceclaim controller will release them
  (cache/dra/view.py: those reserved only for victims), and the devices its plan
  allocates are kept for it (DraCache.keep) with its room; its decision stays
  outstanding until the victims are gone AND the controller has released the claims
  whose devices the plan took, so no other gang is given them in between.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from cache import resources as res
from cache.cluster import AssumeError, ClusterCache, Placement, Reservation
from cache.dra.slices import DeviceId
from cache.dra.store import DraCache
from cache.dra.view import released_by, released_claims
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from cache.volumes import VolumeCache
from policies.guarantees import Holding
from policies.preemption import FEWEST_GPUS, FEWEST_VICTIMS, Candidate, Rank, choose_victims
from policies.profile import Profile
from scheduler.gangs.gang import Gang
from scheduler.gangs.isolation import FATAL
from scheduler.planner.result import Plan, Unschedulable
from scheduler.sharing.quotas import claims_held, needed_usage
from scheduler.sharing.reclaim import (
    anyone_borrows,
    floors_kept,
    holding_of,
    lenders,
    reclaimable,
    reclaimed_resources,
    taker,
)
from scheduler.sharing.victim_fit import RoomBound, VictimFit, WhatIfSnapshot

log = logging.getLogger(__name__)

NEVER = "Never"
# Why a decision evicts: `Preemption.reason`.
PRIORITY = "priority"
# How many domains of a required level a victim search tries (each is a search).
MAX_PREEMPTION_DOMAINS = 8
RECLAIM = "reclaim"
# How long a gang whose eviction was refused (a PodDisruptionBudget said 429) is not
# picked as a victim again: the budget changes when its pods become ready elsewhere.
REFUSED_VICTIM_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class VictimGang:
    key: str
    priority: int
    # Every member this scheduler bound: all of them are evicted. A member pinned to
    # its node by its creator is not among them (never evicted, never freed).
    pods: tuple[PodInfo, ...]
    # What the DRA claims reserved for its members count against its quota (each claim
    # once, whoever allocated it): a victim gives them back too (docs/quotas.md).
    devices: Mapping[str, int] = field(default_factory=dict, compare=False)
    # Weighed once per gang found running, for reclaim and priority alike (a search at
    # 5,000 nodes weighs thousands of gangs): GPUs its members hold, when its oldest
    # member was created, and, when first asked, what it counts against its quota.
    gpu_milli: int = field(init=False, compare=False, repr=False)
    started: float = field(init=False, compare=False, repr=False)
    _cpu_memory: tuple[int, int] = field(init=False, compare=False, repr=False)
    _holding: Holding | None = field(init=False, compare=False, repr=False, default=None)

    def __post_init__(self) -> None:
        gpu_milli, cpu, memory, started = 0, 0, 0, math.inf
        for pod in self.pods:
            gpu_milli += pod.gpu.total_milli
            cpu += pod.requests.get(res.CPU, 0)
            memory += pod.requests.get(res.MEMORY, 0)
            started = min(started, pod.created)
        object.__setattr__(self, "gpu_milli", gpu_milli)
        object.__setattr__(self, "started", started)
        object.__setattr__(self, "_cpu_memory", (cpu, memory))

    @property
    def namespace(self) -> str:
        return self.pods[0].namespace if self.pods else ""

    @property
    def holding(self) -> Holding:
        """What its members count against its namespace's quota (reclaim.holding, from
        the sums taken in the one pass above)."""
        if self._holding is None:
            cpu, memory = self._cpu_memory
            weighed = holding_of(
                self.key, self.namespace, self.gpu_milli, cpu, memory, self.devices
            )
            object.__setattr__(self, "_holding", weighed)
        assert self._holding is not None
        return self._holding


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
    # (PV, claim key): the static PVs the preemptor's plan chose for its claims, held
    # with its room so that no other claim is given them while the victims terminate.
    volumes: tuple[tuple[str, str], ...] = ()
    # The DRA devices the preemptor's plan allocates, kept for it with its room, and
    # (claim "ns/name", victim gang key): the victims' claims that hold some of them
    # until the resourceclaim controller releases them; the decision waits for those.
    devices: tuple[DeviceId, ...] = ()
    released_claims: tuple[tuple[str, str], ...] = ()

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
    # victim gang key -> until when it is not picked again (its eviction was refused);
    # an entry goes when it expires or its gang does (`_prune`).
    refused: dict[str, float] = field(default_factory=dict)
    # What happened to the last decisions dropped, for logs and /debug; an entry goes
    # with its gang (`_prune`).
    dropped: dict[str, str] = field(default_factory=dict)
    # Whether a gang within its quota's min may evict gangs borrowing beyond theirs.
    reclaim: bool = True
    # victim gang key -> the gangs that evicted it: a gang never evicts one of those
    # (no A-evicts-B-evicts-A); forgotten when neither gang has a pod left.
    evicted_by: dict[str, set[str]] = field(default_factory=dict)
    # The what-if copy of the snapshot the victim search plans on, kept between
    # searches (made at the first one: a second copy of every node).
    _what_if: WhatIfSnapshot | None = None
    # The core's claims and PVs: a preemptor's claims are resolved in the what-if too.
    volumes: VolumeCache = field(default_factory=VolumeCache)
    # The core's devices (None: none known; a gang with DRA claims then never fits).
    dra: DraCache | None = None
    # The running gangs the last search weighed, kept for the next (`_weigh`).
    _weighed: dict[str, VictimGang] = field(default_factory=dict)
    # A gang's own priority where its definition states one (Kubernetes' PodGroup
    # spec.priority), by gang key; None: its members' pod priority is the victim's.
    group_priority: Callable[[str], int | None] = field(default=lambda key: None)

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
        for volume, claim in decision.volumes:
            self.volumes.release(volume, claim)
        if decision.devices and self.dra is not None:
            self.dra.release_kept(gang_key)

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
        # Running gangs are grouped at most once per consideration (every running pod
        # read), for reclaim and priority preemption alike, and only when one asks.
        grouped: list[dict[str, VictimGang]] = []

        def running() -> dict[str, VictimGang]:
            if not grouped:
                grouped.append(self._running(gang, now))
            return grouped[0]

        decision = self._reclaim(gang, snapshot, now, running) if self.reclaim else None
        if decision is None:
            decision = self._by_priority(gang, snapshot, now, running)
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
        self._prune(self.cache.pods_by_gang(), now)
        self.dropped[gang_key] = reason
        if victim_key is not None:
            self.refused[victim_key] = now + REFUSED_VICTIM_SECONDS

    def _prune(self, gangs: Mapping[str, object], now: float) -> None:
        """Forget refusals that expired or whose gang is gone, and dropped decisions of
        gangs gone: under churn (gangs of ever new names refused and deleted) neither
        may grow; each holds at most the gangs present."""
        if self.refused:
            self.refused = {
                key: until for key, until in self.refused.items() if until > now and key in gangs
            }
        if self.dropped:
            self.dropped = {key: why for key, why in self.dropped.items() if key in gangs}

    def waiting_on(self, uid: str) -> list[str]:
        """Preemptors whose victims include the pod `uid` (which just left)."""
        return [key for key, d in self.decisions.items() if uid in d.victim_uids]

    # --- rules --------------------------------------------------------------------------
    def may_preempt(self, gang: Gang) -> bool:
        return bool(gang.pending) and all(p.preemption_policy != NEVER for p in gang.pending)

    def candidates(
        self,
        gang: Gang,
        now: float,
        running: Callable[[], dict[str, VictimGang]] | None = None,
    ) -> dict[str, VictimGang]:
        """Running gangs of ours, as the members this scheduler bound (a pinned member is
        no part of its victim), each of those of a lower priority than `gang`, not
        already being evicted for another gang, not recently refused, and not what
        another namespace's quota guarantees (policies/guarantees.py). `running`: the
        running gangs, when already grouped."""
        if not any(pod.priority < gang.priority for pod in self.cache.pods()):
            # No pod at all ranks below the gang (often: one priority for every pod):
            # nothing to group, which is the costly part on a large cluster.
            return {}
        takes = taker(self.cache.quotas, gang.namespace, needed_usage(gang, self.dra).keys())
        gangs = running() if running is not None else self._running(gang, now)
        return {
            key: victim
            for key, victim in gangs.items()
            if victim.priority < gang.priority and takes(victim.holding)
        }

    def _running(self, gang: Gang, now: float) -> dict[str, VictimGang]:
        """Running gangs of ours that may be victims of `gang` at all, each as the
        members this scheduler bound: not itself, not already being evicted for another
        gang, not recently refused, not one that evicted it."""
        for key, decision in list(self.decisions.items()):
            if not any(self.cache.pod(p.pod_uid) for p in decision.placements):
                self.release(key)
                del self.decisions[key]  # the preemptor's pods are gone: so is its claim
        taken = set().union(*(d.victim_uids for d in self.decisions.values()))
        # Read from the cache's index of pods by gang (cache/gang_index.py), not grouped
        # here: every running pod of a large cluster would be read for it.
        gangs = self.cache.pods_by_gang()
        self._prune(gangs, now)
        for key in list(self.evicted_by):
            self.evicted_by[key] = {k for k in self.evicted_by[key] if k in gangs}
            if key not in gangs or not self.evicted_by[key]:
                del self.evicted_by[key]
        spared = self.evicted_by.get(gang.key, set())  # it evicted this gang: never back
        found = {}
        for key, by_uid in gangs.items():
            if key == gang.key or key in spared or self.refused.get(key, 0.0) > now:
                continue
            # The victim is the gang's members this scheduler bound, and only they: a
            # pod pinned to its node by whoever created it (our schedulerName or not)
            # is never evicted, and neither shields its gang (its priority, its pods)
            # nor is freed in the what-if: it stays, charged to its node and its
            # quota (cache/ownership.py, docs/security.md "A pinned member shields
            # nothing").
            pods = [
                pod
                for pod in by_uid.values()
                if pod.consumes_resources
                and pod.scheduler_name == self.scheduler_name
                and self.cache.bound_by_us(pod)
            ]
            if not pods:
                continue
            if any(pod.deleting or pod.uid in taken for pod in pods):
                continue  # already leaving: its room is not ours to count twice
            found[key] = self._weigh(key, pods)
        self._weighed = found
        return found

    def _weigh(self, key: str, pods: list[PodInfo]) -> VictimGang:
        """The gang as a `VictimGang`: the last search's when its members are the same
        records (what it sums is read from fields a record never changes), else anew."""
        known = self._weighed.get(key)
        devices = claims_held(pods, self.dra) if self.dra is not None else {}
        if (
            known is not None
            and len(known.pods) == len(pods)
            and all(old is new for old, new in zip(known.pods, pods, strict=True))
            and known.devices == devices
        ):
            return known
        stated = self.group_priority(key)
        priority = max(pod.priority for pod in pods) if stated is None else stated
        return VictimGang(key, priority, tuple(pods), devices)

    # --- the search -----------------------------------------------------------------------
    def _by_priority(
        self,
        gang: Gang,
        snapshot: Snapshot,
        now: float,
        running: Callable[[], dict[str, VictimGang]],
    ) -> Preemption | None:
        victims = self.candidates(gang, now, running)
        if not victims:
            return None
        holdings = {key: victim.holding for key, victim in victims.items()}
        admissible = floors_kept(gang, holdings, self.cache.quotas)
        found = self._search(gang, snapshot, now, victims, FEWEST_VICTIMS, admissible)
        return None if found is None else _decision(gang, *found, PRIORITY, self.dra)

    def _reclaim(
        self,
        gang: Gang,
        snapshot: Snapshot,
        now: float,
        running: Callable[[], dict[str, VictimGang]],
    ) -> Preemption | None:
        book = self.cache.quotas
        asked = reclaimed_resources(gang, book, self.dra)
        if not asked or not anyone_borrows(book, gang.namespace, asked):
            return None  # checked per quota before looking at every running pod
        gangs = running()
        # Only gangs of the namespaces lending back are weighed against their quota.
        lending = lenders(gang, asked, {victim.namespace for victim in gangs.values()}, book)
        holdings = {
            key: victim.holding for key, victim in gangs.items() if victim.namespace in lending
        }
        keys = reclaimable(gang, asked, holdings, book)
        if not keys:
            return None
        victims = {key: gangs[key] for key in keys}
        admissible = floors_kept(gang, holdings, book)
        found = self._search(gang, snapshot, now, victims, FEWEST_GPUS, admissible)
        return None if found is None else _decision(gang, *found, RECLAIM, self.dra)

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
        once they are gone (placed and admitted by its quota), or None. A gang that
        requires one domain of a topology level searches one domain at a time
        (`_search_by_domain`)."""
        topology = gang.topology
        if topology is not None and topology.required_key is not None:
            return self._search_by_domain(
                gang, snapshot, now, victims, rank, admissible, topology.required_key
            )
        return self._search_in(gang, snapshot, now, victims, rank, admissible)

    def _search_by_domain(
        self,
        gang: Gang,
        snapshot: Snapshot,
        now: float,
        victims: dict[str, VictimGang],
        rank: Rank,
        admissible: Callable[[frozenset[str]], bool],
        key: str,
    ) -> tuple[tuple[VictimGang, ...], Plan] | None:
        """Victims chosen within one domain of the gang's required level, which then
        holds it (the plan confines the gang there: scheduler/planner/required_domain.py):
        the domains whose free GPUs plus what its candidate victims hold there could hold
        the gang, those with the least to free first (the domain its bound members fix,
        if any), at most MAX_PREEMPTION_DOMAINS; in each, only the gangs with pods there,
        and a set is refused at once when the GPUs it frees there leave the gang short."""
        nodes = snapshot.nodes
        asked = sorted(p.gpu.total_milli for p in gang.pending if not p.problems)
        need = sum(asked[: max(gang.needed, 1)])
        fixed = {nodes[p.node_name].labels.get(key) for p in gang.bound if p.node_name in nodes}
        free: dict[str, int] = {}
        for node in nodes.values():
            value = node.labels.get(key)
            if value is not None and (not fixed or value in fixed):
                free[value] = free.get(value, 0) + node.free_gpu_milli
        freed: dict[str, dict[str, int]] = {}  # victim -> domain -> GPU milli it frees there
        for victim_key, victim in victims.items():
            where = freed[victim_key] = {}
            for pod in victim.pods:
                host = nodes.get(pod.node_name or "")
                value = host.labels.get(key) if host is not None else None
                if value is not None and value in free:
                    where[value] = where.get(value, 0) + pod.gpu.total_milli
        reachable = {
            value: room + sum(where.get(value, 0) for where in freed.values())
            for value, room in free.items()
        }
        order = sorted(
            (value for value, most in reachable.items() if most >= need),
            key=lambda value: (need - free[value], value),
        )
        for value in order[:MAX_PREEMPTION_DOMAINS]:
            there = {k: v for k, v in victims.items() if freed[k].get(value)}
            room = free[value]

            def short(keys: frozenset[str], value: str = value, room: int = room) -> bool:
                return room + sum(freed[k].get(value, 0) for k in keys) < need

            found = self._search_in(gang, snapshot, now, there, rank, admissible, short)
            if found is not None:
                return found
        return None

    def _search_in(
        self,
        gang: Gang,
        snapshot: Snapshot,
        now: float,
        victims: dict[str, VictimGang],
        rank: Rank,
        admissible: Callable[[frozenset[str]], bool],
        short: Callable[[frozenset[str]], bool] | None = None,
    ) -> tuple[tuple[VictimGang, ...], Plan] | None:
        """The victim search over `victims`; `short(keys)`: the set cannot make room
        (known without a planning pass)."""
        if not victims:
            return None
        pool = [_candidate(key, victim, now) for key, victim in victims.items()]
        fit = self._victim_fit(gang, victims, snapshot, pool)
        refuses = fit.refuses
        if short is not None:
            bound_refuses = refuses

            def refuses(keys: frozenset[str]) -> bool:
                return short(keys) or bound_refuses(keys)

        chosen = choose_victims(
            pool,
            fit.fits,
            rank=rank,
            admissible=admissible,
            refuses=refuses,
            gpu_floor=fit.bound.gpu_floor,
        )
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
        (scheduler/sharing/victim_fit.py: the same answers as planning every set on a fresh
        copy, at a fraction of the cost)."""
        if self._what_if is None:
            self._what_if = WhatIfSnapshot(self.cache, self.profile)
        self._what_if.sync(snapshot)
        pods = {key: victim.pods for key, victim in victims.items()}
        bound = RoomBound(gang, snapshot, self.profile)
        gpus = {candidate.key: candidate.gpu_milli for candidate in pool}
        return VictimFit(gang, pods, self._what_if, self.cache, bound, gpus, self.volumes, self.dra)

    def _victims_remain(self, decision: Preemption) -> bool:
        """Whether a victim still holds a pod, or a victim's claim whose devices the
        preemptor's plan took is not released yet (the resourceclaim controller acts
        after the pods are gone)."""
        for uid in decision.victim_uids:
            pod = self.cache.pod(uid)
            if pod is not None and pod.consumes_resources:
                return True
        # A claim still allocated and reserved for victims only: the controller has yet
        # to act. Reserved for anyone else meanwhile, it will not be released: the
        # decision is over (a new search sees that).
        return bool(self.unreleased(decision))

    def unreleased(self, decision: Preemption) -> list[str]:
        """The victims' claims whose devices the preemptor's plan took that are still
        allocated and reserved for victims only (the controller has yet to act)."""
        if self.dra is None:
            return []
        victims = decision.victim_uids
        return [
            key
            for key, _ in decision.released_claims
            if released_by(self.dra.claims.get(key), victims)
        ]

    def waiting_note(self, gang_key: str) -> str:
        """What the gang waits for while its decision is outstanding and its victims
        are gone: the release of their claims ("" when it waits for nothing of that)."""
        decision = self.decisions.get(gang_key)
        if decision is None or not decision.released_claims:
            return ""
        for uid in decision.victim_uids:
            pod = self.cache.pod(uid)
            if pod is not None and pod.consumes_resources:
                return ""  # the victims' own pods first: the usual words
        waiting = self.unreleased(decision)
        if not waiting:
            return ""
        return (
            f"preempted gangs are gone; waiting for the resourceclaim controller to "
            f"release their claims {', '.join(waiting)} (DRA devices "
            f"{device_list(decision.devices)} are kept for gang {gang_key})"
        )

    def _hold(self, decision: Preemption, now: float) -> None:
        try:
            self.cache.nominate(decision.placements, now)
        except AssumeError as error:
            # A member was deleted or bound meanwhile: the decision no longer holds.
            log.info("gang %s: its nomination cannot be held: %s", decision.preemptor, error)
            self.decisions.pop(decision.preemptor, None)
            return
        for volume, claim in decision.volumes:
            self.volumes.hold(volume, claim)
        if decision.devices and self.dra is not None:
            self.dra.keep(decision.preemptor, decision.devices)


# Devices named in a decision's message, the rest counted.
NAMED_DEVICES = 8


def _decision(
    gang: Gang,
    picked: tuple[VictimGang, ...],
    plan: Plan,
    reason: str,
    dra: DraCache | None = None,
) -> Preemption:
    """The decision to carry out, with the preemptor's message saying why."""
    names = ", ".join(v.key for v in picked)
    if reason == RECLAIM:
        message = (
            f"gang {gang.key} reclaims the min guaranteed to quota {gang.namespace}: "
            f"evicts {len(picked)} gang(s) borrowing beyond their quota's min: {names}"
        )
    else:
        message = (
            f"gang {gang.key} (priority {gang.priority}) preempts {len(picked)} "
            f"lower-priority gang(s) to fit: {names}"
        )
    placements = tuple(plan.placements)
    devices = planned_devices(plan)
    released: tuple[tuple[str, str], ...] = ()
    if devices and dra is not None:
        victims = frozenset(pod.uid for victim in picked for pod in victim.pods)
        keys = _claims_taking(dra, released_claims(dra, victims), frozenset(devices))
        released = tuple((key, _victim_of(dra, key, picked)) for key in keys)
        if released:
            message += (
                f"; its DRA devices {device_list(devices)} are freed when the resourceclaim "
                f"controller releases the victims' claims {', '.join(keys)}"
            )
    return Preemption(
        gang.key,
        gang.priority,
        picked,
        placements,
        message,
        reason,
        held(plan),
        devices,
        released,
    )


def planned_devices(plan: Plan) -> tuple[DeviceId, ...]:
    """The DRA devices the plan allocates (to claims it allocates itself)."""
    return tuple(
        sorted(
            {
                device
                for claim in plan.claims
                if claim.allocation is not None
                for device in claim.allocation.charged()
            }
        )
    )


def _claims_taking(
    dra: DraCache, keys: Iterable[str], devices: frozenset[DeviceId]
) -> tuple[str, ...]:
    """Those of the claims `keys` whose allocation takes one of `devices`."""
    found = []
    for key in sorted(keys):
        allocation = dra.allocation_of(key)
        if allocation is not None and not devices.isdisjoint(allocation.charged()):
            found.append(key)
    return tuple(found)


def _victim_of(dra: DraCache, key: str, picked: Iterable[VictimGang]) -> str:
    """The victim gang a released claim is reserved for (or made for)."""
    claim = dra.claims.get(key)
    users = set() if claim is None else {c.uid for c in claim.reserved_for} | {claim.owner_uid}
    for victim in picked:
        if any(pod.uid in users for pod in victim.pods):
            return victim.key
    return ""


def device_list(devices: Iterable[DeviceId]) -> str:
    """`driver/pool/device` names, at most NAMED_DEVICES, the rest counted."""
    names = [f"{d.driver}/{d.pool}/{d.device}" for d in devices]
    shown = ", ".join(names[:NAMED_DEVICES])
    if len(names) > NAMED_DEVICES:
        shown += f" and {len(names) - NAMED_DEVICES} more"
    return shown


def held(plan: Plan) -> tuple[tuple[str, str], ...]:
    """The static PVs the plan chose, with the claim each is for."""
    return tuple(
        (choice.volume, choice.claim.key)
        for choices in plan.volumes.values()
        for choice in choices
        if choice.volume
    )


def _candidate(key: str, victim: VictimGang, now: float) -> Candidate:
    """The victim as the search weighs it: GPUs its members hold, and how long it has
    run (since its oldest member was created)."""
    return Candidate(key, victim.priority, victim.gpu_milli, max(0.0, now - victim.started))


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
