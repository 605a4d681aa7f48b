"""GpuType: the pod's constraint on the GPU model label, checked on its own.

A pod targets GPU models through `nvidia.com/gpu.product` (NVIDIA GPU feature discovery)
in its nodeSelector or required node affinity. NodeAffinity checks those too, but its
reason ("didn't match Pod's node affinity/selector") does not tell an operator that the
*GPU model* was the problem. This filter runs first and only looks at requirements on
the product label, so a node with the wrong model is charged here, with the models the
pod accepts in the message ("A100|V100", the way the openb trace writes gpu_spec).

With several ORed affinity terms the model check passes when any term's product
requirements pass (a term that says nothing about the product passes trivially); the
rest of each term is NodeAffinity's business.
"""

from __future__ import annotations

from functools import lru_cache

from cache.gpu import PRODUCT_LABEL
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.terms import Requirement, SelectorTerm
from policies.filters.node_affinity import requirement_matches

REASON_PREFIX = "node(s) didn't match GPU type "


def _affinity_allows(terms: tuple[SelectorTerm, ...], node: NodeInfo) -> bool:
    """Some term's product requirements all hold (a term without any holds trivially)."""
    if not terms:
        return True  # no terms constrain no model (NodeAffinity refuses the pod anyway)
    for term in terms:
        for req in term:
            if req.key == PRODUCT_LABEL and not req.field and not requirement_matches(req, node):
                break
        else:
            return True
    return False


def _describe_requirement(req: Requirement) -> str:
    """A product requirement in the words of the message: the models it accepts."""
    values = "|".join(req.values)
    if req.operator == "In":
        return values
    if req.operator == "NotIn":
        return f"not {values}"
    if req.operator == "Exists":
        return "(any)"
    if req.operator == "DoesNotExist":
        return "(none)"
    if req.operator == "Gt":
        return f">{values}"
    if req.operator == "Lt":
        return f"<{values}"
    return f"{req.operator} {values}"


@lru_cache(maxsize=1024)
def affinity_reason(terms: tuple[SelectorTerm, ...]) -> str:
    """The reason for nodes whose model no affinity term accepts. Models accepted by
    several terms are listed once, in the order the pod names them; product
    requirements ANDed in one term are joined by " and ". Cached: a pod that misses a
    model misses it on many nodes, and the text depends on the pod alone."""
    accepted: list[str] = []
    for term in terms:
        product = [r for r in term if r.key == PRODUCT_LABEL and not r.field]
        if not product:
            continue
        if len(product) == 1 and product[0].operator == "In":
            models: list[str] = list(product[0].values)
        else:
            models = [" and ".join(_describe_requirement(r) for r in product)]
        for model in models:
            if model not in accepted:
                accepted.append(model)
    return REASON_PREFIX + "|".join(accepted)


class GpuType:
    name: str = "gpu-type"

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        wanted = pod.node_selector.get(PRODUCT_LABEL)
        if wanted is not None and node.labels.get(PRODUCT_LABEL) != wanted:
            return REASON_PREFIX + wanted
        terms = pod.required_affinity
        if terms is not None and not _affinity_allows(terms, node):
            return affinity_reason(terms)
        return None
