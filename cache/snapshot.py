"""What one scheduling cycle reads: copies of the nodes, indexed by free capacity.

A snapshot is brought up to date by `ClusterCache.update_snapshot`, which copies only
the nodes whose generation moved since the last update, so a cycle after a single
bind costs one node copy, not 5,000. The planner never changes a snapshot: it places
members on a `PlanningView` above it.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping

from sortedcontainers import SortedList

from cache import resources as res
from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.pod_index import PodIndex
from cache.ports import HostPort

_IndexKey = tuple[int, int, int, str]
# Removed nodes remembered for `changed_since` beyond the nodes present; past this the
# oldest are forgotten and readers older than them are told to start over.
REMOVALS_KEPT = 1024


class Snapshot:
    def __init__(self) -> None:
        self.generation = 0
        self.nodes: dict[str, NodeInfo] = {}
        # Sorted (free amount, node name) pairs: a best-fit query starts at the first
        # node with enough room and walks up (tight) or starts at the top (roomy).
        self._by_whole = SortedList()
        self._by_share = SortedList()
        self._by_cpu = SortedList()
        self._by_model: dict[str, set[str]] = {}
        self._keys: dict[str, tuple[_IndexKey, str]] = {}
        # node name -> generation of its last change here, oldest first, so that a
        # reader keeping derived state per node can catch up on what changed since.
        self._changes: OrderedDict[str, int] = OrderedDict()
        # Changes at or before this generation may have been forgotten (`remembers`).
        self._floor = 0
        # The pods on each node, indexed for inter-pod affinity and topology spread.
        self.pods = PodIndex()
        # Bumped whenever a node appears, goes, or changes labels or taints: what the
        # set of topology domains a spread constraint counts depends on.
        self.labels_generation = 0

    def __len__(self) -> int:
        return len(self.nodes)

    # --- maintenance (ClusterCache.update_snapshot) ----------------------------------
    def put(self, node: NodeInfo, pods: tuple[PodInfo, ...] = ()) -> None:
        """Store a node and the pods on it (bound or assumed)."""
        old = self.nodes.get(node.name)
        if old is None or old.labels != node.labels or old.taints != node.taints:
            self.labels_generation += 1
        self.pods.set_node(node.name, pods, old.labels if old else None, node.labels)
        if old is not None and self._moved(node):
            return
        self._remove_node(node.name, node.generation)
        self.nodes[node.name] = node
        key = (node.free_whole_gpus, node.max_free_milli, node.free(res.CPU), node.name)
        self._by_whole.add((key[0], node.name))
        self._by_share.add((key[1], node.name))
        self._by_cpu.add((key[2], node.name))
        model = node.gpu_model
        self._by_model.setdefault(model, set()).add(node.name)
        self._keys[node.name] = (key, model)

    def _moved(self, node: NodeInfo) -> bool:
        """Re-index a node already here whose GPU model stayed: only the free amounts
        that moved (a bind of a CPU-only pod moves one of the three), the same entries
        as removing and adding it again. False, and nothing done, when that removal
        could have made `_remove_node` forget removed nodes: `put` then does just that."""
        name = node.name
        (whole, share, cpu, _), model = self._keys[name]
        # What `_remove_node` would count: the name in `_changes`, the node popped.
        changes = len(self._changes) + (name not in self._changes)
        if model != node.gpu_model or changes - (len(self.nodes) - 1) > REMOVALS_KEPT:
            return False
        self._changes[name] = node.generation
        self._changes.move_to_end(name)
        self.nodes[name] = node
        key = (node.free_whole_gpus, node.max_free_milli, node.free(res.CPU), name)
        for index, before, after in (
            (self._by_whole, whole, key[0]),
            (self._by_share, share, key[1]),
            (self._by_cpu, cpu, key[2]),
        ):
            if before != after:
                index.remove((before, name))
                index.add((after, name))
        self._keys[name] = (key, model)
        return True

    def remove(self, name: str, generation: int) -> None:
        old = self.nodes.get(name)
        if old is not None:
            self.labels_generation += 1
            self.pods.set_node(name, (), old.labels, None)
        self._remove_node(name, generation)

    def _remove_node(self, name: str, generation: int) -> None:
        self._changes[name] = generation
        self._changes.move_to_end(name)
        if self.nodes.pop(name, None) is None:
            return
        if len(self._changes) - len(self.nodes) > REMOVALS_KEPT:
            self._forget_removed()
        (whole, share, cpu, _), model = self._keys.pop(name)
        self._by_whole.remove((whole, name))
        self._by_share.remove((share, name))
        self._by_cpu.remove((cpu, name))
        models = self._by_model[model]
        models.discard(name)
        if not models:
            del self._by_model[model]

    def _forget_removed(self) -> None:
        """Forget the older half of the removed nodes (unique names come and go all
        day); the floor moves past the last one forgotten."""
        excess = len(self._changes) - len(self.nodes) - REMOVALS_KEPT // 2
        for name, generation in list(self._changes.items()):
            if excess <= 0:
                break
            if name not in self.nodes:
                del self._changes[name]
                self._floor = generation
                excess -= 1

    # --- queries ----------------------------------------------------------------------
    def remembers(self, generation: int) -> bool:
        """Whether `changed_since(generation)` is complete (False for a reader so far
        behind that removals it has not seen were forgotten: it must start over)."""
        return generation >= self._floor

    def changed_since(self, generation: int) -> list[str]:
        """Names of the nodes put or removed after `generation`, oldest change first."""
        names = []
        for name, changed in reversed(self._changes.items()):
            if changed <= generation:
                break
            names.append(name)
        names.reverse()
        return names

    def models(self) -> dict[str, int]:
        """Node count per GPU model ("" for nodes without GPUs)."""
        return {model: len(names) for model, names in self._by_model.items()}

    def nodes_of_model(self, model: str) -> frozenset[str]:
        return frozenset(self._by_model.get(model, ()))

    def candidates(
        self, gpu_count: int, gpu_milli: int, cpu_milli: int, tight: bool
    ) -> Iterator[str]:
        """Names of nodes that may have room, from the tightest fit up (tight) or from
        the roomiest down. Only the indexed dimension is checked: filters still run."""
        index, floor, _ = self._index_for(gpu_count, gpu_milli, cpu_milli)
        for _, name in index.irange((floor, ""), None, reverse=not tight):
            yield name

    def _index_for(
        self, gpu_count: int, gpu_milli: int, cpu_milli: int
    ) -> tuple[SortedList, int, int]:
        """The index a request is looked up in, its floor, and the position of that
        index's amount in a node's key (`_keys`)."""
        if gpu_count and gpu_milli >= res.MILLI_PER_GPU:
            return self._by_whole, gpu_count, 0
        if gpu_count:
            return self._by_share, gpu_milli, 1
        return self._by_cpu, cpu_milli, 2

    def tight_walk(
        self, gpu_count: int, gpu_milli: int, cpu_milli: int, after: tuple[int, str] | None
    ) -> Iterator[tuple[int, str]]:
        """`candidates(..., tight=True)` as (free amount, name) walk keys, resumed past
        the key `after` (None: from the start)."""
        index, floor, _ = self._index_for(gpu_count, gpu_milli, cpu_milli)
        if after is None:
            return iter(index.irange((floor, ""), None))
        return iter(index.irange(after, None, inclusive=(False, True)))

    def walk_key(
        self, name: str, gpu_count: int, gpu_milli: int, cpu_milli: int
    ) -> tuple[int, str] | None:
        """The node's key in the walk of `tight_walk`; None when the walk never reaches
        it (no such node, or less free than the request's floor)."""
        known = self._keys.get(name)
        if known is None:
            return None
        _, floor, position = self._index_for(gpu_count, gpu_milli, cpu_milli)
        whole, share, cpu, _ = known[0]
        amount = (whole, share, cpu)[position]
        return (amount, name) if amount >= floor else None


class PlanningView:
    """A snapshot with the tentative placements of the gang being planned on top:
    members of one gang never count the same capacity twice, and the snapshot stays
    untouched (a failed plan is simply dropped).

    `version(name)` is 0 for a node as the snapshot has it and a number unique across
    views sharing `versions` once changed here, so a planner can cache what it computed
    for a node state and know when that state moved."""

    def __init__(self, snapshot: Snapshot, versions: Iterator[int] | None = None) -> None:
        self.snapshot = snapshot
        self._changed: dict[str, NodeInfo] = {}
        self._versions: dict[str, int] = {}
        self._counter = versions if versions is not None else itertools.count(1)

    def node(self, name: str) -> NodeInfo:
        return self._changed.get(name) or self.snapshot.nodes[name]

    def version(self, name: str) -> int:
        return self._versions.get(name, 0)

    def nodes(self) -> Iterable[NodeInfo]:
        for name, node in self.snapshot.nodes.items():
            yield self._changed.get(name, node)

    def place(
        self,
        name: str,
        requests: Mapping[str, int],
        shares: DeviceShares,
        ports: tuple[HostPort, ...] = (),
    ) -> None:
        """Charge a member on the node: its resources, devices and host ports, so that
        a later member of the same plan sees what this one took."""
        node = self._changed.get(name)
        if node is None:
            node = self.snapshot.nodes[name].clone()
            self._changed[name] = node
        node.charge(requests, shares, ports)
        self._versions[name] = next(self._counter)

    def changed_nodes(self) -> Iterable[str]:
        return self._changed.keys()
