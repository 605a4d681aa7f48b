"""Topology slices (cache/topology_requirement.py): every `slice_size` consecutive
members, in the gang's member order (oldest first, then by name), inside one domain of
`slice_key` (for example each 4 pods of 8 GPUs in one NVLink clique within one rack).

Each attempt (search.GangSearch.greedy) places the members slice by slice; the first
member of a slice to be placed chooses its domain: among the domains (cut to the nodes
the attempt allows, the required domain's) with room for the slice's members by
resources alone, the tightest (least free GPU capacity), then by name; the slice's
other members go only there. A slice that finds no such domain leaves its members
unplaced, and the gang waits. The GPU-level topology inside a node is scored as for
any member, so a slice on one node still gets its NVLink pairs.

Members already bound are not re-sliced: slices are formed over the members to place.
"""

from __future__ import annotations

from collections.abc import Sequence

from cache.pod import PodInfo
from cache.snapshot import PlanningView, Snapshot
from policies.capacity import copies_that_fit


class Slices:
    """One gang's slices as one planning call sees them."""

    def __init__(self, key: str, size: int, members: Sequence[PodInfo], snapshot: Snapshot) -> None:
        self.key = key
        self.size = size
        ordered = sorted(members, key=lambda p: (p.created, p.name))
        self.slice_of = {pod.uid: i // size for i, pod in enumerate(ordered)}
        self.members_of: dict[int, list[PodInfo]] = {}
        for pod in ordered:
            self.members_of.setdefault(self.slice_of[pod.uid], []).append(pod)
        self.domains: dict[str, frozenset[str]] = {}
        grouped: dict[str, set[str]] = {}
        for name, node in snapshot.nodes.items():
            value = node.labels.get(key)
            if value is not None:
                grouped.setdefault(value, set()).add(name)
        self.domains = {value: frozenset(names) for value, names in grouped.items()}

    def order(self, order: Sequence[PodInfo]) -> list[PodInfo]:
        """`order` regrouped slice by slice (each slice's members together, in
        `order`'s order within it), so that a slice is placed before the next begins."""
        return sorted(order, key=lambda p: self.slice_of.get(p.uid, -1))

    def start(self) -> SliceAttempt:
        return SliceAttempt(self)


class SliceAttempt:
    """The domain each slice chose in one attempt."""

    def __init__(self, slices: Slices) -> None:
        self.slices = slices
        self.chosen: dict[int, frozenset[str]] = {}

    def allowed(
        self, pod: PodInfo, view: PlanningView, allowed: frozenset[str] | None
    ) -> frozenset[str] | None:
        """The nodes `pod` may go to: its slice's domain (chosen now if it is the
        slice's first member), cut to `allowed`; empty when no domain holds its slice."""
        index = self.slices.slice_of.get(pod.uid)
        if index is None:
            return allowed
        nodes = self.chosen.get(index)
        if nodes is None:
            nodes = self.chosen[index] = self._choose(index, view, allowed)
        return nodes

    def _choose(
        self, index: int, view: PlanningView, allowed: frozenset[str] | None
    ) -> frozenset[str]:
        members = self.slices.members_of[index]
        best: tuple[int, str, frozenset[str]] | None = None
        for value, names in self.slices.domains.items():
            nodes = names if allowed is None else names & allowed
            if not nodes:
                continue
            room = {pod.uid: 0 for pod in members}
            free = 0
            for name in nodes:
                node = view.node(name)
                free += node.free_gpu_milli
                for pod in members:
                    room[pod.uid] += copies_that_fit(pod, node)
            # Each member's shape alone must fit the slice's count of that shape.
            if any(room[pod.uid] < _alike(pod, members) for pod in members):
                continue
            if best is None or (free, value) < best[:2]:
                best = (free, value, nodes)
        return best[2] if best is not None else frozenset()


def _alike(pod: PodInfo, members: Sequence[PodInfo]) -> int:
    """How many of `members` ask what `pod` asks (compete for the same room)."""
    signature = pod.placement_signature()
    return sum(1 for other in members if other.placement_signature() == signature)
