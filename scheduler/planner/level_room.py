"""The room of a topology level's domains for one shape of member, kept between
planning calls and caught up from the snapshot's change log, so that a gang requiring
one rack of 5,000 nodes pays for the nodes changed since the last such gang, not for
every node (counting them afresh was most of its plan).

Per node of the level: its domain, its slice domain (a narrower level, or None), how
many members of the shape it takes when the shape's filters pass it (0 otherwise), and
its free GPU milli; per domain the sums, and the nodes that take at least one member.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from policies.capacity import copies_that_fit
from policies.diagnosis import ShapeMemo

# (level, slice level, shape signature) rooms kept; shapes churn, so the oldest go.
MAX_ROOMS = 32


@dataclass(slots=True)
class DomainSum:
    copies: int = 0
    free_gpu_milli: int = 0
    # GPUs its nodes have, busy or not: the domain's size.
    gpus: int = 0
    # Nodes with room for one member of the shape at least.
    nodes: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Part:
    domain: str
    part: str | None  # the slice domain
    copies: int
    free_gpu_milli: int
    gpus: int


class LevelRoom:
    """One level's domains, for one shape, as of `generation` of `snapshot`."""

    def __init__(self, key: str, slice_key: str | None) -> None:
        self.key = key
        self.slice_key = slice_key
        self.snapshot: Snapshot | None = None
        self.generation = -1
        self.parts: dict[str, _Part] = {}
        self.domains: dict[str, DomainSum] = {}
        # (domain, slice domain) -> members of the shape its nodes take.
        self.slices: dict[tuple[str, str], int] = {}

    def catch_up(self, snapshot: Snapshot, pod: PodInfo, memo: ShapeMemo) -> None:
        nodes = snapshot.nodes
        if snapshot is not self.snapshot or not snapshot.remembers(self.generation):
            self.snapshot = snapshot
            self.parts.clear()
            self.domains.clear()
            self.slices.clear()
            names: list[str] | dict[str, NodeInfo] = nodes
        else:
            names = snapshot.changed_since(self.generation)
        for name in names:
            self._remove(name)
            node = nodes.get(name)
            if node is not None:
                self._add(node, pod, memo)
        self.generation = snapshot.generation

    def _add(self, node: NodeInfo, pod: PodInfo, memo: ShapeMemo) -> None:
        domain = node.labels.get(self.key)
        if domain is None:
            return
        copies = copies_that_fit(pod, node) if memo.first_failure(node) is None else 0
        part = node.labels.get(self.slice_key) if self.slice_key is not None else None
        free = node.free_gpu_milli
        gpus = len(node.devices)
        self.parts[node.name] = _Part(domain, part, copies, free, gpus)
        total = self.domains.get(domain)
        if total is None:
            total = self.domains[domain] = DomainSum()
        total.copies += copies
        total.free_gpu_milli += free
        total.gpus += gpus
        if copies:
            total.nodes.add(node.name)
        if part is not None and copies:
            self.slices[domain, part] = self.slices.get((domain, part), 0) + copies

    def _remove(self, name: str) -> None:
        old = self.parts.pop(name, None)
        if old is None:
            return
        total = self.domains[old.domain]
        total.copies -= old.copies
        total.free_gpu_milli -= old.free_gpu_milli
        total.gpus -= old.gpus
        total.nodes.discard(name)
        if old.part is not None and old.copies:
            key = (old.domain, old.part)
            left = self.slices[key] - old.copies
            if left:
                self.slices[key] = left
            else:
                del self.slices[key]


class LevelRooms:
    """The planner's LevelRoom per (level, slice level, shape signature)."""

    def __init__(self) -> None:
        self._rooms: dict[tuple[str, str | None, Hashable], LevelRoom] = {}

    def room(
        self,
        key: str,
        slice_key: str | None,
        signature: Hashable,
        snapshot: Snapshot,
        pod: PodInfo,
        memo: ShapeMemo,
    ) -> LevelRoom:
        index = (key, slice_key, signature)
        room = self._rooms.pop(index, None)
        if room is None:
            room = LevelRoom(key, slice_key)
            while len(self._rooms) >= MAX_ROOMS:
                del self._rooms[next(iter(self._rooms))]
        self._rooms[index] = room  # most recently used last
        room.catch_up(snapshot, pod, memo)
        return room
