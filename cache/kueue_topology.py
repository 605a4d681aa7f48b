"""Kueue's Topology Aware Scheduling annotations, read on a pod as a topology requirement.

Kueue reads these on a PodSet's template (`kueue.x-k8s.io/podset-*`,
apis/kueue/v1beta2/topology_types.go in kubernetes-sigs/kueue), so every pod of the
PodSet carries them. Their values are node label keys, the levels of Kueue's Topology
object, so they map onto `TopologyRequirement` without a lookup:

- `podset-required-topology: <key>`: the whole gang in one domain of `<key>`;
- `podset-preferred-topology: <key>`: the gang would rather sit in one such domain;
- `podset-unconstrained-topology: <bool>`: no requirement (Kueue's TAS only counts);
- `podset-slice-required-topology: <key>` with `podset-slice-size: <n>`: every `n`
  consecutive members in one domain of `<key>`;
- `podset-slice-required-topology-constraints: <JSON list of {topology, size}>`: the
  same in up to three layers (Kueue's TASMultiLayerTopology); one layer is read as a
  slice, more are refused (the model holds one slice level);
- `podset-group-name`: two PodSets placed in one domain together. Accepted and not
  read: a gang's requirement is one for all its members already.

Kueue's webhook refuses contradictions (required with preferred or unconstrained, a
slice level without a size, a size under 1); a pod that reaches this scheduler without
Kueue's webhook gets the same refusals here, each naming its annotation, as problems
on the pod (cache/pod.py). Nothing here raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from cache.limits import MAX_INT32, shown
from cache.topology_checks import requirement_problems
from cache.topology_requirement import TopologyFields, TopologyRequirement, label_key_problem

REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
SLICE_CONSTRAINTS_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
PODSET_GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"
_LEVEL_ANNOTATIONS = (REQUIRED_ANNOTATION, PREFERRED_ANNOTATION, UNCONSTRAINED_ANNOTATION)
TOPOLOGY_ANNOTATIONS = (
    REQUIRED_ANNOTATION,
    PREFERRED_ANNOTATION,
    UNCONSTRAINED_ANNOTATION,
    SLICE_REQUIRED_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
    SLICE_CONSTRAINTS_ANNOTATION,
)
SOURCE = "Kueue annotations (kueue.x-k8s.io/podset-*)"
# Go's strconv.ParseBool, which Kueue reads the unconstrained annotation with.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
# Kueue reads the slice size with strconv.ParseInt(value, 10, 32).
_WHOLE = re.compile(r"\+?[0-9]{1,10}")
# Kueue allows three layers; a longer text than any three layers need is not parsed.
MAX_CONSTRAINTS_TEXT = 4096
MAX_LAYERS = 3


def kueue_topology(
    annotations: Mapping[str, Any],
) -> tuple[TopologyRequirement | None, list[str]]:
    """The requirement the pod's Kueue annotations state (None: none), and a problem
    for each value that cannot be followed (then the requirement is None too)."""
    if not any(key in annotations for key in TOPOLOGY_ANNOTATIONS):
        return None, []
    problems: list[str] = []
    levels = [
        key
        for key in (REQUIRED_ANNOTATION, PREFERRED_ANNOTATION, UNCONSTRAINED_ANNOTATION)
        if key in annotations
    ]
    if len(levels) > 1:
        problems.append(
            f"annotations {' and '.join(levels)} contradict each other: a pod set has at "
            "most one of required, preferred and unconstrained topology"
        )
    required = _level(annotations, REQUIRED_ANNOTATION, problems)
    preferred = _level(annotations, PREFERRED_ANNOTATION, problems)
    if UNCONSTRAINED_ANNOTATION in annotations:
        value = annotations[UNCONSTRAINED_ANNOTATION]
        if not isinstance(value, str) or value not in _TRUE | _FALSE:
            problems.append(
                f"annotation {UNCONSTRAINED_ANNOTATION} must be true or false, got {shown(value)}"
            )
    slice_size, slice_key, slice_names = _slice(annotations, problems)
    if problems:
        return None, problems
    requirement = TopologyRequirement(
        required_key=required,
        preferred_keys=(preferred,) if preferred is not None else (),
        slice_size=slice_size,
        slice_key=slice_key,
        source=SOURCE,
        fields=TopologyFields(
            required=f"annotation {REQUIRED_ANNOTATION}",
            preferred=f"annotation {PREFERRED_ANNOTATION}",
            slice_size=slice_names[0],
            slice_key=slice_names[1],
        ),
    )
    # A slice level without its size (or the other way round), a slice not inside the
    # required level: the checks every source gets. The gang's size is not known on one
    # pod; cache/gang_topology.py checks the slice against it.
    problems = requirement_problems(requirement, None)
    if problems:
        return None, problems
    if required is None and preferred is None and slice_key is None:
        return None, []  # unconstrained: Kueue's TAS only counts the pods
    return requirement, []


def _level(annotations: Mapping[str, Any], key: str, problems: list[str]) -> str | None:
    if key not in annotations:
        return None
    value = annotations[key]
    problem = label_key_problem(value, f"annotation {key}")
    if problem is not None:
        problems.append(problem)
        return None
    return str(value)


_PAIR_NAMES = (f"annotation {SLICE_SIZE_ANNOTATION}", f"annotation {SLICE_REQUIRED_ANNOTATION}")


def _slice(
    annotations: Mapping[str, Any], problems: list[str]
) -> tuple[int | None, str | None, tuple[str, str]]:
    """(slice size, slice level, the names of the two fields they were read from),
    from the two-annotation form or the JSON form; either may be missing (the caller's
    checks refuse one without the other)."""
    if SLICE_CONSTRAINTS_ANNOTATION in annotations:
        for other in (SLICE_REQUIRED_ANNOTATION, SLICE_SIZE_ANNOTATION):
            if other in annotations:
                problems.append(
                    f"annotation {SLICE_CONSTRAINTS_ANNOTATION} may not be set with {other}: Kueue "
                    "reads one form of slices or the other"
                )
        field = f"annotation {SLICE_CONSTRAINTS_ANNOTATION}[0]"
        size, level = _slice_layers(annotations[SLICE_CONSTRAINTS_ANNOTATION], problems)
        return size, level, (f"{field}.size", f"{field}.topology")
    level = _level(annotations, SLICE_REQUIRED_ANNOTATION, problems)
    size = _slice_size(annotations.get(SLICE_SIZE_ANNOTATION), _PAIR_NAMES[0], problems)
    return size, level, _PAIR_NAMES


def _slice_size(value: object, field: str, problems: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        problems.append(f"{field} must be a whole number from 1 to {MAX_INT32}, got {shown(value)}")
        return None
    if not 1 <= number <= MAX_INT32:
        problems.append(f"{field} must be a whole number from 1 to {MAX_INT32}, got {shown(value)}")
        return None
    return number


def _slice_layers(text: object, problems: list[str]) -> tuple[int | None, str | None]:
    field = f"annotation {SLICE_CONSTRAINTS_ANNOTATION}"
    if not isinstance(text, str) or len(text) > MAX_CONSTRAINTS_TEXT:
        problems.append(
            f"{field} must be a JSON list of at most {MAX_LAYERS} {{topology, size}} "
            f"entries, got {shown(text)}"
        )
        return None, None
    try:
        layers = json.loads(text)
    except (ValueError, RecursionError):
        problems.append(f"{field} is not valid JSON: {shown(text)}")
        return None, None
    if not isinstance(layers, list) or not 1 <= len(layers) <= MAX_LAYERS:
        problems.append(
            f"{field} must be a JSON list of 1 to {MAX_LAYERS} {{topology, size}} entries, "
            f"got {shown(layers)}"
        )
        return None, None
    if len(layers) > 1:
        problems.append(
            f"{field} states {len(layers)} slice layers; this scheduler places one slice "
            "level (write one layer, or podset-slice-required-topology and podset-slice-size)"
        )
        return None, None
    layer = layers[0]
    if not isinstance(layer, Mapping):
        problems.append(f"{field}[0] must be an object {{topology, size}}, got {shown(layer)}")
        return None, None
    for other in sorted(str(key) for key in layer if key not in ("topology", "size")):
        problems.append(f"{field}[0].{shown(other)} is not a field Kueue defines")
    level = layer.get("topology")
    problem = label_key_problem(level, f"{field}[0].topology")
    if problem is not None:
        problems.append(problem)
    size = _slice_size(layer.get("size"), f"{field}[0].size", problems)
    return size, None if problem is not None else str(level)
