"""A Warning event on each running pod whose GPU its node agent reports unhealthy
(docs/node-agent.md, "Faults the moment they happen").

The node agent marks the GPU `healthy: false` in its node's topology annotation; the
scheduler then places nothing new on it. The pods already there are told once per
(pod, GPU) with reason `GPUUnhealthy`, so that a user (or a controller watching
events) can restart the gang elsewhere; nothing is evicted, since whether a job
survives an XID is the job's to say.
"""

from __future__ import annotations

from collections.abc import Callable

from cache.cluster import ClusterCache
from cache.gpu_faults import FaultyNodes, faulty_holdings
from cache.pod import PodInfo

REASON = "GPUUnhealthy"

Warn = Callable[[PodInfo, str, str], None]


class GpuFaultNotifier:
    """Remembers what it told, so that each (pod, GPU) gets one event while the fault
    lasts; a fault that clears and comes back is told again."""

    def __init__(self) -> None:
        self._told: set[tuple[str, str, int, str]] = set()
        self._generation = -1
        self._faulty = FaultyNodes()

    def check(self, cache: ClusterCache, warn: Warn) -> int:
        """Warn about new faulty holdings; returns how many events were asked for. Looks
        only when the cache changed since the last look, and then at the nodes changed
        since and the pods on faulty nodes (cache/gpu_faults.py): with no fault anywhere
        a look costs the changed nodes, whatever the cluster's size, so it is made at
        every cycle and a fault is told by the first cycle after the node update."""
        if cache.generation == self._generation:
            return 0
        self._generation = cache.generation
        faulty = self._faulty.update(cache)
        if not faulty and not self._told:
            return 0
        current: set[tuple[str, str, int, str]] = set()
        sent = 0
        for holding in faulty_holdings(cache, faulty):
            pod = holding.pod
            for device in holding.devices:
                key = (pod.uid, holding.node, device.index, device.uuid)
                current.add(key)
                if key in self._told:
                    continue
                gang = pod.gang_key
                warn(
                    pod,
                    REASON,
                    f"GPU {device.index} ({device.uuid or 'uuid unknown'}) of node "
                    f"{holding.node}, held by this pod"
                    + (f" of gang {gang}" if pod.gang_name else "")
                    + ", is reported unhealthy by the node agent; no new work is placed "
                    "on it (docs/node-agent.md)",
                )
                sent += 1
        self._told = current
        return sent
