"""The nodes a shape's members are placed among: feasible nodes collected from the
snapshot's free-capacity index, best end first (tight for bin-packing, roomy for
spread), up to the profile's candidate limit, and past it while a constrained shape is
short of topology domains."""

from __future__ import annotations

from cache.gpu import PRODUCT_LABEL
from cache.node import NodeInfo
from cache.resources import CPU
from policies.filters.gpu_fit import gpu_index_request
from policies.gpu_models import allowed_models
from scheduler.planner.node_choice import Shape
from scheduler.planner.search import GangSearch


def collect_candidates(search: GangSearch, shape: Shape) -> None:
    """Fill `shape.candidates` in the walk's order."""
    pod = shape.pod
    profile = search.profile
    limit = profile.candidate_limit
    if search.topology_bound:
        # Topology may refuse nodes: the domains are judged on every feasible node,
        # never on the first few, which may all be in one domain or in none.
        limit = 0
    if limit:
        limit = max(limit, 2 * len(shape.members))
    models = allowed_models(pod)
    snapshot = search.snapshot
    nodes = snapshot.nodes
    memo = search.memo.for_shape(pod.filter_signature(), pod, nodes.keys())
    names = snapshot.candidates(
        *gpu_index_request(pod), pod.requests.get(CPU, 0), profile.prefers_tight
    )
    coverage = _coverage(search, shape) if limit else None
    base = search.constraints.start() if pod.uid in search.constrained else None
    for name in names:
        node = nodes[name]
        if models is not None and node.labels.get(PRODUCT_LABEL) not in models:
            continue
        if memo.first_failure(node) is not None:
            continue
        if base is not None and base.excluded_for_good(pod, node) is not None:
            continue
        shape.candidates.append(name)
        if coverage is not None and coverage.see(node):
            continue  # short of domains: keep collecting past the bound
        if limit and len(shape.candidates) >= limit:
            break


def _coverage(search: GangSearch, shape: Shape) -> DomainCoverage | None:
    """For a constrained shape, what the candidate bound must also cover: with
    required pod affinity every feasible node (the domain the gang must join is
    not known in advance); with anti-affinity or spread, enough distinct domains
    of each topology key for every member of the shape to have its own."""
    pod = shape.pod
    if pod.uid not in search.constrained:
        return None
    terms = pod.pod_affinity
    if terms is not None and terms.required:
        return DomainCoverage((), 0, unbounded=True)
    keys = {c.topology_key for c in pod.spread if c.hard}
    if terms is not None:
        keys |= {t.topology_key for t in terms.required_anti}
    for other in search.members:
        if other.pod_affinity is not None:
            keys |= {t.topology_key for t in other.pod_affinity.required_anti}
    return DomainCoverage(tuple(sorted(keys)), len(shape.members) + 1)


class DomainCoverage:
    """Counts the distinct domains per topology key among collected candidates, to
    say when a constrained shape has enough of them."""

    def __init__(self, keys: tuple[str, ...], wanted: int, unbounded: bool = False) -> None:
        self.keys = keys
        self.wanted = wanted
        self.unbounded = unbounded
        self.seen: dict[str, set[str]] = {key: set() for key in keys}

    def see(self, node: NodeInfo) -> bool:
        """Record a candidate; True while more candidates are still wanted."""
        if self.unbounded:
            return True
        short = False
        for key in self.keys:
            values = self.seen[key]
            value = node.labels.get(key)
            if value is not None:
                values.add(value)
            if len(values) < self.wanted:
                short = True
        return short
