"""Kubernetes' own gang API (1.36, alpha `scheduling.k8s.io/v1alpha2`, KEP-4671), read as
a gang definition, every field of its spec.

A pod names its group in `spec.schedulingGroup.podGroupName`; the `PodGroup` of that
name in the pod's namespace says how its pods are scheduled:
- `spec.schedulingPolicy`, exactly one of `gang.minCount` (int32, at least 1): all or
  nothing, that many pods at least: the gang's size here; or `basic: {}`: standard
  scheduling, one pod at a time: here a gang of size 1.
- `spec.schedulingConstraints.topology[].key` (TopologyAwareWorkloadScheduling gate):
  a node label key; every member inside one domain of it (the gang's required level,
  cache/topology_requirement.py). 1.36 validates at most one entry (`+k8s:maxItems=1`);
  more (a later release's multi-level constraint) is refused by name, never half read.
- `spec.disruptionMode` (WorkloadAwarePreemption gate): `PodGroup` (the group is
  disrupted whole) or `Pod` (the default: one by one). This scheduler's victims are
  always whole gangs, so `Pod` is served the stricter way (docs/integrations.md).
- `spec.priorityClassName` / `spec.priority` (same gate): the admission plugin resolves
  the class into `priority` (int32, at most 10^9); that value is the gang's priority
  for queueing and preemption, in place of its pods'.
- `spec.podGroupTemplateRef`: where the group came from; read by no one here.
- `spec.resourceClaims` (DRAWorkloadResourceClaims gate, KEP-5729): claims of the whole
  group (cache/group_claims.py), allocated once for the gang and reserved for the
  PodGroup; `status.resourceClaimStatuses` names the claims made from their templates.
  An entry that cannot be read is refused by name.
- any field not listed here: not supported, refused by name: the gang waits rather
  than run without it.

The API is off unless the GenericWorkload feature gate is on, so its informer is
optional (a 404 means skip). The API server validates every field; a value broken
anyway (an object from another release) becomes a problem, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cache.group_claims import read_group_claims, read_made_claims
from cache.jsonobj import MALFORMED, mapping, metadata
from cache.limits import MAX_INT32, MIN_INT32, shown
from cache.pod import parse_time
from cache.pod_claims import PodResourceClaim
from cache.podgroup import PodGroupInfo
from cache.topology_checks import requirement_problems
from cache.topology_requirement import TopologyFields, TopologyRequirement, label_key_problem

NATIVE_GROUP = "scheduling.k8s.io"
NATIVE_VERSION = "v1alpha2"
NATIVE_PLURAL = "podgroups"
# The condition this scheduler sets on the PodGroup's status (types.go's well-known
# PodGroupScheduled type, with reason Scheduled or Unschedulable).
SCHEDULED_CONDITION = "PodGroupScheduled"
# DisruptionMode's values (types.go); the API server defaults an absent one to Pod.
DISRUPTION_MODES = ("Pod", "PodGroup")
# scheduling.HighestUserDefinablePriority: the most a PodGroup's priority may be.
HIGHEST_USER_PRIORITY = 1_000_000_000
# Spec fields read (or deliberately passed over) here; any other is refused by name.
_KNOWN_SPEC_FIELDS = frozenset(
    {
        "podGroupTemplateRef",
        "schedulingPolicy",
        "schedulingConstraints",
        "disruptionMode",
        "priorityClassName",
        "priority",
        "resourceClaims",
    }
)


def native_podgroup_from_api(obj: Mapping[str, Any]) -> PodGroupInfo:
    meta = metadata(obj)
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    reading = _Reading(f"PodGroup {namespace}/{name} ({NATIVE_GROUP})")
    try:
        spec = mapping(mapping(obj).get("spec"))
        reading.policy(mapping(spec.get("schedulingPolicy")))
        reading.constraints(spec.get("schedulingConstraints"))
        reading.disruption(spec.get("disruptionMode"))
        reading.priority(spec.get("priority"))
        reading.claims(spec.get("resourceClaims"), mapping(obj).get("status"))
        reading.unsupported(spec)
    except MALFORMED as error:
        reading.problems.append(f"the PodGroup object is malformed ({type(error).__name__})")
    return PodGroupInfo(
        namespace=namespace,
        name=name,
        resource_version=str(meta.get("resourceVersion") or ""),
        min_member=reading.min_count,
        created=parse_time(meta.get("creationTimestamp")),
        problems=tuple(reading.problems),
        uid=str(meta.get("uid") or ""),
        api=NATIVE_GROUP,
        topology=reading.topology,
        refusals=tuple(reading.refusals),
        priority=reading.group_priority,
        disruption_mode=reading.disruption_mode,
        group_claims=reading.group_claims,
        made_claims=reading.made_claims,
    )


class _Reading:
    """One PodGroup's fields as they are read: problems (told on the pods) and refusals
    (problems that keep the gang waiting)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[str] = []
        self.refusals: list[str] = []
        self.min_count: int | None = None
        self.topology: TopologyRequirement | None = None
        self.group_priority: int | None = None
        self.disruption_mode = "Pod"
        self.group_claims: tuple[PodResourceClaim, ...] = ()
        self.made_claims: tuple[tuple[str, str], ...] = ()

    def refuse(self, text: str) -> None:
        self.problems.append(text)
        self.refusals.append(text)

    def policy(self, policy: Mapping[str, Any]) -> None:
        gang, basic = policy.get("gang"), policy.get("basic")
        if gang is not None and basic is not None:
            self.problems.append(
                "spec.schedulingPolicy sets both gang and basic; exactly one may be"
            )
        elif gang is not None:
            value = mapping(gang).get("minCount")
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT32:
                self.problems.append(
                    "spec.schedulingPolicy.gang.minCount must be a positive 32-bit integer, "
                    f"got {shown(value)}"
                )
            else:
                self.min_count = value
        elif basic is not None:
            self.min_count = 1  # standard scheduling: no member waits for another
        else:
            self.problems.append("spec.schedulingPolicy sets neither gang nor basic")

    def constraints(self, value: object) -> None:
        if value is None:
            return
        field = "spec.schedulingConstraints"
        if not isinstance(value, Mapping):
            self.refuse(f"{field} must be an object, got {shown(value)}")
            return
        for other in sorted(k for k in value if k != "topology"):
            self.refuse(f"{field}.{_named(other)} is not supported by this scheduler")
        topology = value.get("topology")
        if topology is None or topology == []:
            return
        field += ".topology"
        if not isinstance(topology, list):
            self.refuse(f"{field} must be a list, got {shown(topology)}")
            return
        if len(topology) > 1:
            self.refuse(
                f"{field} has {len(topology)} entries; Kubernetes 1.36 allows one level and "
                "this scheduler reads one"
            )
            return
        entry = topology[0]
        if not isinstance(entry, Mapping):
            self.refuse(f"{field}[0] must be an object, got {shown(entry)}")
            return
        others = sorted(k for k in entry if k != "key")
        for other in others:
            self.refuse(f"{field}[0].{_named(other)} is not supported by this scheduler")
        if others:
            return  # never half read
        key = entry.get("key")
        problem = label_key_problem(key, f"{field}[0].key")
        if problem is not None:
            self.refuse(problem)
            return
        assert isinstance(key, str)  # label_key_problem refuses anything else
        requirement = TopologyRequirement(
            required_key=key,
            source=f"{self.source} {field}",
            fields=TopologyFields(required=f"{field}[0].key"),
        )
        # One level contradicts nothing today; 1.37's levels will (cache/topology_checks.py).
        contradictions = requirement_problems(requirement, None)
        for text in contradictions:
            self.refuse(text)
        self.topology = None if contradictions else requirement

    def disruption(self, value: object) -> None:
        if value is None:
            return  # the API server's default
        if value not in DISRUPTION_MODES:
            self.refuse(
                f"spec.disruptionMode must be one of {', '.join(DISRUPTION_MODES)}, "
                f"got {shown(value)}"
            )
            return
        assert isinstance(value, str)
        self.disruption_mode = value

    def priority(self, value: object) -> None:
        if value is None:
            return  # no resolved priority: the members' pod priority stands
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not MIN_INT32 <= value <= HIGHEST_USER_PRIORITY
        ):
            self.refuse(
                f"spec.priority must be a 32-bit integer of at most {HIGHEST_USER_PRIORITY}, "
                f"got {shown(value)}"
            )
            return
        self.group_priority = value

    def claims(self, value: object, status: object) -> None:
        try:
            self.group_claims = read_group_claims(value)
        except ValueError as error:
            self.refuse(f"{error} (claims of the whole group)")
            return
        if self.group_claims and isinstance(status, Mapping):
            self.made_claims = read_made_claims(
                status.get("resourceClaimStatuses"), self.group_claims
            )

    def unsupported(self, spec: Mapping[str, Any]) -> None:
        for other in sorted(k for k in spec if k not in _KNOWN_SPEC_FIELDS):
            self.refuse(f"spec.{_named(other)} is not supported by this scheduler")


def _named(field: object) -> str:
    """A field name a tenant wrote, as a message shows it: plain when it is a short
    printable string, else quoted and shortened."""
    if isinstance(field, str) and field.isprintable() and len(field) <= 63:
        return field
    return shown(field)
