"""KAI-Scheduler's PodGroup (scheduling.run.ai/v2alpha2) read as a gang definition, so
that jobs migrating from KAI keep their gangs.

KAI's pod-grouper creates one PodGroup per workload and writes its name on each pod in
the annotation `pod-group-name`; a team may also write both by hand. Once the pods
name this scheduler, the PodGroup's `spec.minMember` is the gang's size. Its
`spec.queue` is shown, not enforced: quotas here are ElasticQuotas per namespace
(docs/migration.md, "KAI-Scheduler"). SubGroups' sizes are not read.

`spec.topologyConstraint` (what KAI's pod-grouper copies from the workload's
`kai.scheduler/topology*` annotations) is the gang's topology requirement. Its levels
are node label keys already (KAI's Topology object, `kai.scheduler/v1alpha1`, lists
them as `spec.levels[].nodeLabel`), so the Topology it names is not needed to read
them and is not watched:
- `requiredTopologyLevel: <key>`: the whole gang in one domain of `<key>`;
- `preferredTopologyLevel: <key>`: the gang would rather sit in one such domain;
- `topology`: the Topology object's name, kept in the requirement's source only. KAI
  skips the constraint when it is empty; here a stated level is followed anyway
  (docs/migration.md says why).
A level that is no label key, a field KAI's type does not have, or a
`spec.subGroups[].topologyConstraint` (subgroups placed apart: not expressible as
this scheduler's gang requirement) is a refusal: the gang waits and its pods say why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cache.jsonobj import MALFORMED, mapping, metadata
from cache.limits import MAX_INT32, shown
from cache.pod import parse_time
from cache.podgroup import PodGroupInfo
from cache.topology_checks import requirement_problems
from cache.topology_requirement import TopologyFields, TopologyRequirement, label_key_problem

KAI_GROUP = "scheduling.run.ai"
KAI_VERSION = "v2alpha2"
KAI_PLURAL = "podgroups"
_CONSTRAINT_FIELDS = frozenset({"topology", "requiredTopologyLevel", "preferredTopologyLevel"})
# An object name (the Topology's): a DNS subdomain, at most 253 characters.
MAX_NAME = 253


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
        refusals: list[str] = []
        topology = topology_constraint(
            spec.get("topologyConstraint"), f"PodGroup {namespace}/{name}", refusals
        )
        _subgroup_constraints(spec.get("subGroups"), refusals)
        problems.extend(refusals)
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
            topology=topology,
            refusals=tuple(refusals),
        )
    except MALFORMED as error:
        return PodGroupInfo(
            namespace=namespace,
            name=name,
            problems=(f"the PodGroup object is malformed ({type(error).__name__})",),
            api=KAI_GROUP,
        )


def topology_constraint(
    value: object, named: str, refusals: list[str]
) -> TopologyRequirement | None:
    """`spec.topologyConstraint` as a requirement (see the module doc); None when it
    states nothing or is refused (then `refusals` says why)."""
    field = "spec.topologyConstraint"
    if value is None:
        return None
    if not isinstance(value, Mapping):
        refusals.append(f"{field} must be an object, got {shown(value)}")
        return None
    for other in sorted(str(key) for key in value if key not in _CONSTRAINT_FIELDS):
        refusals.append(f"{field}.{shown(other)} is not supported by this scheduler")
    topology = value.get("topology")
    if topology is not None and (not isinstance(topology, str) or len(topology) > MAX_NAME):
        refusals.append(f"{field}.topology must be a Topology's name, got {shown(topology)}")
    levels: dict[str, str | None] = {}
    for level in ("requiredTopologyLevel", "preferredTopologyLevel"):
        key = value.get(level)
        levels[level] = None
        if key is None or key == "":
            continue  # the Go type's zero value: not set
        problem = label_key_problem(key, f"{field}.{level}")
        if problem is not None:
            refusals.append(problem)
        else:
            levels[level] = str(key)
    required, preferred = levels["requiredTopologyLevel"], levels["preferredTopologyLevel"]
    if refusals or (required is None and preferred is None):
        return None
    of = f" (Topology {shown(topology)})" if isinstance(topology, str) and topology else ""
    requirement = TopologyRequirement(
        required_key=required,
        preferred_keys=(preferred,) if preferred is not None else (),
        source=f"{named} ({KAI_GROUP}) {field}{of}",
        fields=TopologyFields(
            required=f"{field}.requiredTopologyLevel", preferred=f"{field}.preferredTopologyLevel"
        ),
    )
    contradictions = requirement_problems(requirement, None)
    refusals.extend(contradictions)
    return None if contradictions else requirement


def _subgroup_constraints(subgroups: object, refusals: list[str]) -> None:
    """A subgroup's own topology constraint places part of the gang apart from the
    rest: not expressible as one gang requirement, so refused by name."""
    if not isinstance(subgroups, list):
        return
    for i, subgroup in enumerate(subgroups):
        if isinstance(subgroup, Mapping) and subgroup.get("topologyConstraint"):
            refusals.append(
                f"spec.subGroups[{i}].topologyConstraint (a topology per subgroup) is not "
                "supported by this scheduler"
            )
