"""PodTopologySpread scoring (ScheduleAnyway constraints), with kube-scheduler's
semantics.

Counts per domain are the matching pods (pod's namespace, not terminating) on nodes
that carry every soft constraint's key and pass the constraint's inclusion policies.
For the nodes compared, a node lacking a key is ignored (scores 0); the others get

    raw = sum over constraints of count(node's domain) x log(domains + 2) + (maxSkew - 1)

rounded, where `domains` is the number of distinct values among the nodes compared
(for kubernetes.io/hostname: the number of nodes compared, and the count is the
node's own). Normalized: 100 x (max + min - raw) / max (integer division), 100 for
all when max is 0: the emptier the domain, the better. The gang's members placed in
the plan count as running pods.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.pod_index import PodIndex
from cache.terms import SpreadConstraint
from policies.filters.pod_topology_spread import count_member, included
from policies.interface import MAX_SCORE

HOSTNAME = "kubernetes.io/hostname"


def soft_constraints(pod: PodInfo) -> tuple[SpreadConstraint, ...]:
    return tuple(c for c in pod.spread if not c.hard)


class SoftSpreadState:
    __slots__ = ("constraints", "counts", "keys", "pod")

    def __init__(self, pod: PodInfo, constraints: tuple[SpreadConstraint, ...]) -> None:
        self.pod = pod
        self.constraints = constraints
        self.keys = tuple(c.topology_key for c in constraints)
        self.counts: list[Counter[str]] = [Counter() for _ in constraints]

    @classmethod
    def compute(
        cls, pod: PodInfo, index: PodIndex, nodes: Mapping[str, NodeInfo]
    ) -> SoftSpreadState | None:
        constraints = soft_constraints(pod)
        if not constraints:
            return None
        state = cls(pod, constraints)
        for i, constraint in enumerate(constraints):
            if constraint.selector.empty:
                continue
            for placed in index.matching((pod.namespace,), constraint.selector):
                node = nodes.get(placed.node)
                if (
                    not placed.pod.deleting
                    and node is not None
                    and included(pod, constraint, state.keys, node)
                ):
                    state.counts[i][node.labels[constraint.topology_key]] += 1
        return state

    def clone(self) -> SoftSpreadState:
        copy = SoftSpreadState(self.pod, self.constraints)
        copy.counts = [Counter(c) for c in self.counts]
        return copy

    def add(self, other: PodInfo, node: NodeInfo, delta: int = 1) -> None:
        count_member(self.pod, self.constraints, self.keys, self.counts, other, node, delta)

    def scores(self, nodes: Sequence[NodeInfo]) -> list[float]:
        """Normalized scores of `nodes`, the nodes being compared."""
        ignored = [not all(key in node.labels for key in self.keys) for node in nodes]
        weights = []
        for constraint in self.constraints:
            if constraint.topology_key == HOSTNAME:
                size = sum(1 for skip in ignored if not skip)
            else:
                size = len(
                    {
                        node.labels[constraint.topology_key]
                        for node, skip in zip(nodes, ignored, strict=True)
                        if not skip
                    }
                )
            weights.append(math.log(size + 2))
        raw: list[int | None] = []
        for node, skip in zip(nodes, ignored, strict=True):
            if skip:
                raw.append(None)
                continue
            total = 0.0
            for i, constraint in enumerate(self.constraints):
                count = self.counts[i].get(node.labels[constraint.topology_key], 0)
                total += count * weights[i] + (constraint.max_skew - 1)
            raw.append(math.floor(total + 0.5))  # Go's math.Round, for totals >= 0
        present = [value for value in raw if value is not None]
        high = max(present, default=0)
        low = min(present, default=0)
        result = []
        for value in raw:
            if value is None:
                result.append(0.0)
            elif high == 0:
                result.append(MAX_SCORE)
            else:
                result.append(float(int(MAX_SCORE) * (high + low - value) // high))
        return result
