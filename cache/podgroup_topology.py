"""The topology fields of this project's PodGroup (scheduling.x-k8s.io/v1alpha1,
deploy/crd-podgroup.yaml), read into the gang-level model
(cache/topology_requirement.py):

    spec:
      topology:
        requiredKey: topology.kubernetes.io/rack      # the whole gang in one rack, or wait
        preferredKeys: [nvidia.com/gpu.clique]        # narrowest first: fewest domains
        sliceSize: 4                                   # every 4 consecutive members...
        sliceKey: nvidia.com/gpu.clique                # ...in one clique

Every value is a tenant's: a key no node label could be, a slice of zero or larger
than the gang, levels that contradict (cache/topology_checks.py) each come back as a
refusal naming the field, never as "no constraint".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cache.limits import MAX_INT32, shown
from cache.topology_checks import requirement_problems
from cache.topology_requirement import TopologyFields, TopologyRequirement, label_key_problem

FIELD = "spec.topology"
# More preferred levels than a site has (region, zone, block, rack, clique, host).
MAX_PREFERRED_KEYS = 8
_KNOWN = frozenset({"requiredKey", "preferredKeys", "sliceSize", "sliceKey"})
_NAMES = TopologyFields(
    required=f"{FIELD}.requiredKey",
    preferred=f"{FIELD}.preferredKeys",
    slice_size=f"{FIELD}.sliceSize",
    slice_key=f"{FIELD}.sliceKey",
)


def read_topology(
    spec: Mapping[str, Any], gang_size: int | None, source: str
) -> tuple[TopologyRequirement | None, list[str]]:
    """The requirement `spec.topology` states (None when it states none), and the
    refusals found reading it (with any refusal, no requirement: never half read)."""
    value = spec.get("topology")
    if value is None:
        return None, []
    if not isinstance(value, Mapping):
        return None, [f"{FIELD} must be an object, got {shown(value)}"]
    refusals = [
        f"{FIELD}.{shown(k)} is not a field this scheduler knows" for k in value if k not in _KNOWN
    ]
    required = _key(value.get("requiredKey"), _NAMES.required, refusals)
    slice_key = _key(value.get("sliceKey"), _NAMES.slice_key, refusals)
    preferred = _keys(value.get("preferredKeys"), refusals)
    slice_size = _size(value.get("sliceSize"), refusals)
    if refusals:
        return None, refusals
    requirement = TopologyRequirement(
        required_key=required,
        preferred_keys=preferred,
        slice_size=slice_size,
        slice_key=slice_key,
        source=f"{source} {FIELD}",
        fields=_NAMES,
    )
    refusals = requirement_problems(requirement, gang_size)
    if refusals:
        return None, refusals
    if requirement == TopologyRequirement(source=requirement.source):
        return None, []  # an empty object: no constraint, as written
    return requirement, []


def _key(value: object, field: str, refusals: list[str]) -> str | None:
    if value is None:
        return None
    problem = label_key_problem(value, field)
    if problem is not None:
        refusals.append(problem)
        return None
    assert isinstance(value, str)
    return value


def _keys(value: object, refusals: list[str]) -> tuple[str, ...]:
    field = _NAMES.preferred
    if value is None:
        return ()
    if not isinstance(value, list):
        refusals.append(f"{field} must be a list of node label keys, got {shown(value)}")
        return ()
    if len(value) > MAX_PREFERRED_KEYS:
        refusals.append(f"{field} names {len(value)} levels; at most {MAX_PREFERRED_KEYS}")
        return ()
    keys: list[str] = []
    for i, item in enumerate(value):
        # A null entry is refused like any other non-key, never dropped: the level list
        # is read whole or not at all.
        problem = label_key_problem(item, f"{field}[{i}]")
        if problem is not None:
            refusals.append(problem)
        else:
            keys.append(item)
    return tuple(keys)


def _size(value: object, refusals: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT32:
        refusals.append(
            f"{_NAMES.slice_size} must be a positive 32-bit integer, got {shown(value)}"
        )
        return None
    return value
