"""Per-role minimums: a gang may need at least N members of each role (parameter
servers and workers, a launcher and its workers), and is placeable only when every
role's minimum is, besides its total size.

A member's role is the value of a pod label: the gang's PodGroup says which for Volcano
(`volcano.sh/task-spec`, its task name); otherwise the configured `gang.roleLabel`
(default `training.kubeflow.org/replica-type`, the Kubeflow training operator's).
The minimums come, first rule that applies, from:
1. the gang's PodGroup (Volcano's `spec.minTaskMember`);
2. the annotation `gang-scheduler.io/min-role-members: "ps=1,worker=4"` on the members
   (when they disagree, each role's largest value, with a problem);
3. nothing: no per-role minimum.
A member without the role label belongs to no role: it counts toward the total only.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

from cache.limits import INT32_DIGITS, shown, small_int
from cache.pod import GangKeys, PodInfo
from cache.podgroup import PodGroupInfo

_ROLE = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_ENTRY = re.compile(rf"[ \t]*({_ROLE})[ \t]*=[ \t]*([0-9]+)[ \t]*")
_SHOWN = 3


def parse_role_minimums(text: str) -> dict[str, int] | None:
    """`role=N` entries separated by commas, as a map; None when malformed (a role that
    is not a label value, a count that is not a whole number within an int32, a role
    named twice). Counts of 0 ask for nothing and are dropped."""
    minimums: dict[str, int] = {}
    if not text.strip():
        return None
    for part in text.split(","):
        match = _ENTRY.fullmatch(part)
        if match is None:
            return None
        role, count = match[1], small_int(match[3], INT32_DIGITS)
        if count is None or count > 2**31 - 1 or role in minimums:
            return None
        minimums[role] = count
    return {role: count for role, count in minimums.items() if count}


def role_counts(pods: Iterable[PodInfo], label: str) -> Counter[str]:
    return Counter(pod.labels[label] for pod in pods if label in pod.labels)


def roles_short(
    minimums: Mapping[str, int], pods: Iterable[PodInfo], label: str
) -> dict[str, tuple[int, int]]:
    """role -> (members counted, minimum) for every role `pods` leave below its minimum."""
    if not minimums:
        return {}
    counts = role_counts(pods, label)
    return {role: (counts[role], least) for role, least in minimums.items() if counts[role] < least}


def describe_short(short: Mapping[str, tuple[int, int]], label: str, what: str) -> str:
    """ "role worker: 1/2 schedulable, role ps: 0/1 schedulable (label ...)"."""
    parts = [f"role {role}: {have}/{least} {what}" for role, (have, least) in sorted(short.items())]
    more = f" and {len(parts) - _SHOWN} more" if len(parts) > _SHOWN else ""
    return ", ".join(parts[:_SHOWN]) + more + f" (role label {label})"


def role_minimums_of(
    podgroup: PodGroupInfo | None, members: Iterable[PodInfo], keys: GangKeys
) -> tuple[dict[str, int], str, list[tuple[PodInfo | None, str, str]]]:
    """The gang's minimums, the label naming roles, and problems found on the way as
    (pod or None for every pending member, reason, message)."""
    if podgroup is not None and podgroup.role_minimums:
        return dict(podgroup.role_minimums), podgroup.role_key or keys.role_label, []
    label = (podgroup.role_key if podgroup is not None else "") or keys.role_label
    annotation = keys.min_role_members_annotation
    problems: list[tuple[PodInfo | None, str, str]] = []
    found: dict[str, dict[str, int]] = {}  # text -> minimums, in member order
    for pod in members:
        text = pod.min_role_members_text
        if text is None or text in found:
            continue
        parsed = parse_role_minimums(text)
        if parsed is None:
            problems.append(
                (
                    pod,
                    "InvalidMinRoleMembers",
                    f"pod {pod.key} has annotation {annotation}={shown(text)}, which is not "
                    "a list of role=count (e.g. ps=1,worker=4); it is ignored",
                )
            )
            continue
        found[text] = parsed
    merged: dict[str, int] = {}
    for minimums in found.values():
        for role, least in minimums.items():
            merged[role] = max(least, merged.get(role, 0))
    if len(found) > 1:
        texts = "; ".join(shown(text) for text in list(found)[:_SHOWN])
        problems.append(
            (
                None,
                "ConflictingMinRoleMembers",
                f"members disagree on annotation {annotation} ({texts}); using each "
                f"role's largest: {','.join(f'{r}={n}' for r, n in sorted(merged.items()))}",
            )
        )
    return merged, label, problems
