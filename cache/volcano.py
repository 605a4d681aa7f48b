"""Volcano's PodGroup (scheduling.volcano.sh/v1beta1) read as a gang definition.

A Volcano Job's controller creates one PodGroup per job and gives each pod the
annotation `scheduling.k8s.io/group-name` naming it, and the label (and annotation)
`volcano.sh/task-spec` naming the pod's task (its role). When the job names our
scheduler, the PodGroup's `spec.minMember` is the gang's size and
`spec.minTaskMember` (task name -> least pods) its per-role minimums: without them the
gang would be sized by the pods that happen to exist, and placed partially.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cache.jsonobj import MALFORMED, mapping, metadata
from cache.limits import MAX_INT32, shown
from cache.pod import parse_time
from cache.podgroup import PodGroupInfo

VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_VERSION = "v1beta1"
VOLCANO_PLURAL = "podgroups"
# Where Volcano's job controller writes a pod's task name (as label and annotation).
VOLCANO_TASK_KEY = "volcano.sh/task-spec"


def _count(value: object, what: str, problems: list[str]) -> int | None:
    """A non-negative int32 (the Go type of both fields); None and a problem otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT32:
        problems.append(f"{what} must be a non-negative 32-bit integer, got {shown(value)}")
        return None
    return value


def volcano_podgroup_from_api(obj: Mapping[str, Any]) -> PodGroupInfo:
    """A PodGroupInfo for Volcano's PodGroup; never raises (a value we cannot read
    becomes a problem, and the gang falls back to its other size sources)."""
    meta = metadata(obj)
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    try:
        spec = mapping(mapping(obj).get("spec"))
        problems: list[str] = []
        min_member = _count(spec.get("minMember"), "spec.minMember", problems)
        roles: dict[str, int] = {}
        tasks = spec.get("minTaskMember")
        if tasks is not None and not isinstance(tasks, Mapping):
            problems.append(f"spec.minTaskMember must be a map, got {shown(tasks)}")
        for task, value in (tasks or {}).items() if isinstance(tasks, Mapping) else ():
            least = _count(value, f"spec.minTaskMember[{shown(task)}]", problems)
            if least:  # 0 asks for nothing
                roles[str(task)] = least
        queue = spec.get("queue")
        return PodGroupInfo(
            namespace=namespace,
            name=name,
            resource_version=str(meta.get("resourceVersion") or ""),
            # Volcano treats minMember 0 (or absent) as no gang requirement; here the
            # gang's other size sources apply instead.
            min_member=min_member or None,
            created=parse_time(meta.get("creationTimestamp")),
            problems=tuple(problems),
            uid=str(meta.get("uid") or ""),
            api=VOLCANO_GROUP,
            role_minimums=tuple(sorted(roles.items())),
            role_key=VOLCANO_TASK_KEY,
            queue=queue if isinstance(queue, str) else "",
        )
    except MALFORMED as error:
        return PodGroupInfo(
            namespace=namespace,
            name=name,
            problems=(f"the PodGroup object is malformed ({type(error).__name__})",),
            api=VOLCANO_GROUP,
        )
