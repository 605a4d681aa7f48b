"""Gang assembly: pods grouped into learning tasks, with their size and what is wrong.

A gang is identified by `PodInfo.gang_key` ("ns/name" from the label
`scheduling.x-k8s.io/pod-group` or Volcano's annotation; "ns/pod:<name>" for a pod in
no gang, which is a gang of one). Its members are:

- `pending`: pods with our schedulerName, no nodeName, not terminal, not being
  deleted, sorted by (created, name). These are what we place.
- `bound`: members on a node, running or about to, whatever their schedulerName: the
  gang's running part. A replacement for one failed worker of a running 4-gang
  therefore needs only 1 placement, not 4. A bound member being deleted does not
  count: when a controller restarts a whole job, the new pods must not be placed one
  by one against the terminating old ones (that would be a partial gang).

Pending pods of other schedulers are not members: we can neither place nor wait for
them.

Size (min_member), first rule that applies:
1. a pod in no gang: 1 (size_source "single");
2. PodGroup "ns/name" with a valid `spec.minMember` ("podgroup");
3. the annotation `gang-scheduler.io/min-member` on the members; when they disagree,
   the largest value, with a ConflictingMinMember problem ("annotation");
4. otherwise the members that exist now, with a GangSizeUnknown problem, so the gang
   is schedulable rather than stuck forever ("default").

A member whose pod has problems (`PodInfo.problems`: a request we refuse) cannot be
placed, so it does not count toward readiness: the gang waits, and says why.

Problems are records for the Kubernetes adapter to publish as Warning events. They are
frozen and compare by value, and their messages hold no counts that change while pods
arrive, so the adapter can publish each distinct problem once. Problems about a whole
gang go on each pending member (where `kubectl describe pod` shows them, and there
may be no PodGroup). Only gangs with a pending member of ours are examined, so several
scheduler instances never report the same object.

`assemble_gangs` rebuilds everything in one pass (20,000 pods in well under 100 ms);
`GangIndex` keeps the grouping across watch events and rebuilds only the gangs an
event touched. Neither raises on any pod or PodGroup content.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Literal

from cache.gang_topology import gang_topology
from cache.group_claims import GroupClaims
from cache.limits import INT32_DIGITS, shown, small_int
from cache.pod import DEFAULT_GANG_KEYS, TERMINAL_PHASES, GangKeys, PodInfo
from cache.podgroup import PODGROUP_GROUP, PodGroupInfo
from cache.topology_requirement import TopologyRequirement
from cache.workload_labels import WORKLOAD_APIS, is_inferred_gang
from scheduler.gangs import roles
from scheduler.gangs.isolation import FATAL, describe

log = logging.getLogger(__name__)

ProblemKind = Literal["Pod", "PodGroup"]
SizeSource = Literal["podgroup", "annotation", "single", "default"]

# PodGroup spec.minMember is an int32; the annotation is held to the same range.
MAX_MIN_MEMBER = 2**31 - 1
# ASCII digits with optional spaces or tabs around them; nothing else (re's \s would
# also admit control characters that int() refuses).
_WHOLE_NUMBER = re.compile(r"[ \t]*([0-9]+)[ \t]*")
_NAMES_SHOWN = 3
# How a problem that keeps the gang waiting ends (PodGroupInfo.refusals, topology).
WAITS_UNTIL_FIXED = "the gang waits until it is fixed"


def gate_message(pod: PodInfo) -> str:
    """What a gated pod's PodScheduled condition says (kube-scheduler's SchedulingGated
    message, with the gates named)."""
    return (
        "Scheduling is blocked due to non-empty scheduling gates: "
        + ", ".join(pod.scheduling_gates[:_NAMES_SHOWN])
        + (
            f" and {len(pod.scheduling_gates) - _NAMES_SHOWN} more"
            if len(pod.scheduling_gates) > _NAMES_SHOWN
            else ""
        )
    )


@dataclass(frozen=True, slots=True)
class Problem:
    """Something a user wrote that we cannot follow, and what we did instead."""

    kind: ProblemKind
    key: str  # "ns/name" of the object the event goes on
    reason: str  # CamelCase event reason
    message: str


@dataclass(slots=True)
class Gang:
    key: str
    namespace: str
    name: str  # the gang's name; the pod's name for a gang of one
    min_member: int
    pending: list[PodInfo] = field(default_factory=list)
    bound: list[PodInfo] = field(default_factory=list)
    priority: int = 0
    created: float = 0.0
    timeout_seconds: int | None = None
    size_source: SizeSource = "default"
    problems: list[Problem] = field(default_factory=list)
    # Why the gang can never be placed as it stands: assembling it raised (crash
    # isolation), or its definition states what cannot be followed (a refused topology
    # value, an unsupported field: PodGroupInfo.refusals; members that disagree on
    # their topology). Such a gang is never ready.
    broken: str | None = None
    # Where its members may run (cache/topology_requirement.py): its PodGroup's and its
    # members' requirement merged (cache/gang_topology.py); None: nothing stated.
    topology: TopologyRequirement | None = None
    # Least members per role, and the pod label naming a member's role (scheduler/gangs/roles.py).
    role_minimums: dict[str, int] = field(default_factory=dict)
    # Claims of the whole gang (a native PodGroup's spec.resourceClaims,
    # cache/group_claims.py): allocated once, reserved for the PodGroup; None: none.
    group_claims: GroupClaims | None = None
    role_label: str = ""

    def roles_missing(self, placed: Iterable[PodInfo]) -> dict[str, tuple[int, int]]:
        """Roles whose minimum the bound members plus `placed` leave unmet."""
        if not self.role_minimums:
            return {}
        return roles.roles_short(self.role_minimums, [*self.bound, *placed], self.role_label)

    def role_of(self, pod: PodInfo) -> str | None:
        return pod.labels.get(self.role_label) if self.role_label else None

    @property
    def role_needed(self) -> dict[str, int]:
        """Per role, pending members that must be placed now (beside the bound ones)."""
        if not self.role_minimums:
            return {}
        bound = roles.role_counts(self.bound, self.role_label)
        needed = {role: least - bound[role] for role, least in self.role_minimums.items()}
        return {role: count for role, count in needed.items() if count > 0}

    @property
    def placeable(self) -> list[PodInfo]:
        """Pending members that could be placed: no problems with their spec and no
        scheduling gate left (the API server refuses to bind a gated pod)."""
        return [pod for pod in self.pending if not pod.problems and not pod.scheduling_gates]

    @property
    def gated(self) -> list[PodInfo]:
        """Pending members that wait for their scheduling gates to be removed."""
        return [pod for pod in self.pending if pod.scheduling_gates and not pod.problems]

    @property
    def existing(self) -> int:
        return len(self.pending) + len(self.bound)

    @property
    def missing(self) -> int:
        """Members still to be created before the gang can be whole."""
        return max(0, self.min_member - self.existing)

    @property
    def needed(self) -> int:
        """Pending members that must be placed now for the gang to reach min_member."""
        return max(0, self.min_member - len(self.bound))

    @property
    def ready(self) -> bool:
        if self.broken is not None:
            return False
        placeable = self.placeable
        return (
            len(placeable) > 0
            and len(placeable) + len(self.bound) >= self.min_member
            and not self.roles_missing(placeable)
        )

    @property
    def waiting_message(self) -> str | None:
        """Why the gang is not ready, in words for its pods' events; None when ready."""
        if self.ready:
            return None
        if self.broken is not None:
            return self.broken
        if self.missing:
            plural = "s" if self.missing != 1 else ""
            return (
                f"waiting for {self.missing} more member{plural}: "
                f"{self.existing}/{self.min_member} exist"
            )
        short = self.roles_missing(self.pending)
        if short:
            return "waiting for members of a role: " + roles.describe_short(
                short, self.role_label, "exist"
            )
        gated = self.gated
        if gated:
            names = sorted({gate for pod in gated for gate in pod.scheduling_gates})
            shown = ", ".join(names[:_NAMES_SHOWN])
            more = f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
            verb = "member waits" if len(gated) == 1 else "members wait"
            return (
                f"{len(gated)} {verb} for scheduling gates to be removed ({shown}{more}): "
                f"{len(self.bound) + len(self.placeable)}/{self.min_member} schedulable"
            )
        short = self.roles_missing(self.placeable)
        if short and len(self.placeable) == len(self.pending):
            return "not every role has enough members: " + roles.describe_short(
                short, self.role_label, "schedulable"
            )
        refused = len(self.pending) - len(self.placeable)
        if refused:
            verb = "member cannot" if refused == 1 else "members cannot"
            schedulable = self.existing - refused
            return (
                f"{refused} {verb} be scheduled as written: "
                f"{schedulable}/{self.min_member} schedulable; {_refusals(self.pending)}"
            )
        return "no member is waiting to be scheduled"


@dataclass(slots=True)
class GangSet:
    # Read-only views (GangIndex hands out views of its own maps, not copies: copying
    # 10,000 one-pod gangs on every cycle was a third of a cycle's cost).
    gangs: Mapping[str, Gang] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    # Gangs of ours with bound members, no pending member and fewer bound than their
    # size (see `build_partial`): not scheduled, but the partial-gang rule must see them.
    partial: Mapping[str, Gang] = field(default_factory=dict)


# When two APIs define a gang of the same name, the first here wins (scheduler-plugins'
# PodGroup before both, as GangIndex.podgroup says).
# Inferred gangs' owners (cache/workloads.py) come last: their names never clash with
# the others' (a ':' in the name).
GROUP_PRECEDENCE = (
    "scheduling.volcano.sh",
    "scheduling.k8s.io",
    "scheduling.run.ai",
    *WORKLOAD_APIS,
)


def resolve_podgroup(
    key: str,
    podgroups: Mapping[str, PodGroupInfo],
    others: Mapping[str, Mapping[str, PodGroupInfo]],
) -> PodGroupInfo | None:
    """The PodGroup that sizes gang `key` (see GROUP_PRECEDENCE)."""
    group = podgroups.get(key)
    if group is not None:
        return group
    for api in GROUP_PRECEDENCE:
        group = others.get(api, {}).get(key)
        if group is not None:
            return group
    return None


def is_pending_member(pod: PodInfo, scheduler_name: str) -> bool:
    """A pod we are to place."""
    return (
        pod.scheduler_name == scheduler_name
        and not pod.node_name
        and not pod.deleting
        and pod.phase not in TERMINAL_PHASES
    )


def is_bound_member(pod: PodInfo) -> bool:
    """A pod that counts as the running part of its gang."""
    return pod.consumes_resources and not pod.deleting


def _is_bound_in_named_gang(pod: PodInfo) -> bool:
    # A bound pod in no gang is a gang of one with nothing to place: not worth keeping.
    return bool(pod.gang_name) and is_bound_member(pod)


def _finished_in_named_gang(pod: PodInfo) -> bool:
    # Kept so that a gang whose members ran to completion is not taken for partial.
    return bool(pod.gang_name) and pod.phase == "Succeeded"


def _is_tracked(pod: PodInfo, scheduler_name: str) -> bool:
    """A pod gang assembly keeps: pending for us, or bound or finished in a named gang."""
    return (
        is_pending_member(pod, scheduler_name)
        or _is_bound_in_named_gang(pod)
        or _finished_in_named_gang(pod)
    )


@lru_cache(maxsize=4096)
def parse_min_member(text: str) -> int | None:
    """The annotation's value as a gang size, or None when it is not a positive whole
    number ("abc", "0", "-1", "2.5", "1e3") or is beyond an int32."""
    match = _WHOLE_NUMBER.fullmatch(text)
    # More digits than an int32 has is beyond it; int() of 4,300+ digits would raise.
    value = small_int(match[1], INT32_DIGITS) if match is not None else None
    if value is None:
        return None
    return value if 1 <= value <= MAX_MIN_MEMBER else None


def assemble_gangs(
    pods: Iterable[PodInfo],
    podgroups: Mapping[str, PodGroupInfo],
    scheduler_name: str,
    keys: GangKeys = DEFAULT_GANG_KEYS,
) -> GangSet:
    """All gangs with at least one pending member of ours, and their problems.

    One pass groups the pods that matter (pending ones of ours, and bound ones that
    belong to a named gang); a pod listed twice (same uid) counts once (the last copy
    wins). Pods are told apart by uid, not name: a pod deleted and recreated under its
    name is another pod.
    """
    groups: dict[str, dict[str, PodInfo]] = {}
    with_pending: set[str] = set()
    for pod in pods:
        pending = is_pending_member(pod, scheduler_name)
        if not pending and not _is_tracked(pod, scheduler_name):
            continue
        key = pod.gang_key
        group = groups.get(key)
        if group is None:
            group = groups[key] = {}
        group[pod.uid] = pod
        if pending:
            with_pending.add(key)
    gangs: dict[str, Gang] = {}
    partials: dict[str, Gang] = {}
    problems: list[Problem] = []
    for key, group in groups.items():
        if key not in with_pending:
            partial = build_partial(key, group.values(), podgroups.get(key), scheduler_name, keys)
            if partial is not None:
                partials[key] = partial
            continue
        gang = build_gang(key, group.values(), podgroups.get(key), scheduler_name, keys)
        if gang is not None:
            gangs[key] = gang
            problems.extend(gang.problems)
    return GangSet(gangs, problems, partials)


def build_gang(
    key: str,
    members: Iterable[PodInfo],
    podgroup: PodGroupInfo | None,
    scheduler_name: str,
    keys: GangKeys = DEFAULT_GANG_KEYS,
) -> Gang | None:
    """The gang `key` from the pods that carry that key; None when none of them is
    pending for us (nothing to schedule). Pods that are neither pending nor bound are
    ignored, so callers may pass a gang's pods unfiltered. Never raises for one gang
    (scheduler/gangs/isolation.py): a gang whose assembly raised is `broken`, never ready,
    and its pending members are told why."""
    members = list(members)
    try:
        return _build_gang(key, members, podgroup, scheduler_name, keys)
    except FATAL:
        raise
    except Exception as error:
        return _broken_gang(key, members, scheduler_name, error)


def _broken_gang(
    key: str, members: list[PodInfo], scheduler_name: str, error: Exception
) -> Gang | None:
    pending = [pod for pod in members if is_pending_member(pod, scheduler_name)]
    if not pending:
        return None
    message = f"internal error while assembling gang {key}: {describe(error)}"
    log.error("%s", message, exc_info=error)
    gang = Gang(key, pending[0].namespace, pending[0].name, 1, pending=pending, broken=message)
    gang.bound = [pod for pod in members if is_bound_member(pod)]
    gang.problems = [Problem("Pod", pod.key, "InternalError", message) for pod in pending]
    return gang


def _build_gang(
    key: str,
    members: Iterable[PodInfo],
    podgroup: PodGroupInfo | None,
    scheduler_name: str,
    keys: GangKeys,
) -> Gang | None:
    pending: list[PodInfo] = []
    bound: list[PodInfo] = []
    for pod in members:
        if is_pending_member(pod, scheduler_name):
            pending.append(pod)
        elif is_bound_member(pod):
            bound.append(pod)
    if not pending:
        return None
    pending.sort(key=_age_order)
    bound.sort(key=_age_order)
    everyone = pending + bound
    named = next((pod for pod in everyone if pod.gang_name), None)
    gang = Gang(
        key=key,
        namespace=everyone[0].namespace,
        name=(named.gang_name or "") if named else pending[0].name,
        min_member=1,
        pending=pending,
        bound=bound,
        priority=max(pod.priority for pod in everyone),
        created=min(pod.created for pod in everyone),
    )
    if named is None:
        _size_single(gang, keys)
    else:
        _size_gang(gang, podgroup, keys)
    _topology(gang, podgroup if named is not None else None, everyone)
    if named is not None and podgroup is not None and podgroup.group_claims:
        gang.group_claims = GroupClaims(
            podgroup.namespace,
            podgroup.name,
            podgroup.uid,
            podgroup.group_claims,
            podgroup.made_claims,
        )
    for pod in pending:
        if pod.problems:
            gang.problems.append(
                Problem(
                    "Pod",
                    pod.key,
                    "InvalidPodSpec",
                    f"pod {pod.key} cannot be scheduled as written: {'; '.join(pod.problems)}",
                )
            )
    if not _group_priority(gang, podgroup if named is not None else None):
        _agree_on_priority(gang)
    return gang


def _group_priority(gang: Gang, podgroup: PodGroupInfo | None) -> bool:
    """The group's own priority (Kubernetes' PodGroup spec.priority) as the gang's, in
    place of its members' pod priorities; False when the group states none."""
    if podgroup is None or podgroup.priority is None:
        return False
    gang.priority = podgroup.priority
    return True


def _same_but_version(old: PodInfo, new: PodInfo) -> bool:
    """True when two records of one pod differ in nothing but resourceVersion. Every
    field of PodInfo is something a placement or gang assembly reads (conditions and
    other status details are not kept), so equality is the test."""
    # Field by field, the cheap and most often changed first (a bind changes the node):
    # dataclasses.replace builds a whole record, on every pod event.
    return all(getattr(old, name) == getattr(new, name) for name in _COMPARED_FIELDS)


# PodInfo's fields but resourceVersion, those a bind or a status write changes first.
_FIRST_COMPARED = ("node_name", "phase", "deleting", "assignment")
_COMPARED_FIELDS = (
    *_FIRST_COMPARED,
    *(
        f.name
        for f in dataclasses.fields(PodInfo)
        if f.name != "resource_version" and f.name not in _FIRST_COMPARED
    ),
)


def build_partial(
    key: str,
    members: Iterable[PodInfo],
    podgroup: PodGroupInfo | None,
    scheduler_name: str,
    keys: GangKeys = DEFAULT_GANG_KEYS,
) -> Gang | None:
    """The gang `key` when it has no pending member of ours but is partial: bound
    members, all bound by us (our schedulerName: another scheduler's gang is not ours
    to judge), none finished, fewer than a size its PodGroup or annotations state. Its
    other members were deleted and not yet recreated, or never created; the
    partial-gang rule (binder.PartialGangs) decides what becomes of it. None otherwise
    (a gang with a pending member is `build_gang`'s)."""
    bound: list[PodInfo] = []
    for pod in members:
        if is_pending_member(pod, scheduler_name) or _finished_in_named_gang(pod):
            return None
        if is_bound_member(pod):
            if pod.scheduler_name != scheduler_name or not pod.gang_name:
                return None
            bound.append(pod)
    if not bound:
        return None
    bound.sort(key=_age_order)
    gang = Gang(
        key=key,
        namespace=bound[0].namespace,
        name=bound[0].gang_name or "",
        min_member=1,
        bound=bound,
        priority=max(pod.priority for pod in bound),
        created=min(pod.created for pod in bound),
    )
    _size_gang(gang, podgroup, keys)
    _group_priority(gang, podgroup)
    if gang.size_source == "default" or len(bound) >= gang.min_member:
        return None
    gang.topology, _ = gang_topology(podgroup, bound, gang.min_member)
    return gang


def _topology(gang: Gang, podgroup: PodGroupInfo | None, members: list[PodInfo]) -> None:
    """The gang's topology requirement; where its sources disagree, or ask what can
    never be met, the gang is broken (it waits) and every pending member is told."""
    gang.topology, problems = gang_topology(podgroup, members, gang.min_member)
    if not problems:
        return
    message = f"gang {gang.key}: {'; '.join(problems)}; {WAITS_UNTIL_FIXED}"
    if gang.broken is None:
        gang.broken = message
    gang.problems.extend(
        Problem("Pod", pod.key, "InvalidTopology", message) for pod in gang.pending
    )


def _age_order(pod: PodInfo) -> tuple[float, str]:
    return (pod.created, pod.name)


def _refusals(pending: Iterable[PodInfo]) -> str:
    """Why members are refused, so that every member's condition names the field or
    value at fault (an unsupported field, a refused GPU shape), the first few members."""
    refused = [pod for pod in pending if pod.problems]
    shown = "; ".join(f"{pod.key}: {', '.join(pod.problems)}" for pod in refused[:_NAMES_SHOWN])
    more = len(refused) - _NAMES_SHOWN
    return shown + (f"; and {more} more" if more > 0 else "")


def _size_single(gang: Gang, keys: GangKeys) -> None:
    """A pod in no gang is scheduled alone; a size annotation on it is a mistake
    worth telling (the pod-group label was probably forgotten)."""
    gang.size_source = "single"
    gang.min_member = 1
    pod = gang.pending[0]
    text = pod.min_member_text
    if text is None or parse_min_member(text) == 1:
        return
    malformed = parse_min_member(text) is None
    gang.problems.append(
        Problem(
            "Pod",
            pod.key,
            "InvalidMinMember" if malformed else "MinMemberWithoutGang",
            f"pod {pod.key} has annotation {pod.min_member_key or keys.min_member_annotation}"
            f"={shown(text)}"
            + (", which is not a positive whole number," if malformed else "")
            + f" but no {keys.label} label, so it belongs to no gang; it is scheduled alone",
        )
    )


def _size_gang(gang: Gang, podgroup: PodGroupInfo | None, keys: GangKeys) -> None:
    """min_member, size_source and the problems found on the way (see module doc)."""
    # value -> pods that carry it, in member order; malformed texts kept aside.
    values: dict[int, list[str]] = {}
    malformed: list[tuple[PodInfo, str]] = []
    for pod in gang.pending + gang.bound:
        text = pod.min_member_text
        if text is None:
            continue
        value = parse_min_member(text)
        if value is None:
            malformed.append((pod, text))
        else:
            values.setdefault(value, []).append(pod.key)

    group_size = podgroup.min_member if podgroup is not None else None
    group_size_valid = (
        isinstance(group_size, int)
        and not isinstance(group_size, bool)
        and 1 <= group_size <= MAX_MIN_MEMBER
    )
    gang_problems: list[tuple[str, str]] = []  # (reason, message) for every pending pod
    if podgroup is not None and group_size_valid and group_size is not None:
        gang.min_member = group_size
        gang.size_source = "podgroup"
    elif values:
        gang.min_member = max(values)
        gang.size_source = "annotation"
        if len(values) > 1:
            conflict = _conflict_message(gang, values, keys)
            gang_problems.append(("ConflictingMinMember", conflict))
    else:
        gang.min_member = max(1, gang.existing)
        gang.size_source = "default"
        gang_problems.append(("GangSizeUnknown", _size_unknown_message(gang, podgroup, keys)))

    instead = _size_explanation(gang, podgroup)
    if podgroup is not None:
        gang.timeout_seconds = podgroup.schedule_timeout_seconds
        gang.created = min(gang.created, podgroup.created)
        texts = list(podgroup.problems)
        if group_size is not None and not group_size_valid and not texts:
            texts.append(f"PodGroup spec.minMember must be a positive integer, got {group_size!r}")
        if podgroup.refusals:
            who = podgroup.described or f"PodGroup {podgroup.key}"
            gang.broken = (
                f"{who} states what this scheduler cannot follow: "
                f"{'; '.join(podgroup.refusals)}; the gang waits until it is fixed"
            )
        for text in texts:
            then = WAITS_UNTIL_FIXED if text in podgroup.refusals else instead
            if podgroup.api == PODGROUP_GROUP:
                gang.problems.append(
                    Problem(
                        "PodGroup",
                        podgroup.key,
                        "InvalidPodGroup",
                        f"PodGroup {podgroup.key}: {text}; {then}",
                    )
                )
            else:
                # Events go on objects of scheduler-plugins' PodGroup kind only (the
                # adapter's references); another API's PodGroup is named on its pods.
                named = podgroup.described or f"PodGroup {podgroup.key} ({podgroup.api})"
                message = f"{named}: {text}; {then}"
                gang.problems.extend(
                    Problem("Pod", pod.key, "InvalidPodGroup", message) for pod in gang.pending
                )
    for pod, text in malformed:
        gang.problems.append(
            Problem(
                "Pod",
                pod.key,
                "InvalidMinMember",
                f"pod {pod.key} has annotation "
                f"{pod.min_member_key or keys.min_member_annotation}={shown(text)}, "
                f"which is not a positive whole number; it is ignored and {instead}",
            )
        )
    for reason, message in gang_problems:
        gang.problems.extend(Problem("Pod", pod.key, reason, message) for pod in gang.pending)
    _size_roles(gang, podgroup, keys)


def _size_roles(gang: Gang, podgroup: PodGroupInfo | None, keys: GangKeys) -> None:
    """Per-role minimums (scheduler/gangs/roles.py), and the problems found reading them."""
    minimums, label, problems = roles.role_minimums_of(podgroup, gang.pending + gang.bound, keys)
    gang.role_minimums, gang.role_label = minimums, label
    for member, reason, message in problems:
        if member is not None:
            gang.problems.append(Problem("Pod", member.key, reason, message))
        else:
            text = f"gang {gang.key}: {message}"
            gang.problems.extend(Problem("Pod", pod.key, reason, text) for pod in gang.pending)


def _size_unknown_message(gang: Gang, podgroup: PodGroupInfo | None, keys: GangKeys) -> str:
    if is_inferred_gang(gang.name):
        owner = podgroup.described if podgroup is not None else "its owner"
        return (
            f"gang {gang.key} is inferred from its pods' controller labels, but "
            f"{owner} gives no valid size (the object is not seen, its API is not served, "
            "or its spec cannot be read), so the members that exist when it is scheduled "
            f"are taken as the whole gang; set {keys.min_member_annotation} on the pod "
            "template or name a PodGroup so that it waits for all its members"
        )
    return (
        f"gang {gang.key} has no size: no PodGroup {gang.key} with a valid "
        f"spec.minMember and no valid {keys.min_member_annotation} annotation on its "
        "pods, so the members that exist when it is scheduled are taken as the "
        "whole gang; create the PodGroup or set the annotation so that it waits "
        "for all its members"
    )


def _size_explanation(gang: Gang, podgroup: PodGroupInfo | None = None) -> str:
    """Where the gang's size came from, as the end of a problem's sentence."""
    if gang.size_source == "podgroup":
        source = podgroup.described if podgroup is not None and podgroup.described else ""
        return f"the gang's size is {gang.min_member}, from {source or f'PodGroup {gang.key}'}"
    if gang.size_source == "annotation":
        return f"the gang's size is {gang.min_member}, from its members' annotations"
    return "the members that exist are taken as the whole gang"


def _conflict_message(gang: Gang, values: Mapping[int, list[str]], keys: GangKeys) -> str:
    parts = []
    for value in sorted(values):
        pods = values[value]
        shown = ", ".join(pods[:_NAMES_SHOWN])
        more = f" and {len(pods) - _NAMES_SHOWN} more" if len(pods) > _NAMES_SHOWN else ""
        parts.append(f"{value} on {shown}{more}")
    return (
        f"members of gang {gang.key} disagree on annotation {keys.min_member_annotation} "
        f"({'; '.join(parts)}); using the largest, {gang.min_member}"
    )


class GangIndex:
    """Gang membership kept across watch events, so a cycle rebuilds only the gangs
    that changed. `assemble()` gives the same gangs as `assemble_gangs` over the same
    pods and PodGroups, plus the keys rebuilt since the last call (for the queue's
    GANG_CHANGED hints)."""

    def __init__(self, scheduler_name: str, keys: GangKeys = DEFAULT_GANG_KEYS) -> None:
        self._scheduler_name = scheduler_name
        self._keys = keys
        # Pods by uid, as the cache keeps them: a member deleted and recreated under its
        # name (StatefulSet, JobSet, a rollback) is two pods, and the late delete of the
        # old one must not remove the new one.
        self._members: dict[str, dict[str, PodInfo]] = {}  # gang key -> pod uid -> pod
        self._gang_of: dict[str, str] = {}  # pod uid -> gang key
        self._podgroups: dict[str, PodGroupInfo] = {}
        # Gang definitions of the other APIs (Volcano's, Kubernetes' own) by API group;
        # scheduler-plugins' PodGroup (`_podgroups`) wins a name they share.
        self._other_groups: dict[str, dict[str, PodGroupInfo]] = {}
        self._gangs: dict[str, Gang] = {}
        self._partial: dict[str, Gang] = {}
        # The problems of the gangs that have some (most have none), by gang key.
        self._problems: dict[str, list[Problem]] = {}
        self._dirty: set[str] = set()
        self._last: GangSet | None = None

    def upsert_pod(self, pod: PodInfo) -> None:
        key = self._gang_of.get(pod.uid)
        if key is not None and pod.gang_key == key:
            old = self._members[key][pod.uid]
            if _same_but_version(old, pod):
                # A write that changed nothing gang assembly or the planner reads (a
                # status condition, often our own PodScheduled=False): the gang is not
                # rebuilt, so it is not requeued either.
                self._members[key][pod.uid] = pod
                return
        self.delete_pod(pod.uid)
        if not _is_tracked(pod, self._scheduler_name):
            return
        key = pod.gang_key
        self._members.setdefault(key, {})[pod.uid] = pod
        self._gang_of[pod.uid] = key
        self._dirty.add(key)

    def delete_pod(self, uid: str) -> None:
        key = self._gang_of.pop(uid, None)
        if key is None:
            return
        group = self._members[key]
        del group[uid]
        if not group:
            del self._members[key]
        self._dirty.add(key)

    def upsert_podgroup(self, podgroup: PodGroupInfo) -> None:
        held = self._held(podgroup.api)
        old = held.get(podgroup.key)
        held[podgroup.key] = podgroup
        if old is not None and (
            dataclasses.replace(old, resource_version=podgroup.resource_version) == podgroup
        ):
            return  # a status write (often ours): nothing gang assembly reads changed
        self._dirty.add(podgroup.key)

    def delete_podgroup(self, key: str, api: str = PODGROUP_GROUP) -> None:
        if self._held(api).pop(key, None) is not None:
            self._dirty.add(key)

    def _held(self, api: str) -> dict[str, PodGroupInfo]:
        if api == PODGROUP_GROUP:
            return self._podgroups
        return self._other_groups.setdefault(api, {})

    def podgroup(self, key: str) -> PodGroupInfo | None:
        """The gang definition of `key`: scheduler-plugins' PodGroup first, then the
        other APIs' in `GROUP_PRECEDENCE` order."""
        return resolve_podgroup(key, self._podgroups, self._other_groups)

    def assemble(self) -> tuple[GangSet, frozenset[str]]:
        """The gangs, and the keys rebuilt since the last call. The GangSet's maps are
        read-only views of the index's own, valid until the next call (a new GangSet
        then; with nothing rebuilt the previous one is handed out again): the loop asks
        on every wake-up, so nothing here is proportional to the number of gangs."""
        if not self._dirty and self._last is not None:
            return self._last, frozenset()
        changed = frozenset(self._dirty)
        for key in self._dirty:
            group = self._members.get(key)
            gang = None
            if group:
                gang = build_gang(
                    key, group.values(), self.podgroup(key), self._scheduler_name, self._keys
                )
            if gang is None:
                self._gangs.pop(key, None)
                self._problems.pop(key, None)
            else:
                self._gangs[key] = gang
                if gang.problems:
                    self._problems[key] = gang.problems
                else:
                    self._problems.pop(key, None)
            partial = None
            if group and gang is None:
                partial = build_partial(
                    key, group.values(), self.podgroup(key), self._scheduler_name, self._keys
                )
            if partial is None:
                self._partial.pop(key, None)
            else:
                self._partial[key] = partial
        self._dirty.clear()
        problems = [problem for found in self._problems.values() for problem in found]
        self._last = GangSet(
            MappingProxyType(self._gangs), problems, MappingProxyType(self._partial)
        )
        return self._last, changed


def _agree_on_priority(gang: Gang) -> None:
    """Members of one gang must agree on priority (their PriorityClass). When they do
    not, the gang is queued at the lowest (one member given a higher class does not lift
    the whole gang) and every pending member is told: a ConflictingPriority problem."""
    by_priority: dict[int, list[str]] = {}
    for pod in gang.pending + gang.bound:
        by_priority.setdefault(pod.priority, []).append(pod.key)
    if len(by_priority) < 2:
        return
    gang.priority = min(by_priority)
    parts = []
    for priority in sorted(by_priority, reverse=True):
        keys = by_priority[priority]
        more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
        parts.append(f"{priority} ({', '.join(keys[:3])}{more})")
    message = (
        f"members of gang {gang.key} disagree on priority: {'; '.join(parts)}; the gang is "
        f"queued at the lowest, {gang.priority}; give every member the same PriorityClass"
    )
    gang.problems.extend(
        Problem("Pod", pod.key, "ConflictingPriority", message) for pod in gang.pending
    )
