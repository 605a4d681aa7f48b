"""Why a gang, or a member, does not fit: kube-scheduler's words per member
(`0/12 nodes are available: 8 Insufficient nvidia.com/gpu, ...`) plus the gang count
(`gang ns/train-7: 3/4 members placeable`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

from policies.diagnosis import first_failure, summarize
from scheduler.planner.result import Unschedulable
from scheduler.planner.search import Attempt, GangSearch


def explain(search: GangSearch, uid: str, attempt: Attempt) -> str:
    """Why the member found no node in `attempt`: every node's first refusal, as the
    attempt's view has the nodes its members changed."""
    pod = search.shape_of[uid].pod
    snapshot = search.snapshot
    memo = search.memo.for_shape(pod.filter_signature(), pod, snapshot.nodes.keys())
    view = attempt.view
    filters = search.profile.filters
    reasons: Counter[str] = Counter()
    nodes = 0
    member = search.member_by_uid.get(uid, pod)
    state = attempt.constraints if uid in search.constrained else None
    for name, node in snapshot.nodes.items():
        nodes += 1
        if view.version(name):
            reason = first_failure(filters, pod, view.node(name))
        else:
            reason = memo.first_failure(node)
        if reason is None and state is not None:
            reason = state.filter(member, view.node(name))
        if reason is not None:
            reasons[reason] += 1
    concerning = [kind for kind in search.kinds if kind.concerns(uid)]
    detail = next((d for kind in concerning if (d := kind.detail(uid, reasons))), "")
    suffix = f" {detail[:1].upper()}{detail[1:]}" if detail else ""
    if not reasons:
        for kind in concerning:
            # Every node passes alone, but what the member needs beside its node
            # (PVs, attach limits, devices...) went to other members.
            return kind.unmet(nodes, search.gang.key) + suffix
        # Every node passes the filters: the gang's own members took the room, or
        # the candidate bound left the rest unseen.
        return (
            f"0/{nodes} nodes are available: the room left was taken by other "
            f"members of gang {search.gang.key}"
        )
    return summarize(nodes, reasons) + suffix


def refuse(search: GangSearch, needed: int) -> Unschedulable:
    """Fewer members can be scheduled at all than the gang needs."""
    gang = search.gang
    reasons = dict(search.refused)
    message = (
        f"gang {gang.key}: {len(search.members)} of {needed} needed members can be "
        f"scheduled; the others are refused: " + "; ".join(sorted(set(reasons.values())))
    )
    for pod in search.members:
        reasons[pod.uid] = message
    return Unschedulable(gang.key, needed, len(search.members), message, reasons)


def unschedulable(
    search: GangSearch, needed: int, best: Attempt | None, topology: str | None = None
) -> Unschedulable:
    """The gang waits: per member why, from the attempt that placed the most.
    `topology`: what its required topology level lacks, said first (required_domain.py)."""
    gang = search.gang
    placeable = len(best.placements) if best else 0
    line = _gang_line(search, placeable, needed)
    if topology is not None:
        line = f"gang {gang.key}: {topology}; {line.removeprefix(f'gang {gang.key}: ')}"
    placed = [search.member_by_uid[p.pod_uid] for p in best.placements] if best else []
    short = gang.roles_missing(placed)
    if short:
        line += "; " + ", ".join(
            f"role {role}: {have}/{least} placeable"
            for role, (have, least) in sorted(short.items())
        )
    reasons: dict[str, str] = {}
    first_reason = ""
    if best is not None:
        explained: dict[Hashable, str] = {}
        for uid in best.failed:
            if not search.planner.explain:
                reasons[uid] = line
                continue
            signature = search.shape_of[uid].pod.placement_signature()
            if signature not in explained:
                explained[signature] = explain(search, uid, best)
            reasons[uid] = f"{explained[signature]} ({line})"
            first_reason = first_reason or explained[signature]
        for placement in best.placements:
            reasons[placement.pod_uid] = (
                f"{line}; this member fits but the gang is placed all or nothing"
            )
    for uid, why in search.refused.items():
        reasons[uid] = f"{why} ({line})"
    message = f"{first_reason} ({line})" if first_reason else line
    return Unschedulable(gang.key, needed, placeable, message, reasons)


def _gang_line(search: GangSearch, placeable: int, needed: int) -> str:
    gang = search.gang
    total = len(gang.bound) + placeable
    return (
        f"gang {gang.key}: {total}/{gang.min_member} members placeable"
        if needed
        else f"gang {gang.key}: no room for the extra members"
    )
