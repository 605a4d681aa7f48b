"""KAI-Scheduler's PodGroup (scheduling.run.ai/v2alpha2) read as a gang definition, so
that jobs migrating from KAI keep their gangs.

KAI's pod-grouper creates one PodGroup per workload and writes its name on each pod in
the annotation `pod-group-name`; a team may also write both by hand. Once the pods
name this scheduler, the PodGroup's `spec.minMember` is the gang's size. Its
`spec.queue` is shown, not enforced: quotas here are ElasticQuotas per namespace
(docs/migration.md, "KAI-Scheduler"). SubGroups and topology constraints are not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cache.jsonobj import MALFORMED, mapping, metadata
from cache.limits import MAX_INT32, shown
from cache.pod import parse_time
from cache.podgroup import PodGroupInfo

KAI_GROUP = "scheduling.run.ai"
KAI_VERSION = "v2alpha2"
KAI_PLURAL = "podgroups"


def kai_podgroup_from_api(obj: Mapping[str, Any]) -> PodGroupInfo:
    """A PodGroupInfo for KAI's PodGroup; never raises (a value that cannot be read is a
    problem, and the gang falls back to its other size sources)."""
    meta = metadata(obj)
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    try:
        spec = mapping(mapping(obj).get("spec"))
        problems: list[str] = []
        value = spec.get("minMember")
        min_member = None
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT32:
                problems.append(
                    f"spec.minMember must be a non-negative 32-bit integer, got {shown(value)}"
                )
            else:
                min_member = value or None  # KAI reads 0 as 1: the other sources apply
        queue = spec.get("queue")
        return PodGroupInfo(
            namespace=namespace,
            name=name,
            resource_version=str(meta.get("resourceVersion") or ""),
            min_member=min_member,
            created=parse_time(meta.get("creationTimestamp")),
            problems=tuple(problems),
            uid=str(meta.get("uid") or ""),
            api=KAI_GROUP,
            queue=queue[:253] if isinstance(queue, str) else "",
        )
    except MALFORMED as error:
        return PodGroupInfo(
            namespace=namespace,
            name=name,
            problems=(f"the PodGroup object is malformed ({type(error).__name__})",),
            api=KAI_GROUP,
        )
