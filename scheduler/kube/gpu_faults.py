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
from cache.gpu_faults import faulty_holdings
from cache.pod import PodInfo

REASON = "GPUUnhealthy"
MIN_INTERVAL = 1.0  # seconds between two scans of the nodes

Warn = Callable[[PodInfo, str, str], None]


class GpuFaultNotifier:
    """Remembers what it told, so that each (pod, GPU) gets one event while the fault
    lasts; a fault that clears and comes back is told again."""

    def __init__(self, min_interval: float = MIN_INTERVAL) -> None:
        self.min_interval = min_interval
        self._told: set[tuple[str, str, int, str]] = set()
        self._generation = -1
        self._checked_at = float("-inf")

    def check(self, cache: ClusterCache, warn: Warn, now: float) -> int:
        """Warn about new faulty holdings; returns how many events were asked for. Looks
        only when the cache changed since the last look, and at most once per
        `min_interval` (a look scans every node: ~4 ms at 5,000 nodes); a change seen
        meanwhile is looked at by the next cycle after it (the loop ticks every second)."""
        if cache.generation == self._generation or now - self._checked_at < self.min_interval:
            return 0
        self._generation = cache.generation
        self._checked_at = now
        current: set[tuple[str, str, int, str]] = set()
        sent = 0
        for holding in faulty_holdings(cache):
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
