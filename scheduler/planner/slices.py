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
        # Per slice, its members by what they ask: (one of them, how many).
        self.asks: dict[int, list[tuple[PodInfo, int]]] = {}
        by_signature: dict[int, dict[object, list[PodInfo]]] = {}
        for pod in ordered:
            alike = by_signature.setdefault(self.slice_of[pod.uid], {})
            alike.setdefault(pod.placement_signature(), []).append(pod)
        for index, alike in by_signature.items():
            self.asks[index] = [(pods[0], len(pods)) for pods in alike.values()]
        self.snapshot = snapshot
        self._cut: dict[frozenset[str] | None, dict[str, frozenset[str]]] = {}

    def domains(self, allowed: frozenset[str] | None) -> dict[str, frozenset[str]]:
        """The domains with their nodes, cut to `allowed` (None: every node), once per
        set of nodes a planning call allows."""
        cut = self._cut.get(allowed)
        if cut is None:
            nodes = self.snapshot.nodes
            names = nodes.keys() if allowed is None else allowed
            grouped: dict[str, set[str]] = {}
            for name in names:
                node = nodes.get(name)
                value = node.labels.get(self.key) if node is not None else None
                if value is not None:
                    grouped.setdefault(value, set()).add(name)
            cut = self._cut[allowed] = {v: frozenset(n) for v, n in grouped.items()}
        return cut

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
        asks = self.slices.asks[index]
        best: tuple[int, str, frozenset[str]] | None = None
        for value, nodes in self.slices.domains(allowed).items():
            room = [0] * len(asks)
            free = 0
            for name in nodes:
                node = view.node(name)
                free += node.free_gpu_milli
                for position, (pod, _) in enumerate(asks):
                    room[position] += copies_that_fit(pod, node)
            # Each kind of member alone must find room for all of its kind in the slice.
            if any(have < count for have, (_, count) in zip(room, asks, strict=True)):
                continue
            if best is None or (free, value) < best[:2]:
                best = (free, value, nodes)
        return best[2] if best is not None else frozenset()
