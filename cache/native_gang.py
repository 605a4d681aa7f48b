"""Kubernetes' own gang API (1.36, alpha `scheduling.k8s.io/v1alpha2`, KEP-4671), read as
a gang definition.

A pod names its group in `spec.schedulingGroup.podGroupName`; the `PodGroup` of that
name in the pod's namespace says how its pods are scheduled, exactly one of:
- `spec.schedulingPolicy.gang.minCount` (int32, at least 1): all or nothing, that many
  pods at least: the gang's size here;
- `spec.schedulingPolicy.basic: {}`: standard scheduling, one pod at a time: here a gang
  of size 1, each member placed as soon as it fits.
The API is off unless the GenericWorkload feature gate is on, so its informer is
optional (a 404 means skip). The API server validates both policies; a value broken
anyway (an object from an older alpha) becomes a problem, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cache.jsonobj import MALFORMED, mapping, metadata
from cache.limits import MAX_INT32, shown
from cache.pod import parse_time
from cache.podgroup import PodGroupInfo

NATIVE_GROUP = "scheduling.k8s.io"
NATIVE_VERSION = "v1alpha2"
NATIVE_PLURAL = "podgroups"
# The condition this scheduler sets on the PodGroup's status (types.go's well-known
# PodGroupScheduled type, with reason Scheduled or Unschedulable).
SCHEDULED_CONDITION = "PodGroupScheduled"


def native_podgroup_from_api(obj: Mapping[str, Any]) -> PodGroupInfo:
    meta = metadata(obj)
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    problems: list[str] = []
    min_count: int | None = None
    try:
        policy = mapping(mapping(mapping(obj).get("spec")).get("schedulingPolicy"))
        gang, basic = policy.get("gang"), policy.get("basic")
        if gang is not None and basic is not None:
            problems.append("spec.schedulingPolicy sets both gang and basic; exactly one may be")
        elif gang is not None:
            value = mapping(gang).get("minCount")
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT32:
                problems.append(
                    "spec.schedulingPolicy.gang.minCount must be a positive 32-bit integer, "
                    f"got {shown(value)}"
                )
            else:
                min_count = value
        elif basic is not None:
            min_count = 1  # standard scheduling: no member waits for another
        else:
            problems.append("spec.schedulingPolicy sets neither gang nor basic")
    except MALFORMED as error:
        problems.append(f"the PodGroup object is malformed ({type(error).__name__})")
    return PodGroupInfo(
        namespace=namespace,
        name=name,
        resource_version=str(meta.get("resourceVersion") or ""),
        min_member=min_count,
        created=parse_time(meta.get("creationTimestamp")),
        problems=tuple(problems),
        uid=str(meta.get("uid") or ""),
        api=NATIVE_GROUP,
    )
