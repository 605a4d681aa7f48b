"""A gang's one topology requirement, from its PodGroup and its members' annotations.

A gang's requirement may be stated by its PodGroup (Kubernetes' own, this project's,
Volcano's, KAI's: `PodGroupInfo.topology`) and by its pods (Kueue's annotations on
the pod template: `PodInfo.topology`). `gang_topology` merges them, field by field:
a field stated by one source only is taken from it; a field stated by two sources
that disagree is a problem naming both, and so are members that disagree with each
other. A problem means the gang has no requirement it could follow: the caller keeps
it waiting and tells its pods (scheduler/gangs/gang.py), never places it as if
nothing were stated.

Members that state nothing follow the members that do: the requirement is the
gang's, for every member (a launcher pod without Kueue's annotations sits in the
workers' rack). A slice larger than the gang is refused: no slice could ever be
whole. The merged requirement gets the checks every source's gets
(cache/topology_checks.py), with the gang's size, and each field named by the source
that stated it: two sources may each be sound and contradict together (a PodGroup
requiring one host, its members' slices of a zone).
"""

from __future__ import annotations

from collections.abc import Iterable

from cache.pod import PodInfo
from cache.podgroup import PodGroupInfo
from cache.topology_checks import requirement_problems
from cache.topology_requirement import TopologyFields, TopologyRequirement

# How many disagreeing members a message names.
_NAMES_SHOWN = 3


def describe(requirement: TopologyRequirement) -> str:
    """The requirement in words, without its source."""
    parts = []
    if requirement.required_key is not None:
        parts.append(f"one {requirement.required_key} required")
    if requirement.preferred_keys:
        parts.append(f"one {' or '.join(requirement.preferred_keys)} preferred")
    if requirement.slice_key is not None:
        parts.append(f"slices of {requirement.slice_size} in one {requirement.slice_key}")
    return ", ".join(parts) or "no constraint"


def gang_topology(
    podgroup: PodGroupInfo | None, pods: Iterable[PodInfo], gang_size: int | None = None
) -> tuple[TopologyRequirement | None, list[str]]:
    """The gang's requirement (None: nothing stated), or None and the problems that
    keep it from having one. `pods` are its members in member order; `gang_size` its
    size (a slice must not exceed it)."""
    stated: dict[TopologyRequirement, list[str]] = {}
    for pod in pods:
        if pod.topology is not None:
            stated.setdefault(pod.topology, []).append(pod.key)
    if len(stated) > 1:
        shown = "; ".join(
            f"pod {keys[0]} states {describe(requirement)} ({requirement.source})"
            for requirement, keys in list(stated.items())[:_NAMES_SHOWN]
        )
        return None, [f"its members state different topologies: {shown}"]
    from_pods = next(iter(stated), None)
    from_group = podgroup.topology if podgroup is not None else None
    if from_group is None or from_pods is None:
        merged = from_group or from_pods
        problems: list[str] = []
    else:
        merged, problems = _merge(from_group, from_pods)
    if merged is not None and not problems:
        problems = requirement_problems(merged, gang_size)
    return (None, problems) if problems else (merged, [])


def _merge(
    group: TopologyRequirement, pods: TopologyRequirement
) -> tuple[TopologyRequirement | None, list[str]]:
    """Field by field: what one states, or what both state alike; a problem where they
    differ."""
    problems: list[str] = []

    def pick(what: str, ours: object, theirs: object) -> None:
        if ours and theirs and ours != theirs:
            problems.append(
                f"{group.source} and its members' {pods.source} disagree on {what}: "
                f"{describe(group)} against {describe(pods)}"
            )

    pick("the required level", group.required_key, pods.required_key)
    pick("the preferred levels", group.preferred_keys, pods.preferred_keys)
    pick("the slices", _slice(group), _slice(pods))
    if problems:
        return None, problems
    if pods == group or not (set(_stated(pods)) - set(_stated(group))):
        return group, []
    # Each field, and its name for refusals, from the source that states it.
    required = group if group.required_key else pods
    preferred = group if group.preferred_keys else pods
    sliced = group if _slice(group) else pods
    return (
        TopologyRequirement(
            required_key=required.required_key,
            preferred_keys=preferred.preferred_keys,
            slice_size=sliced.slice_size,
            slice_key=sliced.slice_key,
            source=f"{group.source} and its members' {pods.source}",
            fields=TopologyFields(
                required=required.fields.required,
                preferred=preferred.fields.preferred,
                slice_size=sliced.fields.slice_size,
                slice_key=sliced.fields.slice_key,
            ),
        ),
        [],
    )


def _slice(requirement: TopologyRequirement) -> tuple[int, str] | None:
    if requirement.slice_key is None or requirement.slice_size is None:
        return None
    return (requirement.slice_size, requirement.slice_key)


def _stated(requirement: TopologyRequirement) -> tuple[str, ...]:
    """The fields a requirement states, by name."""
    fields = (
        ("required", requirement.required_key),
        ("preferred", requirement.preferred_keys),
        ("slice", _slice(requirement)),
    )
    return tuple(name for name, value in fields if value)
