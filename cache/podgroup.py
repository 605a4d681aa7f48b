"""PodGroup records (scheduling.x-k8s.io/v1alpha1, as kubernetes-sigs/scheduler-plugins)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cache.jsonobj import MALFORMED, mapping, metadata
from cache.limits import MAX_INT32, shown
from cache.pod import parse_time
from cache.pod_claims import PodResourceClaim
from cache.podgroup_topology import read_topology
from cache.topology_requirement import TopologyRequirement

PODGROUP_GROUP = "scheduling.x-k8s.io"
PODGROUP_VERSION = "v1alpha1"
PODGROUP_PLURAL = "podgroups"


@dataclass(frozen=True, slots=True)
class PodGroupInfo:
    namespace: str
    name: str
    resource_version: str = ""
    min_member: int | None = None
    schedule_timeout_seconds: int | None = None
    created: float = 0.0
    problems: tuple[str, ...] = ()
    # Tells a PodGroup from one recreated under its name (status written, events).
    uid: str = ""
    # Which API the gang definition came from (its group): scheduler-plugins' PodGroup,
    # Volcano's (cache/volcano.py) or Kubernetes' own (cache/native_gang.py).
    api: str = PODGROUP_GROUP
    # Least members per role ((role, minimum), sorted), e.g. Volcano's minTaskMember;
    # `role_key` is the pod label naming a member's role ("" = the configured one).
    role_minimums: tuple[tuple[str, int], ...] = ()
    role_key: str = ""
    # Volcano's spec.queue: read and shown, not enforced (docs/integrations.md).
    queue: str = ""
    # What problems call the object where it is no PodGroup ("JobSet ns/train",
    # cache/workloads.py); "" names it as a PodGroup.
    described: str = ""
    # Where the gang's members may run (cache/topology_requirement.py), from whichever
    # of the source's fields states it; None: no topology stated.
    topology: TopologyRequirement | None = None
    # What the gang cannot be placed without (a topology value that cannot be read, a
    # field this scheduler does not support): the gang waits and its pods say why,
    # never placed as if the field were absent. Each is also in `problems`.
    refusals: tuple[str, ...] = ()
    # The group's own priority (Kubernetes' PodGroup spec.priority, resolved from
    # spec.priorityClassName by the API server): for queueing and preemption, in place
    # of the members' pod priorities. None: the members' priority is the gang's.
    priority: int | None = None
    # How the group may be disrupted (Kubernetes' PodGroup spec.disruptionMode:
    # "PodGroup" or "Pod"); "" where the source says nothing. Victims are whole gangs
    # in either mode (docs/integrations.md).
    disruption_mode: str = ""
    # Claims of the whole group (Kubernetes' PodGroup spec.resourceClaims,
    # cache/group_claims.py) and the claims made from their templates
    # (status.resourceClaimStatuses: name -> claim, "" = none needed).
    group_claims: tuple[PodResourceClaim, ...] = ()
    made_claims: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _positive_int(spec: Mapping[str, Any], field: str, problems: list[str]) -> int | None:
    """A positive int32 (the CRD's type for both fields), else None and a problem."""
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT32:
        problems.append(
            f"PodGroup spec.{field} must be a positive 32-bit integer, got {shown(value)}"
        )
        return None
    return value


def podgroup_from_api(obj: Mapping[str, Any]) -> PodGroupInfo:
    """Build a PodGroupInfo; never raises on a malformed value (it becomes a problem,
    and a PodGroup whose structure is broken gives its gang no size)."""
    try:
        return _parse_podgroup(obj)
    except MALFORMED as error:
        meta = metadata(obj)
        return PodGroupInfo(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            problems=(f"the PodGroup object is malformed ({type(error).__name__})",),
        )


def _parse_podgroup(obj: Mapping[str, Any]) -> PodGroupInfo:
    meta = metadata(obj)
    spec = mapping(mapping(obj).get("spec"))
    problems: list[str] = []
    min_member = _positive_int(spec, "minMember", problems)
    timeout = _positive_int(spec, "scheduleTimeoutSeconds", problems)
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    topology, refusals = read_topology(spec, min_member, f"PodGroup {namespace}/{name}")
    problems.extend(refusals)
    return PodGroupInfo(
        namespace=namespace,
        name=name,
        resource_version=str(meta.get("resourceVersion") or ""),
        min_member=min_member,
        schedule_timeout_seconds=timeout,
        created=parse_time(meta.get("creationTimestamp")),
        problems=tuple(problems),
        uid=str(meta.get("uid") or ""),
        topology=topology,
        refusals=tuple(refusals),
    )
