"""Which GPU models a pod may run on, read from its nodeSelector and required node
affinity on the product label (NVIDIA GPU feature discovery's `nvidia.com/gpu.product`).

Used where a set of models helps before any filter runs: the planner skips nodes of
other models when collecting candidates, and fragmentation scores tell which workload
shapes could use a node. The filters (GpuType, NodeAffinity) remain the judges.
"""

from __future__ import annotations

from cache.gpu import PRODUCT_LABEL
from cache.pod import PodInfo
from cache.terms import SelectorTerm


def _models_of_terms(terms: tuple[SelectorTerm, ...]) -> frozenset[str] | None:
    """GPU models required node affinity allows; None when some term allows any.

    Terms are ORed, requirements in a term ANDed. Only `In` on the product label narrows
    the set: `NotIn` and `DoesNotExist` cannot be turned into a list of models without
    knowing every model of the cluster, so they are read as "any" (the filters still
    enforce them; fragmentation only estimates which shapes could use a node). A term
    with no requirements matches no node (as in Kubernetes), so it allows nothing.
    """
    allowed: set[str] = set()
    for term in terms:
        if not term:
            continue
        in_term: frozenset[str] | None = None
        for requirement in term:
            if requirement.field or requirement.key != PRODUCT_LABEL:
                continue
            if requirement.operator == "In":
                values = frozenset(requirement.values)
                in_term = values if in_term is None else in_term & values
        if in_term is None:
            return None
        allowed |= in_term
    return frozenset(allowed)


def allowed_models(pod: PodInfo) -> frozenset[str] | None:
    """The GPU models (values of cache.gpu.PRODUCT_LABEL) the pod may run on, from its
    nodeSelector and required node affinity; None when it does not constrain them."""
    allowed: frozenset[str] | None = None
    selected = pod.node_selector.get(PRODUCT_LABEL)
    if selected is not None:
        allowed = frozenset({selected})
    if pod.required_affinity is not None:
        from_affinity = _models_of_terms(pod.required_affinity)
        if from_affinity is not None:
            allowed = from_affinity if allowed is None else allowed & from_affinity
    return allowed
