"""The starvation guard: a gang that has waited too long gets a reservation on the nodes
it would fit on soonest (docs/quotas.md, "No starvation").

Without it a 64-GPU gang waits forever behind a stream of 1-GPU gangs: every GPU that
frees is taken by the next small gang before a whole node is ever empty.

The model:

- **Who.** A gang that failed and has waited `guard_seconds` since it became ready
  (entered the queue) starves. Every starving gang gets a reservation of its own, in
  order (highest priority, then the most GPUs, then oldest: a small gang is placed as
  soon as any room frees, a large one needs whole nodes to drain), each planned in the
  room the earlier ones leave, so reservations do not overlap and none is ever handed
  to another gang: the room a gang waits for stays its own until it is placed or gone.
  Except for a larger one: a reservation is planned through those of smaller gangs of
  its priority (or of lower priority), which are then placed in the room it leaves (a
  handful of 1-GPU reservations must not keep a 64-GPU gang from ever reserving).
  Among starving gangs of one priority and size, the namespace served least recently
  goes first. Every record is of one stay in the queue: a gang deleted and recreated
  under its name (or no longer ready, then ready again) waits anew and loses its
  reservation; one that would not fit even drained is searched again only a guard
  period later. Not for a gang its
  quota refuses (room would not help; checked again every cycle, cheaply), one
  waiting on a preemption (its victims' room is held already). A gang with volume
  claims is planned with them resolved (scheduler/planner/volume_claims.py), the drained pods
  taken as gone, so it reserves where its volumes can be reached; the static PVs that
  plan chose are not held (the reservation holds room, not volumes: the claims are
  resolved again when the gang is planned). A gang with DRA claims is planned with
  the drained pods' ResourceClaims released as the resourceclaim controller will
  release them once those pods end (cache/dra/view.py), so it reserves where their
  devices will free; the devices its plan allocates are kept with its room
  (DraCache.keep, under "<gang> (starvation reservation)"), so that no backfilled gang
  is given them as they free; they are lifted and held again with the room.
- **Where: the nodes it would fit on soonest.** Run times are unknown to the
  scheduler, so "soonest" is "the least running work to wait for": nodes are ranked by
  the GPUs (then the pods) of the running pods this scheduler bound on them (`_leaving`:
  pinned pods naming it are never waited for), and the planner
  plans the gang on a what-if copy of the cluster where the first k nodes of that
  ranking are drained of those pods, for the smallest k that lets it be placed and
  admitted by its quota. The planner's own choice among the nodes (its filters and
  scores) decides the rest. Pods of other schedulers are never waited for (they may
  never finish).
- **What it holds.** The plan's placements are charged on their nodes
  (`Reservation.RESERVED`, beyond what the nodes have free now) so that every other
  gang sees only the room the starving gang does not need there: what is backfilled
  can never delay it, since even running forever it leaves the reserved room free once
  the pods there now have left. Not counted against the gang's quota.
- **Who still passes.** A gang of strictly higher priority plans as if the reservation
  were not there (the guard is against starvation by equal or lower work, not a
  priority inversion), and so does a gang within its quota's min when the reserved
  gang borrows (a guarantee beats priority: held back, it would wait for the borrower
  to run and then reclaim from it). Everyone else only gets the room left. (Holding
  back smaller work of higher priority too was tried: docs/quotas.md says what it
  cost.)
- **For how long.** Released just before the gang is planned (the room is its own),
  and held again when the attempt fails, on the same nodes: a reservation that moved
  would let new work onto the nodes it left and could starve the gang again. Planned
  again only when it no longer holds (a node or a member gone); dropped when, checked
  after a failed attempt, the pods on its nodes that will leave would not make room
  (`_leads_to_placement`). A namespace's reservations together stay within its
  quota's max.
- **Bound.** Once reserved, the gang waits at most for the pods on its reserved nodes
  at that time to end, plus one backoff: nothing placed after the reservation takes
  its room (unless a gang of higher priority passes).

Limits: pods of this scheduler that never finish on a reserved node keep the gang
waiting; a reservation is remembered in memory only (a restart starts the wait over);
the held pods are seen by other gangs' inter-pod terms on those nodes as a nominated
preemptor's are.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cache import resources as res
from cache.cluster import AssumeError, ClusterCache, Placement, Reservation
from cache.dra.slices import DeviceId
from cache.dra.store import DraCache
from cache.pod import PodInfo
from cache.quota import GPU, QuotaBook, excess, usage_of
from cache.snapshot import Snapshot
from cache.volumes import VolumeCache
from policies.profile import Profile
from scheduler.gangs.gang import Gang
from scheduler.gangs.isolation import FATAL
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, Unschedulable
from scheduler.planner.volume_claims import plan_with_claims
from scheduler.sharing.preemption import Preemption, WhatIf, planned_devices
from scheduler.sharing.quotas import (
    needed_usage,
    refuse_before_planning,
    within_quota,
    would_borrow,
)
from scheduler.sharing.reclaim import reclaimed_resources

log = logging.getLogger(__name__)

# After a starving gang would not fit even with every node drained (most often: the
# other reservations hold the room), no reservation is planned for its namespace's
# gangs for this long unless a reservation ends first: each try is about 2 log2(nodes)
# planning passes, and in an overloaded cluster dozens of gangs starve at once. Per
# namespace, not for everyone: a tenant's gangs that can never be placed (larger than
# any other, so first in the order) would otherwise hold every other namespace's
# starving gangs back 60 s each, and a stream of them forever.
RETRY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Held:
    """The reservation of one gang."""

    gang: str
    priority: int
    gpu_milli: int  # what its needed members ask: a gang passes only if it asks as much
    placements: tuple[Placement, ...]
    since: float  # when it was planned
    # When the gang entered the queue: a gang deleted and recreated under its name (or
    # that stopped being ready) enters again later and is another gang to the guard.
    ready_since: float | None = None
    # Whether the gang would borrow beyond its quota's min: then a gang within its own
    # min passes the reservation (a guarantee beats priority, and so a reservation).
    borrowing: bool = False
    # The DRA devices its plan allocates, kept with its room.
    devices: tuple[DeviceId, ...] = ()

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(p.node for p in self.placements)


def passes(gang: Gang, held: Held, book: QuotaBook) -> bool:
    """Whether `gang` may plan through `held`: strictly higher priority (the guard is
    against starvation by equal or lower work, not a priority inversion), or within its
    quota's min against a borrowing gang's reservation."""
    if gang.key == held.gang:
        return False
    if gang.priority > held.priority:
        return True
    return held.borrowing and bool(reclaimed_resources(gang, book))


def overrides(gang: Gang, held: Held, book: QuotaBook) -> bool:
    """Whether the reservation of `gang` may be planned through `held`: it passes it, or
    is of the same priority and larger."""
    if passes(gang, held, book):
        return True
    asked = needed_usage(gang).get(GPU, 0)
    return gang.key != held.gang and gang.priority == held.priority and asked > held.gpu_milli


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
    # The core's volumes: a gang's claims are resolved in the what-if (the core passes
    # its own; empty, a gang with claims finds none of them and is not reserved for).
    volumes: VolumeCache = field(default_factory=VolumeCache)
    # The core's devices, for gangs with DRA claims (None: none known, never reserved).
    dra: DraCache | None = None
    # gang key -> its reservation, in the order they were made (earlier ones first).
    held: dict[str, Held] = field(default_factory=dict)
    # (when it starves, gang key, ready since) of gangs that failed before starving.
    _due: list[tuple[float, str, float]] = field(default_factory=list)
    # key -> when the gang noted entered the queue.
    _noted: dict[str, float] = field(default_factory=dict)
    # Gangs that waited guard_seconds and were not placed since: key -> priority.
    _starving: dict[str, int] = field(default_factory=dict)
    # When a reservation may be planned again after those that would not fit (0: now):
    # the earliest end of a pause below, when every starving gang's namespace is paused.
    _retry_at: float = 0.0
    # namespace -> until when its gangs are not searched for (one of them would not fit).
    _paused: dict[str, float] = field(default_factory=dict)
    # Gangs already told of a reservation (one `Reserved` event each), and the
    # reservations made since the adapter last asked.
    _announced: set[str] = field(default_factory=set)
    _news: list[tuple[str, frozenset[str]]] = field(default_factory=list)
    # Reservations lifted while a gang is planned (its own, those it passes).
    _lifted: list[Held] = field(default_factory=list)
    # namespace -> the ordinal of its latest reservation (0: never): among starving gangs
    # of one priority and size the namespace served least recently goes first, so a
    # tenant that keeps many large gangs waiting (and gives a reservation up by deleting
    # its gang) cannot keep the reservations, and the nodes draining, to itself.
    _turns: dict[str, int] = field(default_factory=dict)
    _made: int = 0

    # --- the core's hooks ---------------------------------------------------------------
    def before_planning(self, gang: Gang) -> None:
        """Lift the holds `gang` may plan through while it is planned: its own, those it
        passes, and when it has a reservation, those its reservation overrides."""
        if not self.held:
            return
        # A reserved gang plans through what its reservation was planned through.
        lifts = overrides if gang.key in self.held else passes
        book = self.cache.quotas
        for held in list(self.held.values()):
            if held.gang == gang.key or lifts(gang, held, book):
                self._release(held)
                self._lifted.append(held)

    def after_attempt(
        self,
        gang: Gang,
        result: Plan | Unschedulable,
        preemption: Preemption | None,
        ready_since: float | None,
        snapshot: Snapshot,
        now: float,
    ) -> None:
        """After `gang` was planned or failed: hold the reservations lifted for it again
        (its own re-planned if it no longer holds), and note when a gang that failed
        starves."""
        lifted, self._lifted = self._lifted, []
        self._guarded(
            lambda: self._after(gang, result, preemption, ready_since, snapshot, now, lifted)
        )

    def tick(self, now: float, gangs: Mapping[str, Gang], snapshot: Snapshot) -> None:
        """Before a cycle picks its gang: gangs whose wait passed guard_seconds starve;
        the first starving gang without a reservation (highest priority, then longest
        waiting) gets one, planned in the room the others leave. A gang starves only
        behind a stream of work, and a stream wakes the loop, so no timer of its own is
        needed."""
        if self.guard_seconds <= 0:
            return
        while self._due and self._due[0][0] <= now:
            _, key, since = heapq.heappop(self._due)
            if self._noted.get(key) != since:
                continue  # an earlier stay of the gang, forgotten since
            gang = gangs.get(key)
            if gang is not None and self._same_stay(key, since):
                self._starving[key] = gang.priority
                self._retry_at = 0.0  # its namespace may not be paused
            else:
                self._forget(key)
        if len(self._starving) > len(self.held) and now >= self._retry_at:
            # Some starving gang has no reservation.
            self._guarded(lambda: self._choose(now, gangs, snapshot))

    def waiting_on(self, gone: PodInfo) -> list[str]:
        """The reserved gangs with `gone` (a pod that held room) on their nodes."""
        return [key for key, held in self.held.items() if gone.node_name in held.nodes]

    def reservations(self) -> Mapping[str, frozenset[str]]:
        return {key: held.nodes for key, held in self.held.items() if self._holds(held)}

    def remembered(self) -> frozenset[str]:
        """The gangs the guard keeps a record of (for tests and /debug)."""
        return frozenset({*self._noted, *self._starving, *self._announced, *self.held})

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
            for held in list(self.held.values()):
                self._release(held)
            self.held.clear()

    def _after(
        self,
        gang: Gang,
        result: Plan | Unschedulable,
        preemption: Preemption | None,
        ready_since: float | None,
        snapshot: Snapshot,
        now: float,
        lifted: list[Held],
    ) -> None:
        placed = isinstance(result, Plan) or preemption is not None
        if placed:  # placed, or a preemption holds its room now: not starving
            self._forget(gang.key)
        noted = self._noted.get(gang.key)
        if noted is not None and ready_since is not None and noted != ready_since:
            self._forget(gang.key)  # another stay in the queue: its wait starts over
        for held in lifted:  # the others' first: the check below plans among them
            if held.gang != gang.key:
                self._hold(held, now)
        for held in lifted:
            if held.gang != gang.key:
                continue
            if placed or gang.key not in self.held:
                continue  # forgotten above: its reservation ended with its stay
            if not self._same_stay(gang.key, held.ready_since, ready_since):
                self._forget(gang.key)
            elif not self._leads_to_placement(gang, held, snapshot, now):
                # Something that will not leave (a pod this scheduler did not bind, a
                # node changed) stands in its room: held, it would keep those nodes
                # from everyone for nothing. Dropped; the gang starves on and gets
                # another one (`_choose`, in turn) or, fitting nowhere, none for a
                # guard period.
                log.info("gang %s: its reservation can no longer place it", gang.key)
                del self.held[gang.key]
                self._reopen()
            elif not self._hold(held, now):  # a node or member gone: planned again
                self._reserve(gang, snapshot, now, ready_since)
        if gang.key in self.held or placed or self.guard_seconds <= 0 or ready_since is None:
            return
        if gang.key not in self._noted:
            # Counted from when it became ready (first eligible), not from this failure.
            self._noted[gang.key] = ready_since
            heapq.heappush(self._due, (ready_since + self.guard_seconds, gang.key, ready_since))

    def _choose(self, now: float, gangs: Mapping[str, Gang], snapshot: Snapshot) -> None:
        for key in [
            k
            for k in self._starving
            if k not in gangs or k in self.preempting or not self._same_stay(k, self._noted.get(k))
        ]:
            self._forget(key)
        book = self.cache.quotas
        asked = {
            key: needed_usage(gangs[key]).get(GPU, 0)
            for key in self._starving
            if key not in self.held
        }
        waiting = sorted(
            asked,
            key=lambda k: (
                -self._starving[k],
                -asked[k],
                self._turns.get(gangs[k].namespace, 0),
                gangs[k].created,
                k,
            ),
        )
        self._paused = {ns: until for ns, until in self._paused.items() if until > now}
        refused = False
        for key in waiting:
            gang = gangs[key]
            if gang.namespace in self._paused:
                continue  # one of its namespace's gangs fitted nowhere a moment ago
            if refuse_before_planning(gang, book, self.dra):
                refused = True
                continue  # its quota refuses it: room would not help (asked again later)
            stay = self._noted.get(key)
            if not self._reserve(gang, snapshot, now, stay):
                # It would not fit even drained (the other reservations may hold the
                # room): looked at again only after another guard period of this stay,
                # not on each retry (a tenant may submit many such gangs).
                self._forget(key)
                if stay is not None:
                    self._noted[key] = stay
                    heapq.heappush(self._due, (now + self.guard_seconds, key, stay))
                self._paused[gang.namespace] = now + RETRY_SECONDS
            return  # one reservation planned a cycle
        if self._paused and not refused:
            # Every gang left waits on its namespace's pause: nothing to sort until then.
            self._retry_at = min(self._paused.values())

    def _forget(self, key: str) -> None:
        self._starving.pop(key, None)
        self._noted.pop(key, None)
        held = self.held.pop(key, None)
        if held is not None:
            self._release(held)
            self._reopen()  # its room is free for another reservation

    def _reopen(self) -> None:
        """A reservation ended: its room may let gangs fit that did not."""
        self._retry_at = 0.0
        self._paused.clear()

    def _same_stay(self, key: str, since: float | None, current: float | None = None) -> bool:
        """Whether the gang is still in the stay in the queue that began at `since`
        (unknown times count as the same: the simulator's tests drive the guard alone)."""
        now_since = current if current is not None else self.ready_since_of(key)
        return since is None or now_since is None or since == now_since

    def _reserve(
        self, gang: Gang, snapshot: Snapshot, now: float, ready_since: float | None
    ) -> bool:
        """Make and hold a reservation for `gang` (told once per gang), in the room the
        other reservations leave, except those it passes."""
        book = self.cache.quotas
        if not self._within_max_with_reservations(gang):
            return False
        passed = [h for h in self.held.values() if overrides(gang, h, book)]
        for held in passed:
            self._release(held)
        try:
            self.cache.update_snapshot(snapshot)
            plan = self._soonest(gang, snapshot)
        finally:
            for held in passed:
                self._hold(held, now)
        if plan is None:
            return False
        asked = needed_usage(gang).get(GPU, 0)
        borrows = would_borrow(gang, book, self.dra)
        placements, devices = tuple(plan.placements), planned_devices(plan)
        made = Held(gang.key, gang.priority, asked, placements, now, ready_since, borrows, devices)
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

    def _soonest(self, gang: Gang, snapshot: Snapshot) -> Plan | None:
        """The plan of `gang` on the nodes it would fit on soonest (module docstring),
        or None when it would not fit even with every node drained."""
        book = self.cache.quotas
        if refuse_before_planning(gang, book, self.dra):
            return None
        drained = {name: self._leaving(name, gang) for name in snapshot.nodes}
        order = sorted(
            drained,
            key=lambda n: (sum(p.gpu.total_milli for p in drained[n]), len(drained[n]), n),
        )
        free = sum(1 for name in order if not drained[name])
        what_if = WhatIf(self.cache, snapshot)
        planner = Planner(self.profile, explain=False)

        def plan_draining(count: int) -> Plan | None:
            gone = [p for name in order[:count] for p in drained[name]]
            return self._plan_without(gang, what_if, planner, gone)

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
        return plan_draining(high)

    def _within_max_with_reservations(self, gang: Gang) -> bool:
        """Whether the namespace's usage, its other gangs' reservations and the gang's
        needed members stay within its quota's max. A reservation is not charged to the
        quota (the gang is admitted when it is placed), so without this a tenant could
        hold its max once per starving gang: many gangs that can never be placed (their
        blockers its own pods that never end) would reserve the cluster."""
        book = self.cache.quotas
        quota = book.governing(gang.namespace)
        if quota is None:
            return True
        reserved = res.total_of(
            usage_of(pod.requests, pod.gpu)
            for held in self.held.values()
            if held.gang != gang.key
            for placement in held.placements
            if (pod := self.cache.pod(placement.pod_uid)) is not None
            and pod.namespace == gang.namespace
        )
        used = res.total_of([book.ledger.used(gang.namespace), reserved])
        return excess(quota, used, needed_usage(gang)) is None

    def _leaving(self, node: str, gang: Gang) -> list[PodInfo]:
        """The pods on `node` the gang would wait for: those that will leave when their
        work ends, which are the pods this scheduler bound (of other gangs). A pod it did
        not bind (another scheduler's, or one pinned to the node by its creator while
        naming this scheduler) may never leave: the guard never counts on it going,
        or a tenant pinning a pod on every node would reserve them all for a gang that
        can never be placed (docs/security.md)."""
        return [
            pod
            for pod in self.cache.pods_on(node)
            if pod.consumes_resources
            and pod.gang_key != gang.key
            and pod.scheduler_name == self.scheduler_name
            and self.cache.bound_by_us(pod)
        ]

    def _plan_without(
        self, gang: Gang, what_if: WhatIf, planner: Planner, gone: list[PodInfo]
    ) -> Plan | None:
        """The gang planned (and admitted by its quota) with `gone` drained, or None."""
        view = what_if.without(gone)
        uids = frozenset(p.uid for p in gone)
        result = plan_with_claims(planner, gang, view, self.volumes, self.cache, uids, self.dra)
        if not isinstance(result, Plan):
            return None
        admitted = within_quota(gang, result, self.cache.quotas, self.cache.pod, self.dra)
        return admitted if isinstance(admitted, Plan) else None

    def _leads_to_placement(self, gang: Gang, held: Held, snapshot: Snapshot, now: float) -> bool:
        """Whether `gang` would be placed once the pods on its reserved nodes that will
        leave have left (as when it was reserved, through the reservations it overrides):
        one planning pass, after an attempt of the reserved gang failed."""
        book = self.cache.quotas
        passed = [h for h in self.held.values() if h.gang != gang.key and overrides(gang, h, book)]
        for other in passed:
            self._release(other)
        try:
            self.cache.update_snapshot(snapshot)
            gone = [pod for name in held.nodes for pod in self._leaving(name, gang)]
            what_if = WhatIf(self.cache, snapshot)
            planner = Planner(self.profile, explain=False)
            return self._plan_without(gang, what_if, planner, gone) is not None
        finally:
            for other in passed:
                self._hold(other, now)

    # --- holding --------------------------------------------------------------------------
    def _hold(self, held: Held, now: float) -> bool:
        try:
            self.cache.reserve(held.placements, now)
        except AssumeError as error:
            # A member was deleted, bound or planned meanwhile, or a node went.
            log.info("gang %s: its reservation no longer holds: %s", held.gang, error)
            self.held.pop(held.gang, None)
            return False
        self.held[held.gang] = held
        if held.devices and self.dra is not None:
            self.dra.keep(kept_for(held.gang), held.devices)
        return True

    def _release(self, held: Held) -> None:
        for placement in held.placements:
            if self.cache.reservation(placement.pod_uid) == Reservation.RESERVED:
                self.cache.forget(placement.pod_uid)
        if held.devices and self.dra is not None:
            self.dra.release_kept(kept_for(held.gang))

    def _holds(self, held: Held) -> bool:
        return all(
            self.cache.reservation(p.pod_uid) == Reservation.RESERVED for p in held.placements
        )


def kept_for(gang_key: str) -> str:
    """The owner of the devices a reservation keeps (DraCache.keep): apart from a
    preemption's, which is kept under the gang's key."""
    return f"{gang_key} (starvation reservation)"
