"""Preferred node affinity as immutable records.

`preferredDuringSchedulingIgnoredDuringExecution` is a list of (weight, preference)
pairs; a node earns the weights of the preferences it matches (policies/scores/
node_affinity.py). Parsing follows component-helpers' nodeaffinity: a term of weight 0
counts for nothing and is dropped; a preference with no requirements matches no node
and is kept only so that the pod's signature tells it apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A preference is a node selector term: parsed by the same rules as a required one.
from cache.limits import shown
from cache.terms import SelectorTerm, _parse_requirement

_MAX_WEIGHT = 100
# Requirements across all preferred terms. Each is matched against every candidate node
# on every attempt (20,000 cost ~1 s per 1,000 nodes): beyond this the pod is refused
# rather than letting one tenant's pod stall the loop. No real workload comes near it.
MAX_PREFERRED_REQUIREMENTS = 1000


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: SelectorTerm


def parse_preferred_affinity(affinity: Mapping[str, Any] | None) -> tuple[PreferredTerm, ...]:
    """The pod's preferred node affinity terms with a weight above 0. Raises ValueError
    on a weight outside 0-100 (the API server refuses those) or a malformed term."""
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    terms: list[PreferredTerm] = []
    count = 0
    for item in preferred:
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise ValueError(
                f"preferred node affinity weight {shown(weight)} is not a whole number"
            )
        if not 0 <= weight <= _MAX_WEIGHT:
            raise ValueError(f"preferred node affinity weight {shown(weight)} is outside 1-100")
        if weight == 0:
            continue
        preference = item.get("preference") or {}
        requirements = [
            _parse_requirement(r, False) for r in preference.get("matchExpressions") or ()
        ]
        requirements += [_parse_requirement(r, True) for r in preference.get("matchFields") or ()]
        count += len(requirements)
        if count > MAX_PREFERRED_REQUIREMENTS:
            raise ValueError(
                "preferred node affinity has more than "
                f"{MAX_PREFERRED_REQUIREMENTS} requirements; this scheduler refuses it "
                "(each would be matched against every node)"
            )
        terms.append(PreferredTerm(weight, tuple(requirements)))
    return tuple(terms)
