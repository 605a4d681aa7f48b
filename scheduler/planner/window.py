"""Bounded mode's memory for lone members (one-pod gangs, the last member of a partly
bound gang): per shape, the window of nodes its one member is chosen from, kept across
planning calls and caught up from the snapshot's change log."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

from sortedcontainers import SortedList

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from scheduler.planner.node_choice import KEPT_SHAPES, NodeChoice

# A node's place in the tight capacity walk, and a window entry's place by merit.
WalkKey = tuple[int, str]
_BestKey = tuple[float, int, WalkKey]


class Window:
    """For one shape planned as a lone member, the first `limit` nodes of the tight
    capacity walk that pass its filters (what candidates.collect_candidates gathers),
    with their choices, ordered best first: kept across planning calls and brought up to
    date from the snapshot's change log, so that a stream of one-pod gangs of one
    template pays for the nodes that changed, not for the whole window every time.

    What makes the update exact: a node whose generation did not move keeps its walk
    key, its filter answer and its choice. So after a change, the window's nodes that
    did not change are still in (in walk order), the unchanged nodes before its last
    key are still out, and only the changed nodes, and the walk past the old last key
    when the window came up short, need looking at."""

    __slots__ = ("best", "complete", "entries", "generation", "keys")

    def __init__(self) -> None:
        self.keys = SortedList()  # walk keys (free amount, name) of the window's nodes
        # (-score, rank, walk key) of those whose choice fits: the first is the pick
        # (best score, then lower rank, then the earlier in the walk, as in the walk).
        self.best = SortedList()
        # name -> (walk key, choice, its key in `best` or None)
        self.entries: dict[str, tuple[WalkKey, NodeChoice, _BestKey | None]] = {}
        # The walk reached the end of the index: every node passing the filters is in.
        self.complete = False
        # The snapshot generation it is up to date with; -1: to be built.
        self.generation = -1

    def reset(self) -> None:
        self.keys.clear()
        self.best.clear()
        self.entries.clear()
        self.complete = False
        self.generation = -1

    def add(self, key: WalkKey, choice: NodeChoice, rank: int) -> None:
        ranked = (-choice.score, rank, key) if choice.feasible else None
        self.keys.add(key)
        if ranked is not None:
            self.best.add(ranked)
        self.entries[key[1]] = (key, choice, ranked)

    def drop(self, name: str) -> None:
        entry = self.entries.pop(name, None)
        if entry is not None:
            self.keys.remove(entry[0])
            if entry[2] is not None:
                self.best.remove(entry[2])

    def catch_up(
        self,
        snapshot: Snapshot,
        request: tuple[int, int, int],
        limit: int,
        choose: Callable[[NodeInfo], NodeChoice | None],
        rank: Callable[[str], int],
    ) -> None:
        """Bring the window up to `snapshot` for a member asking `request` (GPU count,
        GPU milli, CPU): built by one walk the first time, or when too much changed;
        otherwise only the changed nodes are looked at again. `choose`: the member's
        choice on a node, None when its filters refuse the node."""
        nodes = snapshot.nodes
        trusted = True

        def admit(name: str, key: WalkKey) -> bool:
            """Whether the node passes; into the window with its choice if so."""
            nonlocal trusted
            node = nodes[name]
            if not node.generation:
                # Never through a cache: its changes are not logged, so the window
                # cannot be caught up past this call.
                trusted = False
            choice = choose(node)
            if choice is None:
                return False
            self.add(key, choice, rank(name))
            return True

        changed = (
            snapshot.changed_since(self.generation)
            if self.generation >= 0 and snapshot.remembers(self.generation)
            else None
        )
        walk_from: WalkKey | None = None
        if changed is None or len(changed) > limit:
            self.reset()  # start over: one fresh walk
            walking = True
        else:
            last = None if self.complete else self.keys[-1]
            for name in changed:
                self.drop(name)
                key = snapshot.walk_key(name, *request)
                # A changed node past the old last key is met by the walk below, if
                # the window comes up short.
                if key is not None and (last is None or key <= last):
                    admit(name, key)
            while len(self.keys) > limit:
                self.drop(self.keys[-1][1])
                self.complete = False
            walking = len(self.keys) < limit and not self.complete
            walk_from = last
        if walking:
            self.complete = True
            for key in snapshot.tight_walk(*request, walk_from):
                if admit(key[1], key) and len(self.keys) >= limit:
                    self.complete = False
                    break
        self.generation = snapshot.generation if trusted else -1


class Windows:
    """The windows of the shapes planned lately, against one snapshot object."""

    __slots__ = ("_by_shape", "_snapshot")

    def __init__(self) -> None:
        self._by_shape: OrderedDict[Hashable, Window] = OrderedDict()
        self._snapshot: Snapshot | None = None

    def clear(self) -> None:
        self._by_shape.clear()

    def of_shape(self, pod: PodInfo, snapshot: Snapshot) -> Window:
        """The window of `pod`'s shape on `snapshot` (new and empty the first time: its
        generation then says it must be built)."""
        if snapshot is not self._snapshot:
            self._by_shape.clear()
            self._snapshot = snapshot
        signature = pod.node_signature()
        window = self._by_shape.get(signature)
        if window is None:
            window = self._by_shape[signature] = Window()
            if len(self._by_shape) > KEPT_SHAPES:
                self._by_shape.popitem(last=False)
        else:
            self._by_shape.move_to_end(signature)
        return window
