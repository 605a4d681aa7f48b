"""Every pod of the cache by the gang it belongs to, kept as pods come and go.

The victim search reads the running gangs once per preemption it considers; grouping
every pod of a large cluster for that was the costliest part of the read (thousands
of pods). The cache keeps this index on each pod change instead (`ClusterCache.apply_pod`
and the other places a pod record enters or leaves), so the search only filters.

Pure: no I/O. A pod is indexed under its gang key as its latest record has it (a label
change moves it to its new gang).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from cache.pod import PodInfo


class _OneMember(Mapping[str, PodInfo]):
    """A gang of one pod (most pods of a large cluster: those of other schedulers):
    uid -> record without a dict's 184 bytes (memory at 150,000 pods)."""

    __slots__ = ("pod",)

    def __init__(self, pod: PodInfo) -> None:
        self.pod = pod

    def __getitem__(self, uid: str) -> PodInfo:
        if uid != self.pod.uid:
            raise KeyError(uid)
        return self.pod

    def __iter__(self) -> Iterator[str]:
        yield self.pod.uid

    def __len__(self) -> int:
        return 1


class GangIndex:
    """gang key -> pod uid -> the pod's record, for every pod the cache holds."""

    def __init__(self) -> None:
        self._members: dict[str, _OneMember | dict[str, PodInfo]] = {}

    def put(self, pod: PodInfo, old: PodInfo | None) -> None:
        """`pod` is stored (replacing `old`, the same uid's previous record, if any)."""
        if old is not None and old.gang_key != pod.gang_key:
            self.remove(old)
        key = pod.gang_key
        members = self._members.get(key)
        if isinstance(members, dict):
            members[pod.uid] = pod
        elif members is None or members.pod.uid == pod.uid:
            self._members[key] = _OneMember(pod)
        else:
            self._members[key] = {members.pod.uid: members.pod, pod.uid: pod}

    def remove(self, pod: PodInfo) -> None:
        """`pod`'s record left the cache."""
        key = pod.gang_key
        members = self._members.get(key)
        if members is None:
            return
        if not isinstance(members, dict):
            if members.pod.uid == pod.uid:
                del self._members[key]
            return
        members.pop(pod.uid, None)
        if len(members) == 1:
            (last,) = members.values()
            self._members[key] = _OneMember(last)
        elif not members:
            del self._members[key]

    def gangs(self) -> Mapping[str, Mapping[str, PodInfo]]:
        return self._members
