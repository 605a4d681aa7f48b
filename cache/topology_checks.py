"""Whether a topology requirement's levels agree with each other and with the gang:
the checks every source's reader applies after reading its fields into a
`TopologyRequirement` (cache/topology_requirement.py), so that a contradiction is
refused with the same words whatever stated it.

A level's breadth is knowable only for the well-known keys (a region holds zones, a
zone holds hosts, any level holds hosts); between two keys of a site's own (a rack and
an NVLink clique) nothing is assumed, and the planner then finds out (no domain fits).
"""

from __future__ import annotations

from cache.topology_requirement import TopologyRequirement

HOSTNAME = "kubernetes.io/hostname"
# Well-known levels, broadest first: Kubernetes' own topology labels.
_KNOWN_BREADTH = {
    "topology.kubernetes.io/region": 3,
    "topology.kubernetes.io/zone": 2,
    HOSTNAME: 0,
}


def broader_or_same(a: str, b: str) -> bool | None:
    """Whether level `a` is at least as broad as `b`; None when it cannot be known."""
    if a == b:
        return True
    if b == HOSTNAME:
        return True  # every level holds whole nodes
    if a == HOSTNAME:
        return False
    if a in _KNOWN_BREADTH and b in _KNOWN_BREADTH:
        return _KNOWN_BREADTH[a] >= _KNOWN_BREADTH[b]
    return None


def requirement_problems(requirement: TopologyRequirement, gang_size: int | None) -> list[str]:
    """What contradicts in `requirement`, in words naming the source's fields
    (`requirement.fields`); with `gang_size` (None: not known yet), also a slice larger
    than the gang. An empty list: nothing known contradicts.

    Every source's reader calls this on what it read, and cache/gang_topology.py on
    the gang's requirement merged from its sources (where the gang's size is known and
    two sources' fields meet)."""
    problems: list[str] = []
    names = requirement.fields
    fields = {
        "required": names.required,
        "preferred": names.preferred,
        "slice_size": names.slice_size,
        "slice_key": names.slice_key,
    }
    required, slice_key, slice_size = (
        requirement.required_key,
        requirement.slice_key,
        requirement.slice_size,
    )
    if (slice_key is None) != (slice_size is None):
        given, missing = (
            ("slice_key", "slice_size") if slice_size is None else ("slice_size", "slice_key")
        )
        problems.append(f"{fields[given]} is set without {fields[missing]}; set both or neither")
    if slice_size is not None and gang_size is not None and slice_size > gang_size:
        problems.append(
            f"{fields['slice_size']} {slice_size} is larger than the gang ({gang_size} members)"
        )
    if slice_key is not None and required is not None and broader_or_same(slice_key, required):
        problems.append(
            f"{fields['slice_key']} {slice_key} is not a level narrower than "
            f"{fields['required']} {required}: a slice must sit inside the gang's domain"
        )
    seen: set[str] = set()
    for key in requirement.preferred_keys:
        if key in seen:
            problems.append(f"{fields['preferred']} names {key} twice")
        seen.add(key)
        if required is not None and broader_or_same(key, required):
            problems.append(
                f"{fields['preferred']} names {key}, not narrower than the required "
                f"{fields['required']} {required}: the whole gang is inside one {required} "
                "already"
            )
    return problems
