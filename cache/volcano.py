"""Volcano's PodGroup (scheduling.volcano.sh/v1beta1) read as a gang definition.

A Volcano Job's controller creates one PodGroup per job and gives each pod the
annotation `scheduling.k8s.io/group-name` naming it, and the label (and annotation)
`volcano.sh/task-spec` naming the pod's task (its role). When the job names our
scheduler, the PodGroup's `spec.minMember` is the gang's size and
`spec.minTaskMember` (task name -> least pods) its per-role minimums: without them the
gang would be sized by the pods that happen to exist, and placed partially.

`spec.networkTopology` (the Job's, copied by Volcano's job controller) is read as the
gang's topology requirement, its tiers mapped to node label keys by `VolcanoTiers`
(cache/volcano_tiers.py):
- `mode: hard` (the default) with `highestTierAllowed: N` (or `highestTierName`, a
  tier's name): the whole gang in one domain of tier N's key, preferring the lower
  tiers' keys, narrowest first (Volcano tries the lowest tier that fits first);
- `mode: soft`: every tier's key preferred, narrowest first, none required (Volcano
  turns soft into hard at the top of its tree: a preference, never a wait).
A value that cannot be followed (an unknown mode, a tier no label key is configured
for, hard mode with no tier, both tier fields, `subGroupPolicy[].networkTopology`,
which places subgroups this gang model cannot express) is a refusal: the gang waits
and its pods say why, rather than run with no constraint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cache.jsonobj import MALFORMED, mapping, metadata
from cache.limits import MAX_INT32, shown
from cache.pod import parse_time
from cache.podgroup import PodGroupInfo
from cache.topology_checks import requirement_problems
from cache.topology_requirement import TopologyFields, TopologyRequirement
from cache.volcano_tiers import DEFAULT_VOLCANO_TIERS, VolcanoTiers

VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_VERSION = "v1beta1"
VOLCANO_PLURAL = "podgroups"
# Where Volcano's job controller writes a pod's task name (as label and annotation).
VOLCANO_TASK_KEY = "volcano.sh/task-spec"
NETWORK_TOPOLOGY_MODES = ("hard", "soft")
_NETWORK_TOPOLOGY_FIELDS = frozenset({"mode", "highestTierAllowed", "highestTierName"})
# highestTierName's kubebuilder MaxLength.
MAX_TIER_NAME = 253


def _count(value: object, what: str, problems: list[str]) -> int | None:
    """A non-negative int32 (the Go type of both fields); None and a problem otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT32:
        problems.append(f"{what} must be a non-negative 32-bit integer, got {shown(value)}")
        return None
    return value


def volcano_podgroup_from_api(
    obj: Mapping[str, Any], tiers: VolcanoTiers = DEFAULT_VOLCANO_TIERS
) -> PodGroupInfo:
    """A PodGroupInfo for Volcano's PodGroup; never raises (a value we cannot read
    becomes a problem, and the gang falls back to its other size sources; a topology
    we cannot follow is a refusal: the gang waits)."""
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
        refusals: list[str] = []
        topology = network_topology(
            spec.get("networkTopology"), tiers, f"PodGroup {namespace}/{name}", refusals
        )
        _subgroup_topologies(spec.get("subGroupPolicy"), refusals)
        problems.extend(refusals)
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
            topology=topology,
            refusals=tuple(refusals),
        )
    except MALFORMED as error:
        return PodGroupInfo(
            namespace=namespace,
            name=name,
            problems=(f"the PodGroup object is malformed ({type(error).__name__})",),
            api=VOLCANO_GROUP,
        )


def network_topology(
    value: object, tiers: VolcanoTiers, named: str, refusals: list[str]
) -> TopologyRequirement | None:
    """`spec.networkTopology` as a requirement (see the module doc); None when absent
    or refused (then `refusals` says why)."""
    field = "spec.networkTopology"
    if value is None:
        return None
    if not isinstance(value, Mapping):
        refusals.append(f"{field} must be an object, got {shown(value)}")
        return None
    for other in sorted(str(key) for key in value if key not in _NETWORK_TOPOLOGY_FIELDS):
        refusals.append(f"{field}.{shown(other)} is not supported by this scheduler")
    mode = value.get("mode")
    mode = "hard" if mode is None or mode == "" else mode  # the CRD's default
    if mode not in NETWORK_TOPOLOGY_MODES:
        refusals.append(f"{field}.mode must be hard or soft, got {shown(mode)}")
        return None
    tier = _tier(value, tiers, field, refusals, needed=mode == "hard")
    source = f"{named} ({VOLCANO_GROUP}) {field}"
    if refusals:
        return None
    if mode == "soft":
        # Volcano ignores the tier fields in soft mode (it prefers the lowest tier).
        if not tiers.keys:
            return None
        names = TopologyFields(preferred=f"{field}.mode soft (every tier's label key)")
        requirement = TopologyRequirement(preferred_keys=tiers.keys, source=source, fields=names)
    else:
        assert tier is not None  # _tier refuses hard mode without one
        required = tiers.key_of(tier)
        if required is None:
            refusals.append(
                f"{field} asks for tier {tier}, but no node label key is configured for it "
                f"(the scheduler's topology.volcanoTiers maps {len(tiers.keys)} tier(s))"
            )
            return None
        number = value.get("highestTierAllowed") is not None
        stated = "highestTierAllowed" if number else "highestTierName"
        names = TopologyFields(
            required=f"{field}.{stated} (tier {tier}'s label key)",
            preferred=f"{field}.{stated} (the label keys of the tiers below {tier})",
        )
        requirement = TopologyRequirement(
            required_key=required,
            preferred_keys=tiers.keys[: tier - 1],
            source=source,
            fields=names,
        )
    # Only the operator's tiers could contradict (a tier broader than the one above).
    contradictions = requirement_problems(requirement, None)
    refusals.extend(contradictions)
    return None if contradictions else requirement


def _tier(
    value: Mapping[str, Any], tiers: VolcanoTiers, field: str, refusals: list[str], needed: bool
) -> int | None:
    """The highest tier allowed, from its number or its name."""
    number, name = value.get("highestTierAllowed"), value.get("highestTierName")
    name = None if name == "" else name
    if number is not None and name is not None:
        refusals.append(
            f"{field} sets both highestTierAllowed and highestTierName; Volcano allows one"
        )
        return None
    if number is not None:
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= MAX_INT32:
            refusals.append(
                f"{field}.highestTierAllowed must be a tier number of at least 1 (tier 1 is "
                f"the narrowest HyperNode level), got {shown(number)}"
            )
            return None
        return number
    if name is not None:
        if not isinstance(name, str) or len(name) > MAX_TIER_NAME:
            refusals.append(f"{field}.highestTierName must be a tier name, got {shown(name)}")
            return None
        tier = tiers.tier_named(name)
        if tier is None and needed:
            refusals.append(
                f"{field}.highestTierName {shown(name)} names no tier the scheduler's "
                "topology.volcanoTiers lists"
            )
        return tier
    if needed:
        refusals.append(
            f"{field}.mode hard needs highestTierAllowed or highestTierName (the widest "
            "tier the gang may span)"
        )
    return None


def _subgroup_topologies(policies: object, refusals: list[str]) -> None:
    """`spec.subGroupPolicy[].networkTopology` groups pods by label into subgroups each
    kept in one HyperNode: not expressible as this scheduler's gang requirement, so
    refused by name rather than ignored."""
    if not isinstance(policies, list):
        return
    for i, policy in enumerate(policies):
        if isinstance(policy, Mapping) and policy.get("networkTopology") is not None:
            refusals.append(
                f"spec.subGroupPolicy[{i}].networkTopology (a topology per subgroup) is not "
                "supported by this scheduler"
            )
