"""The extension points, written down once.

A *filter* says whether a pod may go on a node and, when not, why, in words that
aggregate across nodes the way kube-scheduler's do ("Insufficient nvidia.com/gpu").
A *device chooser* proposes which GPUs of a node a pod would take. A *score* rates a
(pod, node, devices) choice from 0 (worst) to 100 (best); the planner sums scores
times their configured weights and takes the best choice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from cache.dra.topology import NVLINK_CLIQUE_LABEL
from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.snapshot import Snapshot

MAX_SCORE = 100.0

CandidateOrder = Literal["tight", "roomy"]
"""Which end of the free-capacity index a score finds its best nodes at: "tight" (the
fullest nodes that still fit, as bin-packing wants) or "roomy" (the emptiest)."""


class Filter(Protocol):
    name: str

    def filter(self, pod: PodInfo, node: NodeInfo) -> str | None:
        """None when the pod fits on the node; otherwise the reason, a short phrase
        shared by every node failing the same way."""
        ...


class DeviceChooser(Protocol):
    name: str

    def candidates(self, pod: PodInfo, node: NodeInfo) -> Sequence[DeviceShares]:
        """Device sets the pod could take on this node, best first (by the chooser's
        own judgement); `()` for a pod that needs no GPU is `[()]`; empty when no set
        fits. The node passed the filters, so at least one set fits."""
        ...


@dataclass(slots=True)
class GangContext:
    """What the planner has decided so far for the gang being placed, for scores that
    judge a member's node by where its fellow members went."""

    # label key -> Counter of that label's values on nodes already chosen for the gang
    domains: dict[str, Counter[str]] = field(default_factory=dict)
    placed: int = 0

    def record(self, node: NodeInfo, topology_keys: Sequence[str]) -> None:
        # The NVLink clique too: the network-topology score reads it for DRA members.
        recorded = topology_keys
        if NVLINK_CLIQUE_LABEL not in topology_keys:
            recorded = (*topology_keys, NVLINK_CLIQUE_LABEL)
        for key in recorded:
            value = node.labels.get(key)
            if value is not None:
                self.domains.setdefault(key, Counter())[value] += 1
        self.placed += 1


class Score(Protocol):
    name: str
    # Where a candidate search should start for this score (None: no preference).
    candidate_order: CandidateOrder | None

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        """0..100, higher is better, for placing `pod` on `node` taking `shares`.
        `node` is the state before the pod is placed."""
        ...


class NodePreference(Protocol):
    """A preference among the nodes a pod's scores rank, from the state of the whole
    cluster (which no per-node score sees): the planner places the pod on the best
    ranked node the preference admits, or on the best ranked node when none does. A
    preference never makes a pod fail."""

    name: str

    def preferred(self, pod: PodInfo, snapshot: Snapshot) -> Callable[[str], bool] | None:
        """A test of node names, True on the nodes `pod` should go to first; None when
        every node is as good (the fast path: the ranking alone decides)."""
        ...
