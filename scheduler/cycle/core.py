"""One scheduling cycle, shared by the demo, the simulator and the Kubernetes adapter.

`SchedulingCore` owns the cache, the gang index, the queue and the planner, and is
fed watch events by whichever adapter runs it. `schedule_next(now)` pops the next
ready gang, plans it against an up-to-date snapshot and, when the plan holds, assumes
it in the cache; the adapter then binds (or, in the simulator, confirms) and reports
back. Nothing here does I/O or reads a clock: `now` comes from the caller.

While a gang's binds are in flight its members are shown to gang assembly as bound
to their planned nodes, so the gang is neither re-planned nor seen as partial. A
reservation ends only on the API's word (the pod seen bound or deleted) or a bind that
definitely failed (`bind_failed`); never on a clock (cache/cluster.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from cache.cluster import ClusterCache, EventType, Placement, Reservation
from cache.dra.claims import Claim
from cache.dra.fields import MAX_NAME
from cache.dra.gpu_shares import gpu_demand
from cache.dra.store import DraCache
from cache.gang_groups import GangGroupStore, GroupParser
from cache.jsonobj import mapping, metadata, object_uid
from cache.jsonobj import text_field as read_text
from cache.pod import DEFAULT_SCHEDULER, PodInfo
from cache.pod_copy import copied
from cache.podgroup import PodGroupInfo
from cache.quota import quota_names
from cache.snapshot import Snapshot
from cache.volumes import VolumeCache
from policies.capacity import copies_that_fit
from policies.profile import Profile
from policies.scores.fragmentation import OnlineWorkload
from scheduler.cycle.requeue import has_required_anti_affinity, lifts_a_term_of_any
from scheduler.gangs.gang import Gang, GangIndex, Problem
from scheduler.gangs.isolation import (
    FATAL,
    FailureLog,
    ObjectKind,
    identify,
    is_group_name,
    text_field,
)
from scheduler.gangs.queue import ClusterChange, GangQueue
from scheduler.planner.dra_claims import claim_keys
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, Unschedulable
from scheduler.planner.volume_claims import plan_with_claims
from scheduler.sharing.borrowing import BorrowingWatch
from scheduler.sharing.preemption import Preempter, Preemption
from scheduler.sharing.quotas import (
    BorrowerOrder,
    refuse_before_planning,
    within_quota,
    would_borrow,
)
from scheduler.sharing.starvation import StarvationGuard

DEFAULT_SCHEDULER_NAME = "gang-scheduler"

log = logging.getLogger(__name__)

_Apply = TypeVar("_Apply", bound=Callable[..., None])


def _isolated(kind: ObjectKind) -> Callable[[_Apply], _Apply]:
    """Apply one watch event so that an exception stays with its object
    (scheduler/gangs/isolation.py): the core repairs what the failed apply may have left
    half done, and the object carries the error as a problem."""

    def wrap(method: _Apply) -> _Apply:
        @functools.wraps(method)
        def guarded(
            core: SchedulingCore, event: EventType | str, obj: Mapping[str, Any], now: float
        ) -> None:
            before = core._record_of(kind, obj)
            try:
                method(core, event, obj, now)
            except FATAL:
                raise
            except Exception as error:
                core._apply_failed(kind, event, obj, before, error)
            else:
                if core.failures or core._unreadable:
                    core._recovered(kind, event, obj)

        return guarded  # type: ignore[return-value]

    return wrap


@dataclass(frozen=True)
class Attempt:
    """What one cycle decided for one gang."""

    gang: Gang
    result: Plan | Unschedulable
    # When the gang first became ready and entered the queue (for gang wait time).
    ready_since: float | None = None
    # Which attempt this was for the gang (1 for the first), as logged.
    number: int = 1
    # Victims to evict and nodes to nominate for this gang (scheduler/sharing/preemption.py).
    preemption: Preemption | None = None


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
            try:
                self.listed.add(self.apply(obj, now))
            except FATAL:
                raise
            except Exception:
                # The apply itself is isolated; only the object's key could not be
                # read: it was not stored under any key, so nothing to keep.
                log.exception("a listed object without a readable key: skipped")

    def finish(self, now: float) -> None:
        self.remove_missing(self.listed, now)


# Rebuilt gang keys kept for `waiting_changes` beyond the gangs there are, before the
# core stops keeping them (a caller that never asks).
_REBUILT_KEPT = 4096


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
        # Borrowing gangs ordered by their namespace's dominant share (docs/quotas.md).
        self.borrower_order = BorrowerOrder()
        self.planner = Planner(profile, explain=explain_failures)
        # Gang problems name the keys the cache reads pods with.
        self.index = GangIndex(scheduler_name, self.cache.gang_keys)
        self.snapshot = Snapshot()
        self.gangs: Mapping[str, Gang] = {}
        # Gangs whose PodGroup the adapter is taking off their claims: not planned
        # meanwhile (stale_group_reservations, group_release_ended).
        self._group_releases: set[str] = set()
        # Partial gangs with no pending member (GangSet.partial), for the partial-gang rule.
        self.partial_gangs: Mapping[str, Gang] = {}
        self._waiting_messages: dict[str, tuple[Gang, str | None]] = {}
        # Gang keys rebuilt since `waiting_changes` last answered; None: look at every
        # gang (never asked yet, or more changes than worth keeping).
        self._rebuilt_unseen: set[str] | None = None
        # Gangs with required pod affinity or DoNotSchedule spread, with those members:
        # a pod their terms select that starts running (or is relabelled) may let them
        # fit (kube-scheduler's queueing hints for these plugins do the same).
        self._pod_dependent: dict[str, list[PodInfo]] = {}
        # Gangs with any inter-pod term or spread constraint: a pod leaving anywhere in
        # a topology domain may let them fit, not only on its own node.
        self._pod_constrained: set[str] = set()
        self.problems: list[Problem] = []
        # Claims, PVs, StorageClasses and CSINodes (scheduler/kube/informer.py feeds
        # them; the simulator has none), and the static PVs each planned gang holds.
        self.volumes = VolumeCache()
        self._held_volumes: dict[str, list[tuple[str, str]]] = {}
        # DRA: ResourceSlices, DeviceClasses and ResourceClaims (scheduler/kube feeds
        # them; the simulator has none), the claims each planned gang holds allocated
        # in it, and the gangs whose members use claims (what a DRA change may help).
        self.dra = DraCache(quota_ledger=self.cache.quotas.ledger)
        self._held_claims: dict[str, list[str]] = {}
        self._dra_gangs: set[str] = set()
        # The DRA shared GPUs shown on the cache's nodes (show_shared_gpus) are caught
        # up from the DraCache's per-node changes after this clock, and wholly when its
        # reach epoch moves; nodes added since are shown too.
        self._gpus_clock = 0
        self._gpus_epoch = -1
        self._gpus_nodes_added: set[str] = set()
        # Objects whose last event could not be applied (crash isolation), logged once.
        self.failures = FailureLog()
        # uid -> namespace/name of pods shown to gang assembly only as unreadable (the
        # cache holds no record of them), so a later deletion or relist removes them too.
        self._unreadable: dict[str, str] = {}
        # PodGroups of Volcano and of Kubernetes' own gang API (cache/gang_groups.py).
        self.gang_groups = GangGroupStore()
        # Priority preemption: decisions outstanding and the room held for them.
        self.preempter = Preempter(
            self.cache, profile, scheduler_name, volumes=self.volumes, dra=self.dra
        )
        # The starvation guard: room reserved for a gang that waited too long.
        self.starvation = StarvationGuard(
            self.cache,
            profile,
            scheduler_name,
            self.preempter.decisions,
            volumes=self.volumes,
            dra=self.dra,
        )
        self.starvation.ready_since_of = self.queue.ready_since
        self.preempter.group_priority = self._group_priority
        self.queue.borrows_now = self._borrows_now
        self.borrowing_watch = BorrowingWatch(self.cache.quotas)

    # --- events -----------------------------------------------------------------------
    @_isolated("Node")
    def apply_node(self, event: EventType | str, obj: Mapping[str, Any], now: float) -> None:
        name = str(metadata(obj).get("name") or "")
        known = self.cache.node(name)
        generation = self.cache.generation
        self.cache.apply_node(event, obj)
        if self.dra.slices and self.cache.node(name) is not None:
            self._gpus_nodes_added.add(name)  # its labels may reach other devices too
        if event != EventType.DELETED and self.cache.generation != generation:
            hint = ClusterChange.NODE_UPDATED if known else ClusterChange.NODE_ADDED
            self.queue.cluster_changed(now, hint)

    @_isolated("Pod")
    def apply_pod(self, event: EventType | str, obj: Mapping[str, Any], now: float) -> None:
        uid = object_uid(obj)
        before = self.cache.pod(uid)
        self._pod_applied(uid, before, self.cache.apply_pod(event, obj), now)

    def add_parsed_pod(self, pod: PodInfo, now: float) -> None:
        """`apply_pod(ADDED, obj, now)` for a pod already parsed (`cache.add_parsed_pod`
        says what `pod` must be): the simulator's trace pods. Not isolated as watch
        events are: the record was not read from an API object, so there is nothing
        malformed to keep apart, and an exception here is a bug that must be seen."""
        before = self.cache.pod(pod.uid)
        self._pod_applied(pod.uid, before, self.cache.add_parsed_pod(pod), now)

    def _pod_applied(
        self, uid: str, before: PodInfo | None, pod: PodInfo | None, now: float
    ) -> None:
        """What follows the cache's record of a pod event (`before`: the record before
        it, `pod`: after it, None once deleted): gang assembly, learning, requeueing."""
        held = before is not None and before.consumes_resources
        if pod is None:
            if before is not None:
                self.index.delete_pod(before.uid)
            if isinstance(self.profile.workload, OnlineWorkload):
                self.profile.workload.forget(uid)
        else:
            self._show(pod)
            if (
                isinstance(self.profile.workload, OnlineWorkload)
                and not pod.node_name
                and pod.scheduler_name == self.scheduler_name
            ):
                # Fragmentation scores learn the expected workload from arrivals.
                learnt = self._as_learnt(pod)
                if learnt is not None:
                    self.profile.workload.observe(learnt)
        if held and before is not None and (pod is None or not pod.consumes_resources):
            waiting = self.preempter.waiting_on(before.uid) + self.starvation.waiting_on(before)
            for key in waiting:  # a victim left, or work on a reserved node
                self.queue.cluster_changed(now, ClusterChange.GANG_CHANGED, key)
            self.queue.cluster_changed(
                now, ClusterChange.POD_DELETED, could_help=self._helped_by_leaving(before)
            )
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

    @_isolated("PodGroup")
    def apply_podgroup(self, event: EventType | str, obj: Mapping[str, Any], now: float) -> None:
        group = self.cache.apply_podgroup(event, obj)
        meta = metadata(obj)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        if group is None:
            self.index.delete_podgroup(key)
        else:
            self.index.upsert_podgroup(group)

    def apply_elasticquota(
        self, event: EventType | str, obj: Mapping[str, Any], now: float
    ) -> None:
        """An ElasticQuota event (docs/quotas.md): a changed limit may let a gang fit."""
        self._guarded("ElasticQuota", event, obj, lambda e, o: self._apply_elasticquota(e, o, now))

    def _apply_elasticquota(
        self, event: EventType | str, obj: Mapping[str, Any], now: float
    ) -> None:
        generation = self.cache.quotas.generation
        quota = self.cache.quotas.apply(str(event), obj)
        if quota is not None and quota.problems:
            log.warning("ElasticQuota %s: %s", quota.key, "; ".join(quota.problems))
        if self.cache.quotas.generation != generation:
            self.queue.cluster_changed(now, ClusterChange.QUOTA_CHANGED)

    def relist_elasticquotas(self) -> Reconciliation:
        def apply(obj: Mapping[str, Any], now: float) -> str:
            self.apply_elasticquota(EventType.MODIFIED, obj, now)
            namespace, name = quota_names(obj)
            return f"{namespace}/{name}"

        def remove_missing(listed: set[str], now: float) -> None:
            generation = self.cache.quotas.generation
            for key in [k for k in self.cache.quotas.quotas() if k not in listed]:
                self.cache.quotas.remove(key)
            if self.cache.quotas.generation != generation:
                self.queue.cluster_changed(now, ClusterChange.QUOTA_CHANGED)

        return Reconciliation(apply, remove_missing)

    def apply_gang_group(
        self, parse: GroupParser, event: EventType | str, obj: Mapping[str, Any], now: float
    ) -> None:
        """A PodGroup of another API than scheduler-plugins' (Volcano's, Kubernetes'
        own), read by `parse` (which never raises): cache/gang_groups.py."""

        def apply(event: EventType | str, obj: Mapping[str, Any]) -> None:
            self._apply_gang_group(parse, event, obj)

        self._guarded("GangGroup", event, obj, apply)

    def _apply_gang_group(
        self, parse: GroupParser, event: EventType | str, obj: Mapping[str, Any]
    ) -> None:
        read, held = self.gang_groups.apply(parse, event, obj)
        if held is None:
            self.index.delete_podgroup(read.key, read.api)
        else:
            self.index.upsert_podgroup(held)

    def relist_gang_groups(self, parse: GroupParser, api: str) -> Reconciliation:
        def apply(obj: Mapping[str, Any], now: float) -> str:
            self.apply_gang_group(parse, EventType.MODIFIED, obj, now)
            # The key the record is held under: an inferred gang's owner is held under
            # the gang's name ("ns/job:train"), not the object's (cache/workloads.py).
            return parse(obj).key

        def remove_missing(listed: set[str], now: float) -> None:
            for key in [k for k in self.gang_groups.of(api) if k not in listed]:
                self.gang_groups.remove(api, key)
                self.index.delete_podgroup(key, api)

        return Reconciliation(apply, remove_missing)

    def apply_namespace(self, event: EventType | str, obj: Mapping[str, Any], now: float) -> None:
        """Namespace labels, for pod affinity's namespaceSelector: a change may let a
        gang waiting on such a term fit."""
        self._guarded("Namespace", event, obj, lambda e, o: self._apply_namespace(e, o, now), False)

    def _apply_namespace(self, event: EventType | str, obj: Mapping[str, Any], now: float) -> None:
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
        object_kind, apply_to_store = _VOLUME_APPLY[kind]

        def apply(event: EventType | str, obj: Mapping[str, Any]) -> None:
            generation = self.volumes.generation
            try:
                apply_to_store(self.volumes, str(event), obj)
            finally:
                if self.volumes.generation != generation:
                    self.queue.cluster_changed(now, ClusterChange.VOLUME_CHANGED)

        self._guarded(object_kind, event, obj, apply, kind == "claims")

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

    def apply_dra_object(
        self, kind: str, event: EventType | str, obj: Mapping[str, Any], now: float
    ) -> None:
        """A ResourceSlice, DeviceClass or ResourceClaim event (kind: "resourceslices",
        "deviceclasses", "resourceclaims"). A change may let a gang whose members use
        claims fit; a claim event showing an allocation this scheduler holds confirms it
        (DraCache)."""
        object_kind, apply_to_store, namespaced = _DRA_APPLY[kind]

        def apply(event: EventType | str, obj: Mapping[str, Any]) -> None:
            generation = self.dra.generation
            try:
                apply_to_store(self.dra, str(event), obj)
            finally:
                if self.dra.generation != generation and self._dra_gangs:
                    self.queue.cluster_changed(
                        now, ClusterChange.DEVICE_CHANGED, could_help=self._dra_gangs.__contains__
                    )

        self._guarded(object_kind, event, obj, apply, namespaced)

    def stale_extended_claims(self) -> list[Claim]:
        """Claims created for a pending member's DRA-backed extended resources by an
        earlier attempt (a crash between the create and the Binding, a rollback whose
        delete failed): kube-scheduler deletes such a claim in PostFilter and tries
        again, and so does the adapter with these (the member waits meanwhile). Only
        members of this scheduler's gangs that are neither bound nor being bound."""
        pending = {p.uid for gang in self.gangs.values() for p in gang.pending}
        return [
            claim
            for claim in self.dra.extended_claims()
            if claim.owner_uid in pending
            and not claim.deleting
            and not self.cache.is_assumed(claim.owner_uid)
        ]

    def stale_group_reservations(self) -> list[tuple[Claim, str]]:
        """Claims of a whole gang (its native PodGroup's) still reserved for the
        PodGroup while none of the gang's pods is on a node, assumed or being bound,
        with the PodGroup's uid: kube-scheduler's PostFilter takes the PodGroup off such
        a claim (unreservePodGroupClaims) so that the gang may get devices afresh, and
        so does the adapter with these. A pod still on its node (running, or being
        deleted after a broken gang) keeps the reservation: its devices are in use."""
        found: list[tuple[Claim, str]] = []
        gangs: set[str] = set()
        by_gang = self.cache.pods_by_gang()
        for key, gang in self.gangs.items():
            group = gang.group_claims
            if group is None or not group.uid or gang.bound:
                continue
            pods = by_gang.get(key, {}).values()
            if any(p.node_name or self.cache.is_assumed(p.uid) for p in pods):
                continue
            for ref in group.claims:
                name = ref.claim_name or group.made_for(ref.name)
                claim = self.dra.claims.get(f"{group.namespace}/{name}") if name else None
                if (
                    claim is not None
                    and claim.allocation is not None
                    and not self.dra.is_assumed(claim.key)
                    and any(c.uid == group.uid for c in claim.reserved_for)
                ):
                    found.append((claim, group.uid))
                    gangs.add(key)
        # Not planned until the adapter says the release ended (either way).
        self._group_releases |= gangs
        return found

    def group_release_ended(self, now: float) -> None:
        """The adapter's release of `stale_group_reservations` ended (written, refused or
        failed): the gangs may be planned again, on what the claims' events show."""
        ended, self._group_releases = self._group_releases, set()
        for key in sorted(ended):
            self.queue.cluster_changed(now, ClusterChange.GANG_CHANGED, key)

    def relist_dra_objects(self, kind: str) -> Reconciliation:
        """A fresh list of one DRA kind: afterwards the DraCache is what one built from
        the list would be (holds of claims still listed and unallocated are kept)."""
        namespaced = _DRA_APPLY[kind][2]

        def key_of(obj: Mapping[str, Any]) -> str:
            # Read as the DraCache reads it, so that the key listed is the key stored.
            meta = metadata(obj)
            name = read_text(meta, "name", MAX_NAME)
            return (
                f"{read_text(meta, 'namespace', MAX_NAME, 'default')}/{name}"
                if namespaced
                else name
            )

        def apply(obj: Mapping[str, Any], now: float) -> str:
            self.apply_dra_object(kind, EventType.MODIFIED, obj, now)
            return key_of(obj)

        def remove_missing(listed: set[str], now: float) -> None:
            store: Mapping[str, object] = getattr(self.dra, _DRA_STORES[kind])
            for key in [k for k in store if k not in listed]:
                namespace, _, name = key.rpartition("/")
                named = {"name": name, "namespace": namespace} if namespaced else {"name": name}
                self.apply_dra_object(kind, EventType.DELETED, {"metadata": named}, now)

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
            for uid in [u for u in self._unreadable if u not in listed]:
                self._forget_unreadable(uid)

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

    def _as_learnt(self, pod: PodInfo) -> PodInfo | None:
        """The arriving pod as the learnt workload counts it: a pod whose one claim is a
        GPU demand (cache/dra/gpu_shares.py) as the GPUs it asks, as the planner judges
        it (scheduler/planner/dra_claims.py), not as a CPU-only pod. None while that
        claim is not known yet (made from a template, or not seen): a later event of
        the pod counts it then."""
        if pod.gpu.count or len(pod.resource_claims) != 1:
            return pod
        keys = claim_keys(pod, self.dra)
        if isinstance(keys, str):
            return None
        claim = self.dra.claims.get(keys[0]) if len(keys) == 1 else None
        if claim is None:
            return None if keys else pod
        demand = gpu_demand(claim) if claim.allocation is None else None
        return pod if demand is None else replace(pod, gpu=demand)

    def _helped_by_leaving(self, gone: PodInfo) -> Callable[[str], bool]:
        """Whether the room `gone` freed on its node could help a waiting gang: some
        member of it would now fit there by resources alone (cpu, memory, GPUs and their
        shares). Selectors, taints and topology are not checked, so a gang is never left
        waiting that the room could help; a gang whose members fit nowhere there (3,000
        pods asking for 16 GPUs) is not retried on every deletion. A gang not known
        since the last refresh is retried, and every gang is when the pod held more
        than room on its node. Inter-pod terms reach across a topology domain: a gang
        whose required anti-affinity or hard spread counted the pod, or whom the pod's
        own anti-affinity kept out, is retried too (scheduler/cycle/requeue.py)."""
        if _holds_beyond_its_node(gone):
            return lambda gang_key: True
        node = self.cache.node(gone.node_name)
        symmetric = has_required_anti_affinity(gone)
        namespaces = self.cache.namespace_labels()

        def could_help(gang_key: str) -> bool:
            if node is None:
                return False  # room on a node we do not know places nothing
            gang = self.gangs.get(gang_key)
            if gang is None:
                return True
            if (symmetric or gang_key in self._pod_constrained) and lifts_a_term_of_any(
                gone, gang.placeable, namespaces
            ):
                return True
            signatures = set()
            for pod in gang.placeable:
                signature = pod.placement_signature()
                if signature in signatures:
                    continue
                signatures.add(signature)
                if copies_that_fit(pod, node) > 0:
                    return True
            return False

        return could_help

    def _show(self, pod: PodInfo) -> None:
        """Tell gang assembly about a pod, as bound where the cache assumes it."""
        placement = self.cache.assumed_placement(pod.uid)
        if (
            placement is not None
            and not pod.node_name
            and self.cache.reservation(pod.uid) not in (Reservation.NOMINATED, Reservation.RESERVED)
        ):
            pod = copied(pod)  # dataclasses.replace costs 5x (cache/pod_copy.py)
            pod.node_name, pod.phase = placement.node, "Running"
        self.index.upsert_pod(pod)

    # --- the cycle ----------------------------------------------------------------------
    def refresh(self, now: float) -> None:
        """Bring gangs and the queue up to date with the events applied so far."""
        gang_set, changed = self.index.assemble()
        if self._rebuilt_unseen is not None and changed:
            self._rebuilt_unseen |= changed
            if len(self._rebuilt_unseen) > len(gang_set.gangs) + _REBUILT_KEPT:
                self._rebuilt_unseen = None  # nobody asks (the simulator): stop keeping
        self.gangs = gang_set.gangs
        self.partial_gangs = gang_set.partial
        self.problems = gang_set.problems
        if self.failures:  # a gang that went takes its planning failure with it
            for key in changed - self.gangs.keys():
                self.failures.cleared("Gang", key)
        for key in changed:
            gang = self.gangs.get(key)
            dependent = [p for p in gang.pending if _waits_on_pods(p)] if gang else []
            if dependent:
                self._pod_dependent[key] = dependent
            else:
                self._pod_dependent.pop(key, None)
            if gang is not None and any(p.has_pod_constraints for p in gang.pending):
                self._pod_constrained.add(key)
            else:
                self._pod_constrained.discard(key)
            # Members with claims, or asking for a resource a DeviceClass may stand for
            # (DRA-backed extended resources): device changes may let them fit.
            if gang is not None and any(
                p.resource_claims or p.extended_containers for p in gang.pending
            ):
                self._dra_gangs.add(key)
            else:
                self._dra_gangs.discard(key)
            if gang is None or not gang.ready:
                if self.queue.state(key) != "in_flight":
                    self.queue.remove(key)
                self.borrowing_watch.gone(key, key.partition("/")[0])
                continue
            self.borrowing_watch.queued(key, gang.namespace)
            if key not in self.queue:
                self.queue.add_or_update(key, gang.priority, gang.created, now)
            else:
                self.queue.add_or_update(key, gang.priority, gang.created, now)
                self.queue.cluster_changed(now, ClusterChange.GANG_CHANGED, key)
            self.queue.set_borrowing(
                key, would_borrow(gang, self.cache.quotas, self.dra), gang.namespace
            )
        for key in self.borrowing_watch.to_judge():
            judged = self.gangs.get(key)
            if judged is not None and key in self.queue:
                borrows = would_borrow(judged, self.cache.quotas, self.dra)
                self.queue.set_borrowing(key, borrows, judged.namespace)
        self.borrower_order.update(self.queue, self.cache.quotas)
        self._show_shared_gpus()

    def _show_shared_gpus(self) -> None:
        """Show each node's DRA shared GPUs, as the DraCache has them now, as the
        node's devices in the cluster cache (cache/dra/gpu_shares.py), for the nodes
        whose devices or their use changed since the last call: the packing scores and
        the whole-node reserve then judge DRA shares as device-plugin shares."""
        dra = self.dra
        names: set[str] = self._gpus_nodes_added
        self._gpus_nodes_added = set()
        if dra.reach_epoch != self._gpus_epoch or not dra.reach_trackable():
            if not dra.slices and self._gpus_epoch < 0:
                return  # no DRA device was ever published: nothing to show
            self._gpus_epoch = dra.reach_epoch
            names = {node.name for node in self.cache.nodes()}
        else:
            names.update(dra.nodes_changed_since(self._gpus_clock))
        self._gpus_clock = dra.change_clock
        for name in names:
            node = self.cache.node(name)
            if node is not None:
                gpus = dra.shared_gpus(name, node.labels)
                self.cache.show_shared_gpus(name, gpus.devices, gpus.free)

    def _group_priority(self, key: str) -> int | None:
        """The priority gang `key`'s definition states (a native PodGroup's), if any."""
        group = self.index.podgroup(key)
        return group.priority if group is not None else None

    def _borrows_now(self, key: str) -> bool:
        gang = self.gangs.get(key)
        return gang is not None and would_borrow(gang, self.cache.quotas, self.dra)

    def waiting(self) -> list[tuple[Gang, str]]:
        """Gangs that are not ready, with the message their pods should carry. Asked
        every cycle: a gang's message is computed once per Gang object (the index
        rebuilds only the gangs that changed)."""
        known = self._waiting_messages
        messages: dict[str, tuple[Gang, str | None]] = {}
        waiting: list[tuple[Gang, str]] = []
        for key, gang in self.gangs.items():
            entry = known.get(key)
            if entry is None or entry[0] is not gang:
                entry = (gang, gang.waiting_message)
            messages[key] = entry
            if entry[1] is not None:
                waiting.append((gang, entry[1]))
        self._waiting_messages = messages
        return waiting

    def waiting_changes(self) -> tuple[list[tuple[Gang, str]], list[str]] | None:
        """`waiting` for the gangs rebuilt since the last call only (a gang not rebuilt
        is the same Gang object, so it waits with the same message): those that wait,
        with their message, and the keys of those that no longer wait or are gone.
        None when every gang must be looked at (the first call, or too many changes
        since): then ask `waiting`. A stream of one-pod gangs changes a few gangs per
        cycle; the loop asks every cycle."""
        keys = self._rebuilt_unseen
        self._rebuilt_unseen = set()
        if keys is None:
            return None
        waiting: list[tuple[Gang, str]] = []
        done: list[str] = []
        for key in sorted(keys):
            gang = self.gangs.get(key)
            message = gang.waiting_message if gang is not None else None
            if gang is None or message is None:
                done.append(key)
            else:
                waiting.append((gang, message))
        return waiting, done

    def schedule_next(self, now: float) -> Attempt | None:
        """Plan the next ready gang; None when no gang is due (see queue.next_wakeup)."""
        self.refresh(now)
        self.starvation.tick(now, self.gangs, self.snapshot)
        key = self.queue.pop(now)
        if key is None:
            return None
        gang = self.gangs.get(key)
        if gang is None or not gang.ready:
            self.queue.remove(key)
            return self.schedule_next(now)
        if self._binds_in_flight(gang):
            # Never plan a gang while a bind of one of its members is in flight (a pod
            # recreated meanwhile made it ready): its outcome decides what is left to
            # place. The members' bound events, or the failure report, requeue it.
            self.queue.failed(key, now, "binds of its members are still in flight")
            return self.schedule_next(now)
        if key in self._group_releases:
            # Nor while its PodGroup is being taken off its claims: a plan reusing the
            # allocation could bind members onto devices the release then frees.
            # `group_release_ended` requeues it.
            self.queue.failed(key, now, "its PodGroup's claims are being released")
            return self.schedule_next(now)
        self.preempter.release(key)  # the room held for it is its own to plan on
        self.starvation.before_planning(gang)
        self.cache.update_snapshot(self.snapshot)
        ready_since = self.queue.ready_since(key)
        number = self.queue.attempts(key) + 1
        held = {pod.uid for pod in gang.pending if self.cache.is_assumed(pod.uid)}
        result: Plan | Unschedulable
        try:
            result = refuse_before_planning(gang, self.cache.quotas, self.dra) or self._plan(gang)
            if isinstance(result, Plan):
                result = within_quota(gang, result, self.cache.quotas, self.cache.pod, self.dra)
            if isinstance(result, Plan):
                self._assume(result, now)
        except FATAL:
            raise
        except Exception as error:
            result = self._planning_failed(gang, held, error)
        else:
            if self.failures:
                self.failures.cleared("Gang", key)
        if isinstance(result, Plan):
            for placement in result.placements:
                self._reshow(placement.pod_uid)
            self.queue.done(key)
            self.preempter.planned(key)
            self.starvation.after_attempt(gang, result, None, ready_since, self.snapshot, now)
            return Attempt(gang, result, ready_since, number)
        self.queue.failed(key, now, result.message)
        try:
            preemption = self.preempter.consider(gang, result, self.snapshot, now)
        except FATAL:
            raise
        except Exception as error:  # one gang's victim search never stops the loop
            self.failures.failed("Gang", key, "considering preemption", error)
            preemption = None
        if preemption is None:
            result = _noted(result, self.preempter.waiting_note(key))
        self.starvation.after_attempt(gang, result, preemption, ready_since, self.snapshot, now)
        return Attempt(gang, result, ready_since, number, preemption)

    def starvation_reservations(self) -> Mapping[str, frozenset[str]]:
        """Gang key -> the nodes reserved for it by the starvation guard (for
        /debug/queues)."""
        return self.starvation.reservations()

    def _plan(self, gang: Gang) -> Plan | Unschedulable:
        """Plan the gang with its members' claims resolved against the volumes and the
        devices."""
        return plan_with_claims(
            self.planner, gang, self.snapshot, self.volumes, self.cache, dra=self.dra
        )

    def _assume(self, plan: Plan, now: float) -> None:
        """Hold what the plan chose: its static PVs, the claims it allocates and its
        members' room, all or nothing (AssumeError, or any error, leaves none held)."""
        allocations = [(c.key, c.allocation) for c in plan.claims if c.allocation is not None]
        self.dra.assume(allocations)  # AssumeError: nothing held
        try:
            self.cache.assume(plan.placements, now)
        except BaseException:
            for key, _ in allocations:
                self.dra.forget(key)
            raise
        self._hold_volumes(plan)
        for uid, gpu in plan.claim_gpus:
            self.cache.note_claim_gpu(uid, gpu)
        held = [k for k in self._held_claims.pop(plan.gang_key, ()) if self.dra.is_assumed(k)]
        held += [key for key, _ in allocations]
        if held:
            self._held_claims[plan.gang_key] = held

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
        self,
        gang_key: str,
        placements: Sequence[Placement],
        now: float,
        reason: str,
        *,
        transient: bool = False,
    ) -> None:
        """Some bind of the gang failed: release the reservations of `placements` (the
        members known unbound) and retry the gang later: when the cluster changes in a
        way that could help or, for a `transient` failure (the API's, not the plan's: a
        5xx, throttling, no answer, a lost volume write), once its backoff ends, since
        no change in the cluster will say so (as kube-scheduler retries binding errors)."""
        for placement in placements:
            self.cache.forget(placement.pod_uid)
            self._reshow(placement.pod_uid)
        for volume, claim in self._held_volumes.pop(gang_key, ()):
            self.volumes.release(volume, claim)
        self._forget_claims(gang_key, now)
        self.refresh(now)
        if gang_key in self.queue:
            self.queue.failed(gang_key, now, reason)
            if transient:
                self.queue.cluster_changed(now, ClusterChange.GANG_CHANGED, gang_key)

    # --- outcomes of the claim status writes (DRA), which precede every bind -----------
    def claims_written(self, plan: Plan, keys: Iterable[str] | None = None) -> None:
        """The API accepted the status writes of the plan's claims (`keys`: only
        these): their allocations stay held until the claims' events show them,
        however late, and are never forgotten."""
        for key in self._allocated_keys(plan, keys):
            self.dra.mark_written(key)

    def claims_unknown(self, plan: Plan, keys: Iterable[str] | None = None) -> None:
        """These status writes ended without a known outcome: held until the claims'
        events (or a relist) settle them."""
        for key in self._allocated_keys(plan, keys):
            self.dra.mark_unknown(key)

    def claims_failed(
        self, plan: Plan, keys: Iterable[str] | None = None, now: float = 0.0
    ) -> None:
        """These status writes definitely failed (or were rolled back before the API
        accepted them): their devices are free again, except for writes the API
        accepted (never forgotten; their events release them). The gang itself is
        released by `bind_failed`."""
        forgotten = False
        for key in self._allocated_keys(plan, keys):
            if self.dra.is_assumed(key):
                self.dra.forget(key)
                forgotten = forgotten or not self.dra.is_assumed(key)
        if forgotten and self._dra_gangs:
            self.queue.cluster_changed(
                now, ClusterChange.DEVICE_CHANGED, could_help=self._dra_gangs.__contains__
            )

    def claims_taken_back(self, plan: Plan, keys: Iterable[str], now: float = 0.0) -> None:
        """A rollback removed these allocations this scheduler had written (its gang
        broke): their holds end whatever their state, and gangs waiting for a device
        hear of it (the claim's event may come late, or show nothing new)."""
        released = False
        for key in self._allocated_keys(plan, keys):
            if self.dra.is_assumed(key):
                self.dra.taken_back(key)
                released = True
        if released and self._dra_gangs:
            self.queue.cluster_changed(
                now, ClusterChange.DEVICE_CHANGED, could_help=self._dra_gangs.__contains__
            )

    @staticmethod
    def _allocated_keys(plan: Plan, keys: Iterable[str] | None) -> list[str]:
        wanted = None if keys is None else set(keys)
        return [
            c.key
            for c in plan.claims
            if c.allocation is not None and (wanted is None or c.key in wanted)
        ]

    def _forget_claims(self, gang_key: str, now: float) -> None:
        """The gang broke: release the claims its plan allocated whose writes the API
        did not accept."""
        forgotten = False
        for key in self._held_claims.pop(gang_key, ()):
            if self.dra.is_assumed(key):
                self.dra.forget(key)
                forgotten = forgotten or not self.dra.is_assumed(key)
        if forgotten and self._dra_gangs:
            self.queue.cluster_changed(
                now, ClusterChange.DEVICE_CHANGED, could_help=self._dra_gangs.__contains__
            )

    def bind_accepted(self, placements: Iterable[Placement]) -> None:
        """The API accepted these binds (adapter with a watch): their room stays charged
        until the watch or a relist shows them bound, however late that is."""
        for placement in placements:
            self.cache.mark_bound(placement.pod_uid)

    def bind_unknown(self, placements: Iterable[Placement]) -> None:
        """These binds ended without a known outcome: reserved until the pod is seen
        bound or deleted, or a re-read settles it (`bind_resolved`)."""
        for placement in placements:
            self.cache.mark_unknown(placement.pod_uid)

    def bind_resolved(self, placement: Placement, landed: bool, now: float) -> bool:
        """A re-read of a pod whose bind had no known outcome: on its planned node
        (`landed`), or definitely not bound by it (released; its gang may retry).
        False, and nothing done, when the reservation is no longer unknown (the watch
        settled it while the read was under way)."""
        if self.cache.reservation(placement.pod_uid) != Reservation.UNKNOWN:
            return False
        if landed:
            self.cache.mark_bound(placement.pod_uid)
            return True
        self.cache.forget(placement.pod_uid)
        self._reshow(placement.pod_uid)
        self.queue.cluster_changed(now, ClusterChange.POD_DELETED)
        return True

    def _binds_in_flight(self, gang: Gang) -> bool:
        return any(self.cache.reservation(p.uid) == Reservation.BINDING for p in gang.bound)

    def _reshow(self, uid: str) -> None:
        pod = self.cache.pod(uid)
        if pod is not None:
            self._show(pod)

    # --- crash isolation (scheduler/gangs/isolation.py) -------------------------------------------
    def _guarded(
        self,
        kind: ObjectKind,
        event: EventType | str,
        obj: Mapping[str, Any],
        apply: Callable[[EventType | str, Mapping[str, Any]], None],
        namespaced: bool = True,
    ) -> None:
        """Apply an event of a kind with no repair of its own (every watched kind but
        pods, nodes and PodGroups) so that an exception stays with its object: logged
        once, recorded as the object's problem, and the object forgotten (its deletion
        applied, by name) until an event of it applies cleanly. A forgotten object is
        one the scheduler does not know, which is how it treats any object that is
        missing: a claim, PV or StorageClass its pods need makes them wait, a gang's
        PodGroup unknown leaves the gang unsized, a namespace has no labels, a quota
        governs nothing."""
        try:
            apply(event, obj)
        except FATAL:
            raise
        except Exception as error:
            key = identify(obj, namespaced).key
            self.failures.failed(kind, key, f"reading the {kind}", error)
            try:
                apply(EventType.DELETED, _named_only(obj))
            except FATAL:
                raise
            except Exception:
                log.exception("%s %s: forgetting it after a failed event failed too", kind, key)
        else:
            if self.failures:
                self.failures.cleared(kind, identify(obj, namespaced).key)

    def _record_of(self, kind: ObjectKind, obj: Mapping[str, Any]) -> object:
        """The cache's record of the object an event is about, before the event."""
        try:
            if kind == "Pod":
                return self.cache.pod(object_uid(obj))
            if kind == "Node":
                return self.cache.node(str(metadata(obj).get("name") or ""))
            return self.cache.podgroups().get(identify(obj).key)
        except Exception:  # an identity that cannot be read: there is no record
            return None

    def _apply_failed(
        self,
        kind: ObjectKind,
        event: EventType | str,
        obj: Mapping[str, Any],
        before: object,
        error: Exception,
    ) -> None:
        """An event could not be applied: log it once, leave the cache consistent and
        give the object the error as a problem. Repairs that fail in turn are logged
        (a broken cache is still better than a stopped scheduler)."""
        identity = identify(obj, namespaced=kind != "Node")
        message = self.failures.failed(kind, identity.key, f"reading the {kind.lower()}", error)
        try:
            if kind == "Pod":
                self._quarantine_pod(event, obj, before, message)
            elif kind == "Node":
                self._quarantine_node(event, obj)
            else:
                self._quarantine_podgroup(event, obj, message)
        except FATAL:
            raise
        except Exception:
            log.exception(
                "%s %s: repairing the cache after a failed event failed", kind, identity.key
            )

    def _quarantine_pod(
        self, event: EventType | str, obj: Mapping[str, Any], before: object, message: str
    ) -> None:
        """A pod event that failed. The cache keeps the pod's previous record when the
        apply failed before changing anything (parsing comes first: a bound pod's charge
        is then still the best one known) and drops the pod's state altogether when it
        got further (no half-applied charge stays). Gang assembly sees the pod with the
        error as its problem, so it is not planned on stale data and is told why."""
        identity = identify(obj)
        try:
            uid = object_uid(obj)
        except Exception:
            uid = identity.uid
        old = before if isinstance(before, PodInfo) else None
        if old is not None:
            self.index.delete_pod(old.uid)
        self.index.delete_pod(uid)
        if event == EventType.DELETED or self.cache.pod(uid) is not before:
            self.cache.drop_pod(uid)
        self._unreadable.pop(uid, None)
        if event == EventType.DELETED:
            self.failures.cleared("Pod", identity.key)
            if isinstance(self.profile.workload, OnlineWorkload):
                self.profile.workload.forget(uid)
            return
        shown = unreadable_pod(obj, uid, message, self.cache.gang_keys.label)
        self.index.upsert_pod(shown)
        if self.cache.pod(uid) is None:
            self._unreadable[uid] = shown.key

    def _recovered(self, kind: ObjectKind, event: EventType | str, obj: Mapping[str, Any]) -> None:
        """An object whose earlier event failed applied cleanly: its failure is over
        (and a pod shown only as unreadable goes when it is deleted)."""
        self.failures.cleared(kind, identify(obj, kind != "Node").key)
        if kind != "Pod":
            return
        if event == EventType.DELETED:
            self._forget_unreadable(object_uid(obj))
        else:  # read at last: the index holds its real record under the same key
            self._unreadable.pop(object_uid(obj), None)

    def _forget_unreadable(self, uid: str) -> None:
        key = self._unreadable.pop(uid, None)
        if key is not None:
            self.index.delete_pod(uid)
            self.failures.cleared("Pod", key)

    def _quarantine_node(self, event: EventType | str, obj: Mapping[str, Any]) -> None:
        """A node event that failed: the node offers nothing until an update of it
        applies (placing on a node whose last update is unknown could ignore a new
        taint or cordon); its pods stay charged to it. A deletion removes it."""
        name = metadata(obj).get("name")
        if not isinstance(name, str) or not name:
            return
        gone = {"metadata": {"name": name}}
        if event != EventType.DELETED:
            version = metadata(obj).get("resourceVersion")
            offline = {
                "metadata": {
                    "name": name,
                    "resourceVersion": version if isinstance(version, str) else "",
                },
                "spec": {"unschedulable": True},
            }
            try:
                self.cache.apply_node(EventType.MODIFIED, offline)
                return
            except FATAL:
                raise
            except Exception:
                log.exception("node %s: cannot mark it unschedulable; removing it", name)
        self.cache.apply_node(EventType.DELETED, gone)

    def _quarantine_podgroup(
        self, event: EventType | str, obj: Mapping[str, Any], message: str
    ) -> None:
        """A PodGroup event that failed: its gang falls back to the other size sources
        and its members are told (InvalidPodGroup) while the PodGroup cannot be read.
        The cache stores a PodGroup in one step after reading it, so it holds nothing
        half-applied; a deletion is still applied to the index."""
        identity = identify(obj)
        self.index.delete_podgroup(identity.key)
        if event != EventType.DELETED:
            self.index.upsert_podgroup(
                PodGroupInfo(identity.namespace, identity.name, problems=(message,))
            )

    def _planning_failed(self, gang: Gang, held: set[str], error: Exception) -> Unschedulable:
        """Planning (or reserving) one gang raised: release any reservation it made and
        fail that gang alone; the queue retries it with backoff."""
        reason = self.failures.failed("Gang", gang.key, "planning", error)
        for pod in gang.pending:
            if pod.uid not in held:
                self.cache.forget(pod.uid)
        for volume, claim in self._held_volumes.pop(gang.key, ()):
            self.volumes.release(volume, claim)
        for key in self._held_claims.pop(gang.key, ()):
            self.dra.forget(key)
        return Unschedulable(
            gang.key,
            needed=gang.needed,
            placeable=0,
            message=f"gang {gang.key}: {reason}",
            reasons={pod.uid: reason for pod in gang.pending},
        )


def unreadable_pod(obj: Mapping[str, Any], uid: str, message: str, gang_label: str) -> PodInfo:
    """A pod record made only of fields read without trusting the object, carrying
    `message` as its problem: gang assembly shows it (and its gang waits) but never
    plans it."""
    identity = identify(obj)
    gang = mapping(metadata(obj).get("labels")).get(gang_label)
    return PodInfo(
        uid=uid,
        namespace=identity.namespace,
        name=identity.name,
        scheduler_name=text_field(obj, "spec", "schedulerName") or DEFAULT_SCHEDULER,
        node_name=text_field(obj, "spec", "nodeName"),
        phase=text_field(obj, "status", "phase") or "Pending",
        deleting=bool(metadata(obj).get("deletionTimestamp")),
        gang_name=gang if is_group_name(gang) else None,
        problems=(message,),
    )


def _noted(result: Unschedulable, note: str) -> Unschedulable:
    """The result with `note` (what the gang waits for) after its message and each
    pod's."""
    if not note:
        return result
    reasons = {uid: f"{reason}; {note}" for uid, reason in result.reasons.items()}
    return replace(result, message=f"{result.message}; {note}", reasons=reasons)


def _holds_beyond_its_node(pod: PodInfo) -> bool:
    """Whether a pod holds something pods on other nodes may wait for: volume claims
    (a ReadWriteOncePod claim serves one pod in the whole cluster)."""
    return bool(pod.claims)


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


def _named_only(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object reduced to what names it (a deletion of it): its name and namespace
    as written, so that the store finds it under the key it was kept by."""
    meta = metadata(obj)
    return {"metadata": {key: meta[key] for key in ("name", "namespace") if key in meta}}


_VOLUME_APPLY: dict[
    str, tuple[ObjectKind, Callable[[VolumeCache, str, Mapping[str, Any]], object]]
] = {
    "claims": ("PersistentVolumeClaim", VolumeCache.apply_claim),
    "volumes": ("PersistentVolume", VolumeCache.apply_volume),
    "classes": ("StorageClass", VolumeCache.apply_class),
    "csinodes": ("CSINode", VolumeCache.apply_csinode),
}


_DRA_APPLY: dict[
    str, tuple[ObjectKind, Callable[[DraCache, str, Mapping[str, Any]], object], bool]
] = {
    "resourceslices": ("ResourceSlice", DraCache.apply_slice, False),
    "deviceclasses": ("DeviceClass", DraCache.apply_class, False),
    "resourceclaims": ("ResourceClaim", DraCache.apply_claim, True),
}
# Each kind's store in DraCache, keyed as the relist keys it.
_DRA_STORES = {"resourceslices": "slices", "deviceclasses": "classes", "resourceclaims": "claims"}
