"""Every pod of the cache by the gang it belongs to, kept as pods come and go.

The victim search reads the running gangs once per preemption it considers; grouping
every pod of a large cluster for that was the costliest part of the read (thousands
of pods). The cache keeps this index on each pod change instead (`ClusterCache.apply_pod`
and the other places a pod record enters or leaves), so the search only filters.

Pure: no I/O. A pod is indexed under its gang key as its latest record has it (a label
change moves it to its new gang).
"""

from __future__ import annotations

from collections.abc import Mapping

from cache.pod import PodInfo


class GangIndex:
    """gang key -> pod uid -> the pod's record, for every pod the cache holds."""

    def __init__(self) -> None:
        self._members: dict[str, dict[str, PodInfo]] = {}

    def put(self, pod: PodInfo, old: PodInfo | None) -> None:
        """`pod` is stored (replacing `old`, the same uid's previous record, if any)."""
        if old is not None and old.gang_key != pod.gang_key:
            self.remove(old)
        self._members.setdefault(pod.gang_key, {})[pod.uid] = pod

    def remove(self, pod: PodInfo) -> None:
        """`pod`'s record left the cache."""
        key = pod.gang_key
        members = self._members.get(key)
        if members is None:
            return
        members.pop(pod.uid, None)
        if not members:
            del self._members[key]

    def gangs(self) -> Mapping[str, Mapping[str, PodInfo]]:
        return self._members
