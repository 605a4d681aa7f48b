"""The starvation guard: a gang that has waited too long gets a reservation on the nodes
it would fit on soonest (docs/quotas.md, "No starvation").

Without it a 64-GPU gang waits forever behind a stream of 1-GPU gangs: every GPU that
frees is taken by the next small gang before a whole node is ever empty.

The model:

- **Who.** A gang that failed and has waited `guard_seconds` since it became ready
  (entered the queue) starves; the first starving gang (highest priority, then oldest)
  gets the reservation, one gang at a time, until it is placed or gone (among gangs
  of one priority, the namespace served least recently first). A starving gang of
  strictly higher priority takes it over. Not for a gang its quota refuses
  (room would not help), one waiting on a preemption (its victims' room is held
  already), or one with volume claims (claims are resolved on the core's planning
  path only). Every record is of one stay in the queue: a gang deleted and recreated
  under its name (or no longer ready, then ready again) waits anew and loses its
  reservation; one that would not fit even drained is searched again only a guard
  period later.
- **Where: the nodes it would fit on soonest.** Run times are unknown, so "soonest" is
  "the least running work to wait for": nodes are ranked by the GPUs (then the pods)
  of this scheduler's running pods on them, and the planner plans the gang on a
  what-if copy of the cluster where the first k nodes of that ranking are drained of
  those pods, for the smallest k that lets it be placed and admitted by its quota. The
  planner's own choice among the nodes (its filters and scores) decides the rest.
  Pods of other schedulers are never waited for (they may never finish).
- **What it holds.** The plan's placements are charged on their nodes
  (`Reservation.RESERVED`, beyond what the nodes have free now) so that every other
  gang sees only the room the starving gang does not need there: what is backfilled
  can never delay it, since even running forever it leaves the reserved room free once
  the pods there now have left. Not counted against the gang's quota.
- **Who is still placed there.** Gangs of strictly higher priority plan as if the
  reservation were not there (the guard is against starvation by equal or lower
  work, not a priority inversion), and so do gangs within their quota's min when the
  reserved gang borrows (a guarantee beats priority: held back, they would wait for the
  borrower to run and then reclaim from it); every other gang only in the room left.
- **For how long.** Released just before the gang is planned (the room is its own),
  and held again when the attempt fails, on the same nodes: a reservation that moved
  would let new work onto the nodes it left and could starve the gang again. Planned
  again only when it no longer holds (a node or a member gone).

Limits: pods of this scheduler that never finish on a reserved node keep the gang
waiting; a reservation is remembered in memory only (a restart
starts the wait over); the held pods are seen by other gangs' inter-pod terms on
those nodes as a nominated preemptor's are.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cache.cluster import AssumeError, ClusterCache, Placement, Reservation
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from policies.profile import Profile
from scheduler.gang import Gang
from scheduler.isolation import FATAL
from scheduler.planner import Plan, Planner, Unschedulable
from scheduler.preemption import Preemption, WhatIf
from scheduler.quotas import refuse_before_planning, within_quota, would_borrow
from scheduler.reclaim import reclaimed_resources

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Held:
    """The reservation of one gang."""

    gang: str
    priority: int
    placements: tuple[Placement, ...]
    since: float  # when it was planned
    # When the gang entered the queue: a gang deleted and recreated under its name (or
    # that stopped being ready) enters again later and is another gang to the guard.
    ready_since: float | None = None
    # Whether the gang would borrow beyond its quota's min: then a gang within its own
    # min passes the reservation (a guarantee beats priority, and so a reservation).
    borrowing: bool = False

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(p.node for p in self.placements)


@dataclass
class StarvationGuard:
    cache: ClusterCache
    profile: Profile
    scheduler_name: str
    # Gangs with a preemption decision outstanding (their victims' room is held).
    preempting: Mapping[str, object] = field(default_factory=dict)
    # 0: off (the simulator and the demo; the adapter sets starvation.guardSeconds).
    guard_seconds: float = 0.0
    # When a gang entered the queue (the core's queue.ready_since), or None when it is not
    # queued: every record below is of one stay in the queue, so that a gang deleted and
    # recreated under its name starts its wait over (no old clock, no old reservation)
    # and a gang gone leaves nothing behind.
    ready_since_of: Callable[[str], float | None] = lambda key: None
    held: Held | None = None
    # (when it starves, gang key, ready since) of gangs that failed before starving.
    _due: list[tuple[float, str, float]] = field(default_factory=list)
    # key -> when the gang noted entered the queue.
    _noted: dict[str, float] = field(default_factory=dict)
    # Gangs that waited guard_seconds and were not placed since: key -> priority.
    _starving: dict[str, int] = field(default_factory=dict)
    # Gangs already told of a reservation (one `Reserved` event each), and the
    # reservations made since the adapter last asked.
    _announced: set[str] = field(default_factory=set)
    _news: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    _lifted: bool = False  # the hold is lifted for the gang being planned
    # namespace -> the ordinal of its latest reservation (0: never): among starving gangs
    # of one priority the namespace served least recently goes first, so a tenant that
    # keeps many large gangs waiting (and gives a reservation up by deleting its gang)
    # cannot keep the reservation, and the nodes draining, to itself.
    _turns: dict[str, int] = field(default_factory=dict)
    _made: int = 0

    # --- the core's hooks ---------------------------------------------------------------
    def before_planning(self, gang: Gang) -> None:
        """Lift the hold while `gang` is planned: its own, or for a gang of strictly
        higher priority."""
        held = self.held
        if held is not None and (
            held.gang == gang.key
            or gang.priority > held.priority
            or (held.borrowing and reclaimed_resources(gang, self.cache.quotas))
        ):
            self._release(held)
            self._lifted = True

    def after_attempt(
        self,
        gang: Gang,
        result: Plan | Unschedulable,
        preemption: Preemption | None,
        ready_since: float | None,
        snapshot: Snapshot,
        now: float,
    ) -> None:
        """After `gang` was planned or failed: hold the reservation again (or re-plan
        it), and note when a gang that failed starves."""
        lifted, self._lifted = self._lifted, False
        self._guarded(
            lambda: self._after(gang, result, preemption, ready_since, snapshot, now, lifted)
        )

    def tick(self, now: float, gangs: Mapping[str, Gang], snapshot: Snapshot) -> None:
        """Before a cycle picks its gang: gangs whose wait passed guard_seconds starve;
        the first (highest priority, then longest waiting) without a reservation held
        gets one. A gang starves only behind a stream of work, and a stream wakes the
        loop, so no timer of its own is needed."""
        if self.guard_seconds <= 0:
            return
        while self._due and self._due[0][0] <= now:
            _, key, since = heapq.heappop(self._due)
            if self._noted.get(key) != since:
                continue  # an earlier stay of the gang, forgotten since
            gang = gangs.get(key)
            if gang is not None and self._same_stay(key, since):
                self._starving[key] = gang.priority
            else:
                self._forget(key)
        if not self._starving:
            return
        held = self.held
        if held is not None and self._holds(held) and max(self._starving.values()) <= held.priority:
            return  # one reservation at a time: a strictly higher priority takes it over
        self._guarded(lambda: self._choose(now, gangs, snapshot))

    def waiting_on(self, gone: PodInfo) -> list[str]:
        """The reserved gang, when `gone` (a pod that held room) was on its nodes."""
        held = self.held
        if held is not None and gone.node_name in held.nodes:
            return [held.gang]
        return []

    def reservations(self) -> Mapping[str, frozenset[str]]:
        held = self.held
        if held is None or not self._holds(held):
            return {}
        return {held.gang: held.nodes}

    def remembered(self) -> frozenset[str]:
        """The gangs the guard keeps a record of (for tests and /debug)."""
        held = {self.held.gang} if self.held is not None else set()
        return frozenset({*self._noted, *self._starving, *self._announced, *held})

    def announcements(self) -> list[tuple[str, frozenset[str]]]:
        """Reservations made for a gang for the first time since the last call (gang
        key, nodes), for its `Reserved` event."""
        news, self._news = self._news, []
        return news

    # --- deciding -------------------------------------------------------------------------
    def _guarded(self, step: Callable[[], None]) -> None:
        try:
            step()
        except FATAL:
            raise
        except Exception:  # a bug here must not stop the cycle: no reservation
            log.exception("the starvation guard failed")
            if self.held is not None:
                self._release(self.held)
                self.held = None

    def _after(
        self,
        gang: Gang,
        result: Plan | Unschedulable,
        preemption: Preemption | None,
        ready_since: float | None,
        snapshot: Snapshot,
        now: float,
        lifted: bool,
    ) -> None:
        placed = isinstance(result, Plan) or preemption is not None
        if placed:  # placed, or a preemption holds its room now: not starving
            self._forget(gang.key)
        noted = self._noted.get(gang.key)
        if noted is not None and ready_since is not None and noted != ready_since:
            self._forget(gang.key)  # another stay in the queue: its wait starts over
        held = self.held
        if held is not None and held.gang == gang.key:
            if placed:
                self.held = None
            elif not self._same_stay(gang.key, held.ready_since, ready_since):
                self._release(held)
                self.held = None
            elif not self._hold(held, now):  # a node or member gone: planned again
                self._reserve(gang, snapshot, now, ready_since)
            if self.held is not None or placed:
                return
            held = None  # its reservation ended with its stay: noted anew below
        if lifted and held is not None:
            self._hold(held, now)
        if placed or self.guard_seconds <= 0 or ready_since is None:
            return
        if gang.key not in self._noted:
            self._noted[gang.key] = ready_since
            heapq.heappush(self._due, (ready_since + self.guard_seconds, gang.key, ready_since))

    def _choose(self, now: float, gangs: Mapping[str, Gang], snapshot: Snapshot) -> None:
        for key in [
            k
            for k in self._starving
            if k not in gangs or k in self.preempting or not self._same_stay(k, self._noted.get(k))
        ]:
            self._forget(key)
        if not self._starving:
            return
        best = min(
            self._starving,
            key=lambda k: (
                -self._starving[k],
                self._turns.get(gangs[k].namespace, 0),
                gangs[k].created,
                k,
            ),
        )
        held = self.held
        if held is not None:
            self._release(held)
            self.held = None
        stay = self._noted.get(best)
        if not self._reserve(gangs[best], snapshot, now, stay):
            # It would not fit even drained (or its quota refuses): looked at again only
            # after another guard period of this stay, not on each retry (the search
            # costs about 2 log2(nodes) plans, and a tenant may submit many such gangs).
            self._forget(best)
            if stay is not None:
                self._noted[best] = stay
                heapq.heappush(self._due, (now + self.guard_seconds, best, stay))
            if held is not None and held.gang in gangs:
                self._hold(held, now)

    def _forget(self, key: str) -> None:
        self._starving.pop(key, None)
        self._noted.pop(key, None)

    def _same_stay(self, key: str, since: float | None, current: float | None = None) -> bool:
        """Whether the gang is still in the stay in the queue that began at `since`
        (unknown times count as the same: the simulator's tests drive the guard alone)."""
        now_since = current if current is not None else self.ready_since_of(key)
        return since is None or now_since is None or since == now_since

    def _reserve(
        self, gang: Gang, snapshot: Snapshot, now: float, ready_since: float | None
    ) -> bool:
        """Make and hold a reservation for `gang` (told once per gang)."""
        self.cache.update_snapshot(snapshot)
        placements = self._soonest(gang, snapshot)
        if placements is None:
            return False
        borrows = would_borrow(gang, self.cache.quotas)
        made = Held(gang.key, gang.priority, placements, now, ready_since, borrows)
        if not self._hold(made, now):
            return False
        self._made += 1
        self._turns[gang.namespace] = self._made
        if len(self._turns) > 4096:  # namespaces gone long ago: keep the recent ones
            recent = sorted(self._turns.items(), key=lambda item: item[1])[-2048:]
            self._turns = dict(recent)
        if gang.key not in self._announced:
            present = {pod.gang_key for pod in self.cache.pods()}
            self._announced = {key for key in self._announced if key in present}
            self._announced.add(gang.key)
            self._news.append((gang.key, made.nodes))
        log.info("gang %s: reserved nodes %s", gang.key, ", ".join(sorted(made.nodes)))
        return True

    def _soonest(self, gang: Gang, snapshot: Snapshot) -> tuple[Placement, ...] | None:
        """The placements of `gang` on the nodes it would fit on soonest (module
        docstring), or None when it would not fit even with every node drained."""
        book = self.cache.quotas
        if any(pod.claims for pod in gang.pending) or refuse_before_planning(gang, book):
            return None
        drained: dict[str, list[PodInfo]] = {}
        for name in snapshot.nodes:
            drained[name] = [
                pod
                for pod in self.cache.pods_on(name)
                if pod.consumes_resources
                and pod.scheduler_name == self.scheduler_name
                and pod.gang_key != gang.key
            ]
        order = sorted(
            drained,
            key=lambda n: (sum(p.gpu.total_milli for p in drained[n]), len(drained[n]), n),
        )
        free = sum(1 for name in order if not drained[name])
        what_if = WhatIf(self.cache, snapshot)
        planner = Planner(self.profile, explain=False)

        def plan_draining(count: int) -> Plan | None:
            view = what_if.without(p for name in order[:count] for p in drained[name])
            result = planner.plan(gang, view)
            if not isinstance(result, Plan):
                return None
            admitted = within_quota(gang, result, book, self.cache.pod)
            return admitted if isinstance(admitted, Plan) else None

        # The smallest count that fits: doubling past the nodes with nothing to drain,
        # then halving the interval (more nodes drained never fits less).
        low, step, high = free, 1, None
        while high is None:
            count = min(free + step, len(order))
            if plan_draining(count) is not None:
                high = count
            elif count == len(order):
                return None
            else:
                low, step = count, step * 2
        while high - low > 1:
            middle = (low + high) // 2
            if plan_draining(middle) is not None:
                high = middle
            else:
                low = middle
        plan = plan_draining(high)
        return tuple(plan.placements) if plan is not None else None

    # --- holding --------------------------------------------------------------------------
    def _hold(self, held: Held, now: float) -> bool:
        try:
            self.cache.reserve(held.placements, now)
        except AssumeError as error:
            # A member was deleted, bound or planned meanwhile, or a node went.
            log.info("gang %s: its reservation no longer holds: %s", held.gang, error)
            self.held = None
            return False
        self.held = held
        return True

    def _release(self, held: Held) -> None:
        for placement in held.placements:
            if self.cache.reservation(placement.pod_uid) == Reservation.RESERVED:
                self.cache.forget(placement.pod_uid)

    def _holds(self, held: Held) -> bool:
        return all(
            self.cache.reservation(p.pod_uid) == Reservation.RESERVED for p in held.placements
        )
