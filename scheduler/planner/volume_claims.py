"""Planning a gang whose members mount volume claims: the claims resolved against the
volumes before the planner runs (docs/kubernetes.md, "Volumes"), on the core's
planning path and on the what-if views of the victim search alike (docs/quotas.md,
"Priority preemption").

A what-if names the pods it takes away (`gone`): they no longer use their
ReadWriteOncePod claims nor count against their nodes' volume attach limits, as they
will not once evicted, so the plan made there is the one the core makes once they
are gone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from cache.cluster import ClusterCache
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from cache.volumes import VolumeCache
from policies.filters.node_volume_limits import attached_volumes, pod_csi_volumes
from policies.filters.volume_binding import claim_users, claims_with_single_user, resolve_members
from scheduler.gangs.gang import Gang
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, Unschedulable


def plan_with_claims(
    planner: Planner,
    gang: Gang,
    snapshot: Snapshot,
    volumes: VolumeCache,
    cache: ClusterCache,
    gone: frozenset[str] = frozenset(),
) -> Plan | Unschedulable:
    """Plan the gang on `snapshot` with its members' claims resolved; `gone`: uids of
    pods the snapshot has taken away."""
    if not any(pod.claims for pod in gang.pending):
        return planner.plan(gang, snapshot)
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
    return planner.plan(view, snapshot, chosen)


def _placed_pods(cache: ClusterCache, gone: frozenset[str]) -> Iterable[PodInfo]:
    """Pods on a node or planned onto one, not finished and not taken away: those
    holding a claim."""
    for pod in cache.pods():
        if pod.uid not in gone and (pod.consumes_resources or cache.is_assumed(pod.uid)):
            yield pod
