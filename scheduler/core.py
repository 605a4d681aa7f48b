"""One scheduling cycle, shared by the demo, the simulator and the Kubernetes adapter.

`SchedulingCore` owns the cache, the gang index, the queue and the planner, and is
fed watch events by whichever adapter runs it. `schedule_next(now)` pops the next
ready gang, plans it against an up-to-date snapshot and, when the plan holds, assumes
it in the cache; the adapter then binds (or, in the simulator, confirms) and reports
back. Nothing here does I/O or reads a clock: `now` comes from the caller.

While a gang's binds are in flight its members are shown to gang assembly as bound
to their planned nodes, so the gang is neither re-planned nor seen as partial.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cache.cluster import ClusterCache, EventType, Placement
from cache.jsonobj import metadata, object_uid
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from cache.volumes import VolumeCache
from policies.filters.node_volume_limits import attached_volumes, pod_csi_volumes
from policies.filters.volume_binding import claim_users, claims_with_single_user, resolve_members
from policies.profile import Profile
from policies.scores.fragmentation import OnlineWorkload
from scheduler.gang import Gang, GangIndex, Problem
from scheduler.planner import Plan, Planner, Unschedulable
from scheduler.queue import ClusterChange, GangQueue

DEFAULT_SCHEDULER_NAME = "gang-scheduler"


@dataclass(frozen=True)
class Attempt:
    """What one cycle decided for one gang."""

    gang: Gang
    result: Plan | Unschedulable
    # When the gang first became ready and entered the queue (for gang wait time).
    ready_since: float | None = None
    # Which attempt this was for the gang (1 for the first), as logged.
    number: int = 1


@dataclass
class Reconciliation:
    """A fresh list of one resource, applied as it arrives: `add` each page (every
    listed object is applied as an update), then `finish`, which removes what the list
    lacked. Pages applied one by one let a relist of 150,000 pods neither hold the
    whole list in memory nor stop the event loop until the last page is in."""

    apply: Callable[[Mapping[str, Any], float], str]  # applies one object, returns its key
    remove_missing: Callable[[set[str], float], None]
    listed: set[str] = field(default_factory=set)

    def add(self, objs: Iterable[Mapping[str, Any]], now: float) -> None:
        for obj in objs:
            self.listed.add(self.apply(obj, now))

    def finish(self, now: float) -> None:
        self.remove_missing(self.listed, now)


class SchedulingCore:
    def __init__(
        self,
        profile: Profile,
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        cache: ClusterCache | None = None,
        queue: GangQueue | None = None,
        explain_failures: bool = True,
    ) -> None:
        self.profile = profile
        self.scheduler_name = scheduler_name
        # `is not None`: an empty queue is falsy (it has a length).
        self.cache = cache if cache is not None else ClusterCache()
        self.queue = queue if queue is not None else GangQueue()
        self.planner = Planner(profile, explain=explain_failures)
        # Gang problems name the keys the cache reads pods with.
        self.index = GangIndex(scheduler_name, self.cache.gang_keys)
        self.snapshot = Snapshot()
        self.gangs: dict[str, Gang] = {}
        # Gangs with required pod affinity or DoNotSchedule spread, with those members:
        # a pod their terms select that starts running (or is relabelled) may let them
        # fit (kube-scheduler's queueing hints for these plugins do the same).
        self._pod_dependent: dict[str, list[PodInfo]] = {}
        self.problems: list[Problem] = []
        # Claims, PVs, StorageClasses and CSINodes (scheduler/kube/informer.py feeds
        # them; the simulator has none), and the static PVs each planned gang holds.
        self.volumes = VolumeCache()
        self._held_volumes: dict[str, list[tuple[str, str]]] = {}

    # --- events -----------------------------------------------------------------------
    def apply_node(self, event: EventType | str, obj: Mapping[str, Any], now: float) -> None:
        known = self.cache.node(str(metadata(obj).get("name") or ""))
        generation = self.cache.generation
        self.cache.apply_node(event, obj)
        if event != EventType.DELETED and self.cache.generation != generation:
            hint = ClusterChange.NODE_UPDATED if known else ClusterChange.NODE_ADDED
            self.queue.cluster_changed(now, hint)

    def apply_pod(self, event: EventType | str, obj: Mapping[str, Any], now: float) -> None:
        uid = object_uid(obj)
        before = self.cache.pod(uid)
        held = before is not None and before.consumes_resources
        pod = self.cache.apply_pod(event, obj)
        if pod is None:
            if before is not None:
                self.index.delete_pod(before.key)
        else:
            self._show(pod)
            if (
                isinstance(self.profile.workload, OnlineWorkload)
                and not pod.node_name
                and pod.scheduler_name == self.scheduler_name
            ):
                # Fragmentation scores learn the expected workload from arrivals.
                self.profile.workload.observe(pod)
        if held and (pod is None or not pod.consumes_resources):
            self.queue.cluster_changed(now, ClusterChange.POD_DELETED)
        elif (
            self._pod_dependent
            and pod is not None
            and pod.consumes_resources
            and (not held or before is None or before.labels != pod.labels)
        ):
            namespaces = self.cache.namespace_labels()
            for key, members in self._pod_dependent.items():
                if any(_selects(member, pod, namespaces) for member in members):
                    self.queue.cluster_changed(now, ClusterChange.GANG_CHANGED, key)

    def apply_podgroup(self, event: EventType | str, obj: Mapping[str, Any], now: float) -> None:
        group = self.cache.apply_podgroup(event, obj)
        meta = metadata(obj)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if group is None:
            self.index.delete_podgroup(key)
        else:
            self.index.upsert_podgroup(group)

    def apply_namespace(self, event: EventType | str, obj: Mapping[str, Any], now: float) -> None:
        """Namespace labels, for pod affinity's namespaceSelector: a change may let a
        gang waiting on such a term fit."""
        name = str(metadata(obj).get("name") or "")
        before = self.cache.namespace_labels().get(name)
        self.cache.apply_namespace(event, obj)
        if self.cache.namespace_labels().get(name) != before:
            self.queue.cluster_changed(now, ClusterChange.NAMESPACE_CHANGED)

    def apply_volume_object(
        self, kind: str, event: EventType | str, obj: Mapping[str, Any], now: float
    ) -> None:
        """A claim, PV, StorageClass or CSINode event (kind: the VolumeCache store:
        claims, volumes, classes, csinodes). A change may let a waiting gang fit."""
        generation = self.volumes.generation
        _VOLUME_APPLY[kind](self.volumes, str(event), obj)
        if self.volumes.generation != generation:
            self.queue.cluster_changed(now, ClusterChange.VOLUME_CHANGED)

    def relist_volume_objects(self, kind: str) -> Reconciliation:
        def apply(obj: Mapping[str, Any], now: float) -> str:
            self.apply_volume_object(kind, EventType.MODIFIED, obj, now)
            meta = metadata(obj)
            if kind == "claims":
                return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
            return str(meta.get("name") or "")

        def remove_missing(listed: set[str], now: float) -> None:
            store: Mapping[str, object] = getattr(self.volumes, kind)
            generation = self.volumes.generation
            self.volumes.forget(kind, [key for key in store if key not in listed])
            if self.volumes.generation != generation:
                self.queue.cluster_changed(now, ClusterChange.VOLUME_CHANGED)

        return Reconciliation(apply, remove_missing)

    # --- relists ------------------------------------------------------------------------
    # After a broken watch or 410 Gone the adapter lists again and reconciles: every
    # listed object is applied as an update, every known one the list lacks is gone.
    # Reservations (assumed pods) of pods that still exist survive; those of pods the
    # list lacks go with them.
    def relist_nodes(self) -> Reconciliation:
        def apply(obj: Mapping[str, Any], now: float) -> str:
            self.apply_node(EventType.MODIFIED, obj, now)
            return str(metadata(obj).get("name") or "")

        def remove_missing(listed: set[str], now: float) -> None:
            for node in [n for n in self.cache.nodes() if n.name not in listed]:
                self.apply_node(EventType.DELETED, {"metadata": {"name": node.name}}, now)

        return Reconciliation(apply, remove_missing)

    def relist_pods(self) -> Reconciliation:
        def apply(obj: Mapping[str, Any], now: float) -> str:
            self.apply_pod(EventType.MODIFIED, obj, now)
            return object_uid(obj)

        def remove_missing(listed: set[str], now: float) -> None:
            for pod in [p for p in self.cache.pods() if p.uid not in listed]:
                gone = {"metadata": {"uid": pod.uid, "namespace": pod.namespace, "name": pod.name}}
                self.apply_pod(EventType.DELETED, gone, now)

        return Reconciliation(apply, remove_missing)

    def relist_namespaces(self) -> Reconciliation:
        def apply(obj: Mapping[str, Any], now: float) -> str:
            self.apply_namespace(EventType.MODIFIED, obj, now)
            return str(metadata(obj).get("name") or "")

        def remove_missing(listed: set[str], now: float) -> None:
            for name in [n for n in self.cache.namespace_labels() if n not in listed]:
                self.apply_namespace(EventType.DELETED, {"metadata": {"name": name}}, now)

        return Reconciliation(apply, remove_missing)

    def relist_podgroups(self) -> Reconciliation:
        def apply(obj: Mapping[str, Any], now: float) -> str:
            self.apply_podgroup(EventType.MODIFIED, obj, now)
            meta = metadata(obj)
            return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"

        def remove_missing(listed: set[str], now: float) -> None:
            for key in [k for k in self.cache.podgroups() if k not in listed]:
                namespace, name = key.split("/", 1)
                gone = {"metadata": {"namespace": namespace, "name": name}}
                self.apply_podgroup(EventType.DELETED, gone, now)

        return Reconciliation(apply, remove_missing)

    def replace_nodes(self, objs: Iterable[Mapping[str, Any]], now: float) -> None:
        """Reconcile with a whole node list at once."""
        _reconcile(self.relist_nodes(), objs, now)

    def replace_pods(self, objs: Iterable[Mapping[str, Any]], now: float) -> None:
        """Reconcile with a whole pod list at once."""
        _reconcile(self.relist_pods(), objs, now)

    def replace_podgroups(self, objs: Iterable[Mapping[str, Any]], now: float) -> None:
        """Reconcile with a whole PodGroup list at once (empty when the CRD is absent)."""
        _reconcile(self.relist_podgroups(), objs, now)

    def _show(self, pod: PodInfo) -> None:
        """Tell gang assembly about a pod, as bound where the cache assumes it."""
        placement = self.cache.assumed_placement(pod.uid)
        if placement is not None and not pod.node_name:
            pod = dataclasses.replace(pod, node_name=placement.node, phase="Running")
        self.index.upsert_pod(pod)

    # --- the cycle ----------------------------------------------------------------------
    def refresh(self, now: float) -> None:
        """Bring gangs and the queue up to date with the events applied so far."""
        gang_set, changed = self.index.assemble()
        self.gangs = gang_set.gangs
        self.problems = gang_set.problems
        for key in changed:
            gang = self.gangs.get(key)
            dependent = [p for p in gang.pending if _waits_on_pods(p)] if gang else []
            if dependent:
                self._pod_dependent[key] = dependent
            else:
                self._pod_dependent.pop(key, None)
            if gang is None or not gang.ready:
                if self.queue.state(key) != "in_flight":
                    self.queue.remove(key)
                continue
            if key not in self.queue:
                self.queue.add_or_update(key, gang.priority, gang.created, now)
            else:
                self.queue.add_or_update(key, gang.priority, gang.created, now)
                self.queue.cluster_changed(now, ClusterChange.GANG_CHANGED, key)

    def waiting(self) -> list[tuple[Gang, str]]:
        """Gangs that are not ready, with the message their pods should carry."""
        return [
            (gang, gang.waiting_message)
            for gang in self.gangs.values()
            if gang.waiting_message is not None
        ]

    def schedule_next(self, now: float) -> Attempt | None:
        """Plan the next ready gang; None when no gang is due (see queue.next_wakeup)."""
        self.refresh(now)
        key = self.queue.pop(now)
        if key is None:
            return None
        gang = self.gangs.get(key)
        if gang is None or not gang.ready:
            self.queue.remove(key)
            return self.schedule_next(now)
        self.cache.update_snapshot(self.snapshot)
        ready_since = self.queue.ready_since(key)
        number = self.queue.attempts(key) + 1
        result = self._plan(gang)
        if isinstance(result, Plan):
            self._hold_volumes(result)
            self.cache.assume(result.placements, now)
            for placement in result.placements:
                self._reshow(placement.pod_uid)
            self.queue.done(key)
        else:
            self.queue.failed(key, now, result.message)
        return Attempt(gang, result, ready_since, number)

    def _plan(self, gang: Gang) -> Plan | Unschedulable:
        """Plan the gang with its members' claims resolved against the volumes."""
        if not any(pod.claims for pod in gang.pending):
            return self.planner.plan(gang, self.snapshot)
        keys = claims_with_single_user(gang.pending, self.volumes)
        users = claim_users(self._placed_pods(), keys) if keys else {}
        limits = None
        if self.volumes.csinodes:
            drivers = {
                d for pod in gang.pending for d in pod_csi_volumes(pod, self.volumes).values()
            }
            if drivers:
                limits = attached_volumes(drivers, self.volumes, self.cache.pods_on)
        members, volumes = resolve_members(gang.pending, self.volumes, users, limits)
        view = dataclasses.replace(gang, pending=members)
        return self.planner.plan(view, self.snapshot, volumes)

    def _placed_pods(self) -> Iterable[PodInfo]:
        """Pods on a node or planned onto one, not finished: those holding a claim."""
        for pod in self.cache.pods():
            if pod.consumes_resources or self.cache.is_assumed(pod.uid):
                yield pod

    def _hold_volumes(self, plan: Plan) -> None:
        """Hold the static PVs the plan chose until their events show them bound (or
        the gang breaks), so that the next gang is not given them too."""
        for key in [
            key
            for key, pairs in self._held_volumes.items()
            if all(self.volumes.held_for(volume) != claim for volume, claim in pairs)
        ]:
            del self._held_volumes[key]  # every hold of that gang is over
        held = []
        for choices in plan.volumes.values():
            for choice in choices:
                if choice.volume:
                    self.volumes.hold(choice.volume, choice.claim.key)
                    held.append((choice.volume, choice.claim.key))
        if held:
            self._held_volumes[plan.gang_key] = held

    # --- outcomes of binding ----------------------------------------------------------
    def bound(self, placement: Placement) -> None:
        """A bind succeeded and no watch will tell (simulator, demo): record it."""
        self.cache.confirm(placement.pod_uid, placement.node, placement.shares)
        self._reshow(placement.pod_uid)

    def bind_failed(
        self, gang_key: str, placements: Sequence[Placement], now: float, reason: str
    ) -> None:
        """Some bind of the gang failed: release every reservation and retry later."""
        for placement in placements:
            self.cache.forget(placement.pod_uid)
            self._reshow(placement.pod_uid)
        for volume, claim in self._held_volumes.pop(gang_key, ()):
            self.volumes.release(volume, claim)
        self.refresh(now)
        if gang_key in self.queue:
            self.queue.failed(gang_key, now, reason)

    def expire(self, now: float) -> list[str]:
        """Drop reservations whose bind was never observed; their pods are pending again."""
        expired = self.cache.expire(now)
        for uid in expired:
            self._reshow(uid)
        return expired

    def _reshow(self, uid: str) -> None:
        pod = self.cache.pod(uid)
        if pod is not None:
            self._show(pod)


def _waits_on_pods(pod: PodInfo) -> bool:
    """Whether a pod's placement can depend on pods that start running elsewhere."""
    terms = pod.pod_affinity
    return bool(terms is not None and terms.required) or any(c.hard for c in pod.spread)


def _selects(member: PodInfo, other: PodInfo, namespaces: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether `member`'s required affinity or hard spread terms select `other`."""
    terms = member.pod_affinity
    if terms is not None:
        labels = namespaces.get(other.namespace, {})
        for term in terms.required:
            if term.matches(other.namespace, other.labels, labels):
                return True
    return other.namespace == member.namespace and any(
        c.hard and c.selector.matches(other.labels) for c in member.spread
    )


def _reconcile(
    reconciliation: Reconciliation, objs: Iterable[Mapping[str, Any]], now: float
) -> None:
    reconciliation.add(objs, now)
    reconciliation.finish(now)


_VOLUME_APPLY: dict[str, Callable[[VolumeCache, str, Mapping[str, Any]], object]] = {
    "claims": VolumeCache.apply_claim,
    "volumes": VolumeCache.apply_volume,
    "classes": VolumeCache.apply_class,
    "csinodes": VolumeCache.apply_csinode,
}
