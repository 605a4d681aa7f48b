"""Planning a gang whose members mount volume claims or use DRA claims: the claims
resolved against the volumes (docs/kubernetes.md, "Volumes") and the devices
(dra_claims.py) before the planner runs, on the core's planning path and on the
what-if views of the victim search alike (docs/quotas.md, "Priority preemption").
A what-if names the pods it takes away (`gone`): they no longer use their
ReadWriteOncePod claims nor count against their nodes' volume attach limits, and the
DRA claims that the resourceclaim controller will release once they are gone count as
released, their devices free (cache/dra/view.py), as they will be once evicted and the
controller has acted, so the plan made there is the one the core makes then.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from cache.cluster import ClusterCache
from cache.dra.store import DraCache
from cache.dra.view import without_pods
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from cache.volumes import VolumeCache
from policies.filters.node_volume_limits import attached_volumes, pod_csi_volumes
from policies.filters.volume_binding import claim_users, claims_with_single_user, resolve_members
from scheduler.gangs.gang import Gang
from scheduler.planner.dra_claims import resolve_dra
from scheduler.planner.member_choice import MemberChoiceKind
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, Unschedulable


def plan_with_claims(
    planner: Planner,
    gang: Gang,
    snapshot: Snapshot,
    volumes: VolumeCache,
    cache: ClusterCache,
    gone: frozenset[str] = frozenset(),
    dra: DraCache | None = None,
) -> Plan | Unschedulable:
    """Plan the gang on `snapshot` with its members' claims resolved; `gone`: uids of
    pods the snapshot has taken away; `dra`: the devices (None: none known, so a
    member with DRA claims waits for them)."""
    kinds: list[MemberChoiceKind] = []
    if dra is None and any(pod.resource_claims for pod in gang.pending):
        dra = DraCache()
    if dra is not None and (dra.classes or any(pod.resource_claims for pod in gang.pending)):
        # The pods taken away release their claims as the resourceclaim controller
        # would (cache/dra/view.py); the core's DraCache is only read.
        devices = without_pods(dra, gone) if gone else dra
        pending, kind = resolve_dra(
            gang.pending,
            devices,
            snapshot,
            cache.namespace_labels(),
            planner.dra_reach,
            gang.group_claims,
        )
        if any(new is not old for new, old in zip(pending, gang.pending, strict=True)):
            gang = dataclasses.replace(gang, pending=pending)
        if kind is not None:
            kinds.append(kind)
    if not any(pod.claims for pod in gang.pending):
        if not kinds:
            return planner.plan(gang, snapshot)
        return planner.plan(gang, snapshot, choices=kinds)
    keys = claims_with_single_user(gang.pending, volumes)
    users = claim_users(_placed_pods(cache, gone), keys) if keys else {}
    limits = None
    if volumes.csinodes:
        drivers = {d for pod in gang.pending for d in pod_csi_volumes(pod, volumes).values()}
        if drivers:

            def pods_on(node: str) -> Iterable[PodInfo]:
                return (pod for pod in cache.pods_on(node) if pod.uid not in gone)

            limits = attached_volumes(drivers, volumes, pods_on)
    members, chosen = resolve_members(gang.pending, volumes, users, limits)
    view = dataclasses.replace(gang, pending=members)
    return planner.plan(view, snapshot, chosen, choices=kinds)


def _placed_pods(cache: ClusterCache, gone: frozenset[str]) -> Iterable[PodInfo]:
    """Pods on a node or planned onto one, not finished and not taken away: those
    holding a claim."""
    for pod in cache.pods():
        if pod.uid not in gone and (pod.consumes_resources or cache.is_assumed(pod.uid)):
            yield pod
