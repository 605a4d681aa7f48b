"""The gang queue: which ready gang to try next, and when to try a failed one again.

Pure: no clock of its own (every call that depends on time takes `now`, in seconds),
no I/O, no threads. The caller feeds it gang keys and cluster changes.

States of a gang:

- ``active``: ready to try. Popped in order: gangs within their quota's min before
  gangs that would borrow beyond it; then higher priority first; among borrowing
  gangs of one priority, the namespace with the smallest dominant share per weight
  first (`set_share`, docs/quotas.md "Borrowers ordered by dominant share"); then
  older `created`, then key. Gangs back from the flush alone (below) come after all
  of those: nothing said they could fit now.
- ``in_flight``: popped and being placed or bound, until `done` or `failed`.
- ``unschedulable``: failed; waits for a cluster change that could help, or at most
  `max_unschedulable_seconds` (default 300, as kube-scheduler's
  podMaxInUnschedulablePodsDuration), whichever comes first.
- ``backoff``: a change arrived for it; it becomes active when its backoff expires,
  never earlier, so a flapping cluster cannot make the scheduler spin.

API:

- `add_or_update(key, priority, created, now)`: a new gang becomes active; a known one
  keeps its state (and attempts) and takes the new priority and created.
- `set_borrowing(key, borrowing, namespace)`: whether the gang would borrow beyond its
  quota's min, and its namespace (whose share orders it among borrowers).
- `set_share(namespace, share)`: the namespace's dominant share per weight changed
  (the caller says so when its usage or a quota changed): its borrowing gangs move,
  at the cost of one re-insertion per priority the namespace has active borrowers at,
  however many gangs it has waiting.
- `remove(key)`: forget the gang, whatever its state (its pods went away).
- `pop(now) -> str | None`: the next active gang, now in flight; None when none is
  active. Before choosing it moves expired backoffs to active and does `flush(now)`.
- `done(key)`: success; the gang is forgotten (its attempts reset with it).
- `failed(key, now, reason)`: attempts += 1; backoff = min(initial * 2**(attempts-1),
  max) (1 s and 60 s by default); retry_at = now + backoff; the gang goes to
  unschedulable. If a change that could help arrived while it was in flight, it goes
  to backoff instead: that change must not be lost.
- `cluster_changed(now, hint, key=None, could_help=None) -> int`: unschedulable gangs
  move to backoff (every one, only those `could_help(key)` accepts, or for
  `GANG_CHANGED` only gang `key`); returns how many moved. The
  adapter reports only changes that could free or add room: a node added, a node's
  allocatable/labels/taints changed, a pod that held resources deleted, a PodGroup or
  a gang's membership changed.
- `flush(now)`: unschedulable gangs older than max_unschedulable_seconds move to
  active (to backoff if still backing off), into a lane of their own that `pop` serves
  only when no other gang is active (higher priority, then in the order they were
  flushed): no change said they could fit, so however many there are and however old,
  they are never tried before a new gang or one a change may have helped (a cluster
  with thousands of impossible gangs would otherwise try them all, oldest first,
  before a new gang that fits, every max_unschedulable_seconds). A change that could
  help one moves it to the ordinary order. `pop` calls it; calling it on each loop is
  harmless.
- `next_wakeup(now) -> float | None`: the earliest time a gang may become active by
  itself (`now` when one is active already; None when nothing will). The loop sleeps
  until then or until an event. When nothing changes, `pop` returns None and this
  says when to look again: no busy loop is possible.
- `state(key)`, `attempts(key)`, `last_reason(key)`, `len(queue)`, `key in queue`,
  `counts()` (gangs per state, for metrics) and `snapshot()` (for /debug/gangs).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sortedcontainers import SortedList

GangState = Literal["active", "in_flight", "backoff", "unschedulable"]
STATES: tuple[GangState, ...] = ("active", "in_flight", "backoff", "unschedulable")

# 2**62 seconds is beyond any cap; bounding the exponent keeps the float finite.
_MAX_EXPONENT = 62


class ClusterChange(enum.Enum):
    """A change that could let a failed gang fit."""

    NODE_ADDED = "NodeAdded"
    NODE_UPDATED = "NodeUpdated"
    POD_DELETED = "PodDeleted"  # resources freed
    PODGROUP_CHANGED = "PodGroupChanged"
    GANG_CHANGED = "GangChanged"  # one gang's members or size changed; needs its key
    NAMESPACE_CHANGED = "NamespaceChanged"  # labels a namespaceSelector reads
    VOLUME_CHANGED = "VolumeChanged"  # a claim, PV, StorageClass or CSINode changed
    QUOTA_CHANGED = "QuotaChanged"  # an ElasticQuota's min or max changed
    DEVICE_CHANGED = "DeviceChanged"  # a ResourceSlice, DeviceClass or ResourceClaim changed


@dataclass(frozen=True, slots=True)
class GangStatus:
    """One gang as /debug/gangs shows it."""

    key: str
    state: GangState
    priority: int
    created: float
    added_at: float
    attempts: int
    last_reason: str
    retry_at: float | None  # when its backoff expires (after a failure)
    unschedulable_since: float | None


@dataclass(slots=True)
class _Entry:
    key: str
    priority: int
    created: float
    added_at: float
    state: GangState = "active"
    attempts: int = 0
    retry_at: float | None = None
    unschedulable_since: float | None = None
    last_reason: str = ""
    # A change that could help arrived while the gang was in flight.
    changed_in_flight: bool = False
    # It would borrow beyond its namespace's quota min: guaranteed gangs go first.
    borrowing: bool = False
    namespace: str = ""
    # When the flush alone brought it back (None: a new gang, or one a change may have
    # helped): it waits in the flushed lane, behind every other active gang.
    flushed_at: float | None = None

    def order(self) -> tuple[int, float, str]:
        return (-self.priority, self.created, self.key)

    def group(self) -> tuple[int, str]:
        """Its borrowers' group: gangs of one namespace at one priority."""
        return (self.priority, self.namespace)

    def flushed_order(self) -> tuple[int, float, str]:
        assert self.flushed_at is not None
        return (-self.priority, self.flushed_at, self.key)


class GangQueue:
    def __init__(
        self,
        *,
        initial_backoff_seconds: float = 1.0,
        max_backoff_seconds: float = 60.0,
        max_unschedulable_seconds: float = 300.0,
    ) -> None:
        if not 0 < initial_backoff_seconds <= max_backoff_seconds:
            raise ValueError(
                "backoff must satisfy 0 < initial <= max, got "
                f"initial={initial_backoff_seconds} max={max_backoff_seconds}"
            )
        if not max_unschedulable_seconds > 0:
            raise ValueError(
                f"max_unschedulable_seconds must be positive, got {max_unschedulable_seconds}"
            )
        self.initial_backoff_seconds = initial_backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.max_unschedulable_seconds = max_unschedulable_seconds
        self._entries: dict[str, _Entry] = {}
        # Active gangs within their min: (-priority, created, key).
        self._active = SortedList()
        # Active borrowing gangs, grouped by (priority, namespace), each group in age
        # order (created, key); the groups ordered by their head: (-priority, share of
        # the namespace, created, key). A namespace's share moves its groups only, never
        # its gangs one by one: the queue stays cheap however many gangs wait.
        self._groups: dict[tuple[int, str], SortedList] = {}
        self._heads = SortedList()
        self._shares: dict[str, float] = {}  # namespace -> dominant share per weight
        self._priorities: dict[str, set[int]] = {}  # namespace -> its groups' priorities
        # Active gangs back from the flush alone: (-priority, flushed_at, key), popped
        # only when no other gang is active.
        self._flushed = SortedList()
        self._backoff = SortedList()  # (retry_at, key)
        self._unschedulable = SortedList()  # (unschedulable_since, key)
        self._in_flight: set[str] = set()
        # Whether a gang would borrow now (the core sets it). A gang's borrowing is
        # judged when it is queued or changes; its namespace's usage can rise after
        # (other gangs of it placed), so a gang ordered as guaranteed is judged again
        # when it reaches the head: otherwise a tenant queueing many gangs while under
        # its min would pass every older borrowing gang of other namespaces with them.
        self.borrows_now: Callable[[str], bool] | None = None

    # --- feeding the queue -------------------------------------------------------

    def add_or_update(self, key: str, priority: int, created: float, now: float) -> None:
        # NaN would break the sorted order; an unknown age sorts last.
        created = created if not math.isnan(created) else math.inf
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(key=key, priority=priority, created=created, added_at=now)
            self._entries[key] = entry
            self._enter(entry)
            return
        if entry.priority == priority and entry.created == created:
            return
        if entry.state == "active":
            self._leave(entry)
            entry.priority, entry.created = priority, created
            self._enter(entry)
        else:
            entry.priority, entry.created = priority, created

    def set_borrowing(self, key: str, borrowing: bool, namespace: str = "") -> None:
        """Whether the gang would borrow beyond its quota's min, and its namespace
        (docs/quotas.md): a gang within its min is handed out before every borrowing
        gang; borrowing gangs of one priority by their namespace's share."""
        entry = self._entries.get(key)
        if entry is None or (entry.borrowing, entry.namespace) == (borrowing, namespace):
            return
        if entry.state == "active" and (entry.borrowing or borrowing):
            # Only borrowers are ordered by namespace: a gang that neither borrowed nor
            # borrows keeps its place (every new gang gets its namespace here).
            self._leave(entry)
            entry.borrowing, entry.namespace = borrowing, namespace
            self._enter(entry)
        else:
            entry.borrowing, entry.namespace = borrowing, namespace

    def set_share(self, namespace: str, share: float) -> None:
        """The namespace's dominant share per weight (policies/fair_share.py) changed:
        its active borrowing gangs are ordered by the new one."""
        share = share if not math.isnan(share) else math.inf
        if self._shares.get(namespace, 0.0) == share:
            return
        groups = [(p, namespace) for p in self._priorities.get(namespace, ())]
        for group in groups:
            self._heads.remove(self._head(group))
        if share:
            self._shares[namespace] = share
        else:
            self._shares.pop(namespace, None)
        for group in groups:
            self._heads.add(self._head(group))

    def share(self, namespace: str) -> float:
        """The share the queue orders the namespace's borrowing gangs by."""
        return self._shares.get(namespace, 0.0)

    def shared_namespaces(self) -> list[str]:
        """The namespaces with a share above 0."""
        return list(self._shares)

    def remove(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._detach(entry)

    def cluster_changed(
        self,
        now: float,
        hint: ClusterChange,
        key: str | None = None,
        *,
        could_help: Callable[[str], bool] | None = None,
    ) -> int:
        if hint is ClusterChange.GANG_CHANGED:
            if key is None:
                raise ValueError("ClusterChange.GANG_CHANGED needs the gang's key")
            entry = self._entries.get(key)
            candidates = [entry] if entry is not None else []
        else:
            candidates = [
                self._entries[k]
                for _, k in self._unschedulable
                if could_help is None or could_help(k)
            ]
            candidates += [
                self._entries[k] for *_, k in self._flushed if could_help is None or could_help(k)
            ]
            # A gang in flight may have been planned before the change: never lost.
            candidates += [self._entries[k] for k in self._in_flight]
        moved = 0
        for entry in candidates:
            if entry.state == "in_flight":
                entry.changed_in_flight = True
            elif entry.state == "unschedulable":
                self._detach(entry)
                entry.flushed_at = None
                self._to_backoff(entry)
                moved += 1
            elif entry.flushed_at is not None:
                # Back from the flush alone: the change may have made it fit, so it
                # takes its ordinary place (now, or when its backoff expires).
                if entry.state == "active":
                    self._leave(entry)
                    entry.flushed_at = None
                    self._enter(entry)
                    moved += 1
                else:
                    entry.flushed_at = None
        return moved

    # --- the scheduling loop -----------------------------------------------------

    def pop(self, now: float) -> str | None:
        self._release_backoffs(now)
        self.flush(now)
        while self._active and self.borrows_now is not None:
            head: str = self._active[0][-1]
            if not self.borrows_now(head):
                break
            # Goes among the borrowers; each gang flips once per pop.
            self.set_borrowing(head, True, self._entries[head].namespace)
        if self._active:
            key: str = self._active[0][-1]
        elif self._heads:
            key = self._heads[0][-1]
        elif self._flushed:
            key = self._flushed[0][-1]
        else:
            return None
        entry = self._entries[key]
        self._leave(entry)
        entry.flushed_at = None
        entry.state = "in_flight"
        self._in_flight.add(key)
        entry.changed_in_flight = False
        return key

    def done(self, key: str) -> None:
        self.remove(key)

    def failed(self, key: str, now: float, reason: str) -> None:
        entry = self._entries.get(key)
        if entry is None:  # removed while in flight: nothing to retry
            return
        self._detach(entry)
        entry.flushed_at = None
        entry.attempts += 1
        entry.last_reason = reason
        entry.retry_at = now + self.backoff_seconds(entry.attempts)
        if entry.changed_in_flight:
            entry.changed_in_flight = False
            self._to_backoff(entry)
        else:
            entry.state = "unschedulable"
            entry.unschedulable_since = now
            self._unschedulable.add((now, key))

    def flush(self, now: float) -> None:
        # Written as next_wakeup computes the wake-up time (since + wait), so that at
        # the instant it names the gang is due: `since <= now - wait` rounds otherwise.
        wait = self.max_unschedulable_seconds
        while self._unschedulable and self._unschedulable[0][0] + wait <= now:
            _, key = self._unschedulable.pop(0)
            entry = self._entries[key]
            entry.flushed_at = now  # behind every other active gang (module docstring)
            if entry.retry_at is not None and entry.retry_at > now:
                self._to_backoff(entry)
            else:
                self._to_active(entry)

    def next_wakeup(self, now: float) -> float | None:
        if self._active or self._heads or self._flushed:
            return now
        times: list[float] = []
        if self._backoff:
            times.append(self._backoff[0][0])
        if self._unschedulable:
            times.append(self._unschedulable[0][0] + self.max_unschedulable_seconds)
        return min(times) if times else None

    def backoff_seconds(self, attempts: int) -> float:
        """The wait after the `attempts`-th failure in a row."""
        exponent = min(max(attempts - 1, 0), _MAX_EXPONENT)
        return min(self.initial_backoff_seconds * 2.0**exponent, self.max_backoff_seconds)

    # --- looking in ----------------------------------------------------------------

    def state(self, key: str) -> GangState | None:
        entry = self._entries.get(key)
        return entry.state if entry is not None else None

    def ready_since(self, key: str) -> float | None:
        """When the gang entered the queue (it was ready then); None when unknown."""
        entry = self._entries.get(key)
        return entry.added_at if entry is not None else None

    def attempts(self, key: str) -> int:
        entry = self._entries.get(key)
        return entry.attempts if entry is not None else 0

    def last_reason(self, key: str) -> str | None:
        entry = self._entries.get(key)
        return entry.last_reason if entry is not None and entry.attempts else None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def counts(self) -> dict[GangState, int]:
        counts: dict[GangState, int] = dict.fromkeys(STATES, 0)
        for entry in self._entries.values():
            counts[entry.state] += 1
        return counts

    def snapshot(self) -> list[GangStatus]:
        """Every gang: in flight, then active in pop order, then backoff by expiry,
        then unschedulable by how long they have waited."""
        in_flight = sorted(self._in_flight)
        # Borrowers in the order they would pop were no share to change meanwhile.
        borrowers = sorted(
            (-e.priority, self.share(e.namespace), e.created, e.key)
            for group in self._groups.values()
            for e in (self._entries[key] for _, key in group)
        )
        keys = (
            in_flight
            + [key for *_, key in self._active]
            + [key for *_, key in borrowers]
            + [key for *_, key in self._flushed]
            + [key for _, key in self._backoff]
            + [key for _, key in self._unschedulable]
        )
        return [self._status(self._entries[key]) for key in keys]

    # --- moving between states -----------------------------------------------------

    def _detach(self, entry: _Entry) -> None:
        """Take the entry out of its state's index (the entry itself stays)."""
        if entry.state == "active":
            self._leave(entry)
        elif entry.state == "in_flight":
            self._in_flight.discard(entry.key)
        elif entry.state == "backoff":
            self._backoff.remove((entry.retry_at, entry.key))
        elif entry.state == "unschedulable":
            self._unschedulable.remove((entry.unschedulable_since, entry.key))

    def _to_backoff(self, entry: _Entry) -> None:
        entry.state = "backoff"
        entry.unschedulable_since = None
        if entry.retry_at is None:  # never failed: nothing to wait for
            self._to_active(entry)
            return
        self._backoff.add((entry.retry_at, entry.key))

    def _to_active(self, entry: _Entry) -> None:
        entry.state = "active"
        entry.unschedulable_since = None
        self._enter(entry)

    # --- the active index: guaranteed gangs, and borrowers grouped by namespace ---------

    def _enter(self, entry: _Entry) -> None:
        if entry.flushed_at is not None:
            self._flushed.add(entry.flushed_order())
            return
        if not entry.borrowing:
            self._active.add(entry.order())
            return
        group = entry.group()
        members = self._groups.get(group)
        if members is None:
            members = self._groups[group] = SortedList()
            self._priorities.setdefault(entry.namespace, set()).add(entry.priority)
        elif (entry.created, entry.key) > members[0]:
            members.add((entry.created, entry.key))
            return  # the head stays
        else:
            self._heads.remove(self._head(group))
        members.add((entry.created, entry.key))
        self._heads.add(self._head(group))

    def _leave(self, entry: _Entry) -> None:
        if entry.flushed_at is not None:
            self._flushed.remove(entry.flushed_order())
            return
        if not entry.borrowing:
            self._active.remove(entry.order())
            return
        group = entry.group()
        members = self._groups[group]
        if members[0] != (entry.created, entry.key):
            members.remove((entry.created, entry.key))
            return  # the head stays
        self._heads.remove(self._head(group))
        members.pop(0)
        if members:
            self._heads.add(self._head(group))
            return
        del self._groups[group]
        priorities = self._priorities[entry.namespace]
        priorities.discard(entry.priority)
        if not priorities:
            del self._priorities[entry.namespace]

    def _head(self, group: tuple[int, str]) -> tuple[int, float, float, str]:
        """The group's place among borrowers: its priority, its namespace's share,
        then its oldest gang."""
        priority, namespace = group
        created, key = self._groups[group][0]
        return (-priority, self.share(namespace), created, key)

    def _release_backoffs(self, now: float) -> None:
        while self._backoff and self._backoff[0][0] <= now:
            _, key = self._backoff.pop(0)
            self._to_active(self._entries[key])

    def _status(self, entry: _Entry) -> GangStatus:
        return GangStatus(
            key=entry.key,
            state=entry.state,
            priority=entry.priority,
            created=entry.created,
            added_at=entry.added_at,
            attempts=entry.attempts,
            last_reason=entry.last_reason,
            retry_at=entry.retry_at,
            unschedulable_since=entry.unschedulable_since,
        )
