"""Which running pods hold a GPU that its node agent now reports unhealthy (pure).

The scheduler stops placing onto such a GPU by itself (`NodeInfo.usable_free`); the
pods already on it are the users' to act on, so they are told (a Warning event per pod,
scheduler/kube/gpu_faults.py). Read from the cache's own books: the devices it charges
each bound pod, not the pod's annotation as written.
"""

from __future__ import annotations

from collections.abc import Iterator
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


def faulty_holdings(cache: ClusterCache) -> Iterator[FaultyHolding]:
    """Every bound pod holding at least one unhealthy device, node by node. Nodes whose
    devices are all healthy (nearly all of them) cost one pass over their devices."""
    for node in cache.nodes():
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
