"""Which running pods hold a GPU that its node agent now reports unhealthy (pure).

The scheduler stops placing onto such a GPU by itself (`NodeInfo.usable_free`); the
pods already on it are the users' to act on, so they are told (a Warning event per pod,
scheduler/kube/gpu_faults.py). Read from the cache's own books: the devices it charges
each bound pod, not the pod's annotation as written.

Driven by changes: `FaultyNodes` keeps the names of the nodes with an unhealthy device
from the cache's node change log (the one snapshots are brought up to date from), so
a look costs the nodes changed since the last one plus the pods on faulty nodes, never
a pass over every node (at 5,000 nodes that pass took ~4 ms, once a second).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cache.cluster import ClusterCache
from cache.gpu import GpuDevice
from cache.pod import PodInfo


@dataclass(frozen=True, slots=True)
class FaultyHolding:
    """A bound pod and the unhealthy devices it holds on its node."""

    pod: PodInfo
    node: str
    devices: tuple[GpuDevice, ...]


class FaultyNodes:
    """The nodes with at least one unhealthy device, brought up to date from the
    cache's change log (`ClusterCache.nodes_changed_since`): a node's health changes
    only with the node, so only the nodes changed since the last update are read."""

    def __init__(self) -> None:
        self._generation = -1  # nothing read yet: every node is "changed since"
        self._names: set[str] = set()

    def update(self, cache: ClusterCache) -> frozenset[str]:
        """The faulty nodes now."""
        if cache.generation != self._generation:
            for name in cache.nodes_changed_since(self._generation):
                node = cache.node(name)
                if node is not None and any(not device.healthy for device in node.devices):
                    self._names.add(name)
                else:
                    self._names.discard(name)
            # A removed node leaves the change log; only a faulty one matters here.
            self._names = {name for name in self._names if cache.node(name) is not None}
            self._generation = cache.generation
        return frozenset(self._names)


def faulty_holdings(cache: ClusterCache, names: Iterable[str]) -> Iterator[FaultyHolding]:
    """Every bound pod holding at least one unhealthy device on the nodes `names`
    (FaultyNodes.update), node by node, in name order."""
    for name in sorted(names):
        node = cache.node(name)
        if node is None:
            continue
        unhealthy = {device.index: device for device in node.devices if not device.healthy}
        if not unhealthy:
            continue
        for pod in cache.pods_on(node.name):
            if pod.node_name != node.name:
                continue  # planned, not bound yet: its bind is checked by the planner
            shares = cache.charged_shares(pod.uid) or ()
            held = tuple(unhealthy[index] for index, _ in shares if index in unhealthy)
            if held:
                yield FaultyHolding(pod, node.name, held)
