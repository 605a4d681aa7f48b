"""Exhaustive mode's memory (candidate limit 0, memoizable scores): per shape, every
feasible node ranked by its choice, kept across planning calls and caught up from the
snapshot's change log, so that placing a pod costs the nodes that changed since the
shape was last placed, not every node."""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, ValuesView

from cache.pod import PodInfo
from cache.snapshot import Snapshot
from policies.diagnosis import FilterMemo
from policies.profile import Profile
from scheduler.planner.node_choice import INFEASIBLE, NodeChoice, evaluate_choice

# (shape, node state) choices kept at most with Profile.node_state (a few MB).
_STATE_CHOICES_KEPT = 1 << 17
# A (shape number, state number) pair as one int: shape x span + state. State numbers
# start over with the table, so they stay far below the span.
_STATE_KEY_SPAN = 1 << 32
# Filters that refuse most nodes in a replay, asked first when only whether a node
# passes matters (the reason's wording follows the profile's order elsewhere).
_MOST_REFUSING = ("resource-fit", "gpu-fit")


class Ranking:
    """Every feasible node of one shape, best choice first, as the snapshot has them.

    `order` is a binary heap of keys (-score, rank, name) with lazy removal: a node's
    key is valid while `keys` holds it; an entry left behind by a change is dropped
    when it reaches the head, or when stale entries outnumber valid ones. A replay
    reads only the head (each pod a gang of one), so a change costs one push, not a
    sorted-list removal and insertion; `best_first` walks the heap in order for gangs
    whose later members look further down.
    """

    __slots__ = ("choices", "generation", "keys", "order")

    def __init__(self) -> None:
        self.order: list[tuple[float, int, str]] = []  # a heap, see above
        self.keys: dict[str, tuple[float, int, str]] = {}
        self.choices: dict[str, NodeChoice] = {}
        self.generation = -1

    def head(self) -> tuple[float, int, str] | None:
        """The best valid key (stale entries above it are dropped), or None."""
        order, keys = self.order, self.keys
        while order:
            key = order[0]
            if keys.get(key[2]) == key:
                return key
            heapq.heappop(order)
        return None

    def candidates(self) -> list[str]:
        """Every feasible node, best first: the candidate order of the later attempts
        (first-fit decreasing keeps the first of equally tight nodes). In the order of
        `keys` instead, which is the order nodes entered the ranking, a kept ranking
        and a fresh one would break those ties differently."""
        return [name for _, _, name in sorted(self.keys.values())]

    def best_first(self) -> Iterator[tuple[float, int, str]]:
        """Every valid key, best first, without disturbing the heap: a walk of the
        heap's tree by a second heap of the frontier (a key may come twice when a node
        went back to a key it had: harmless to a search for the first that fits)."""
        order, keys = self.order, self.keys
        if not order:
            return
        frontier = [(order[0], 0)]
        size = len(order)
        while frontier:
            key, position = heapq.heappop(frontier)
            if keys.get(key[2]) == key:
                yield key
            child = 2 * position + 1
            if child < size:
                heapq.heappush(frontier, (order[child], child))
                if child + 1 < size:
                    heapq.heappush(frontier, (order[child + 1], child + 1))


class Rankings:
    """The rankings of the shapes planned lately (least recently planned dropped past
    `limit`), against one snapshot object; with Profile.node_state, the choices shared
    by every node in one state."""

    def __init__(
        self, profile: Profile, memo: FilterMemo, limit: int, rank: Callable[[str], int]
    ) -> None:
        self.profile = profile
        self.memo = memo
        self.limit = limit
        self.rank = rank
        self._by_shape: OrderedDict[Hashable, Ranking] = OrderedDict()
        self._snapshot: Snapshot | None = None
        # With Profile.node_state: each node's state key at its generation, and the
        # choice per (shape signature, state key).
        self._state_keys: dict[str, tuple[int, int]] = {}
        self._state_choices: dict[int, NodeChoice] = {}
        self._state_numbers: dict[Hashable, int] = {}
        self._shape_numbers: dict[Hashable, int] = {}
        self._feasibility_filters = sorted(
            profile.filters,
            key=lambda check: (
                _MOST_REFUSING.index(check.name) if check.name in _MOST_REFUSING else 99
            ),
        )

    def values(self) -> ValuesView[Ranking]:
        """The rankings kept."""
        return self._by_shape.values()

    def forget_choices(self) -> None:
        """Drop every kept choice (the scores' learnt workload moved a step)."""
        self._by_shape.clear()
        self._state_choices.clear()

    def ranking(self, pod: PodInfo, snapshot: Snapshot) -> Ranking:
        """The shape's ranking, caught up with the snapshot."""
        if snapshot is not self._snapshot:
            self._by_shape.clear()
            self._snapshot = snapshot
        signature = pod.node_signature()
        ranking = self._by_shape.get(signature)
        names: Iterable[str]
        if ranking is not None and not snapshot.remembers(ranking.generation):
            ranking = None  # too far behind to catch up: start over
        if ranking is None:
            ranking = self._by_shape[signature] = Ranking()
            if len(self._by_shape) > self.limit:
                self._by_shape.popitem(last=False)
            names = snapshot.nodes.keys()
        else:
            self._by_shape.move_to_end(signature)
            names = snapshot.changed_since(ranking.generation)
        keys, order, choices = ranking.keys, ranking.order, ranking.choices
        fresh = not keys  # a new ranking is heapified once at the end, not node by node
        added: list[tuple[float, int, str]] = []
        if self.profile.node_state is not None:
            updates = self._state_choices_of(signature, pod, snapshot, names)
        else:
            updates = self._node_choices_of(pod, snapshot, names)
        rank = self.rank
        push = heapq.heappush
        for name, choice in updates:
            old = keys.get(name)
            if choice is not None and choice.feasible:
                choices[name] = choice
                score = -choice.score
                if old is None:
                    key = keys[name] = (score, rank(name), name)
                    if fresh:
                        added.append(key)
                    else:
                        push(order, key)
                elif old[0] != score:  # an unchanged key keeps its entry
                    key = keys[name] = (score, old[1], name)  # a node's rank never moves
                    push(order, key)
            elif old is not None:
                del keys[name]  # its entry is stale from now on
                del choices[name]
        if added:
            order.extend(added)
            heapq.heapify(order)
        if len(order) > 2 * len(keys) + 64:
            order[:] = keys.values()
            heapq.heapify(order)
        ranking.generation = snapshot.generation
        return ranking

    def _node_choices_of(
        self, pod: PodInfo, snapshot: Snapshot, names: Iterable[str]
    ) -> Iterator[tuple[str, NodeChoice | None]]:
        """The shape's choice on each named node (None: the node is gone), evaluated
        per node with the filter memo."""
        memo = self.memo.for_shape(pod.filter_signature(), pod, snapshot.nodes.keys())
        for name in names:
            node = snapshot.nodes.get(name)
            if node is None:
                yield name, None
            elif memo.first_failure(node) is None:
                yield name, evaluate_choice(self.profile, pod, node, 0)
            else:
                yield name, INFEASIBLE

    def _state_choices_of(
        self, signature: Hashable, pod: PodInfo, snapshot: Snapshot, names: Iterable[str]
    ) -> Iterator[tuple[str, NodeChoice | None]]:
        """The shape's choice on each named node (None: the node is gone), shared by
        every node in the same state (Profile.node_state). Choices are never mutated,
        so one object may serve many nodes.

        This is the hot loop of a trace replay (10^5 to 10^6 turns), written flat: the
        per-name filter memo is skipped (the (shape, state) table already answers for an
        unchanged node), and only whether some filter refuses matters, not which one, so
        the filters run in `_feasibility_filters` order (those that refuse most first)."""
        node_state = self.profile.node_state
        assert node_state is not None
        if len(self._state_keys) > 2 * len(snapshot.nodes) + 64:
            self._state_keys.clear()  # nodes that are gone
        if len(self._state_choices) >= _STATE_CHOICES_KEPT:
            # States of the past rarely come back: start over.
            self._state_choices.clear()
            self._state_numbers.clear()
            self._shape_numbers.clear()
            self._state_keys.clear()
        # States and signatures are numbered once: hashing their nested tuples on
        # every look-up would cost what the table saves. A (shape, state) pair is one
        # int: shape numbers are few, state numbers below _STATE_CHOICES_KEPT x 2.
        shape = self._shape_numbers.setdefault(signature, len(self._shape_numbers))
        base = shape * _STATE_KEY_SPAN
        state_keys, state_numbers = self._state_keys, self._state_numbers
        state_choices = self._state_choices
        nodes = snapshot.nodes
        filters = self._feasibility_filters
        profile = self.profile
        for name in names:
            node = nodes.get(name)
            if node is None:
                yield name, None
                continue
            known = state_keys.get(name)
            if known is None or known[0] != node.generation:
                number = state_numbers.setdefault(node_state(node), len(state_numbers))
                known = state_keys[name] = (node.generation, number)
            key = base + known[1]
            choice = state_choices.get(key)
            if choice is None:
                for check in filters:
                    if check.filter(pod, node) is not None:
                        choice = INFEASIBLE
                        break
                else:
                    choice = evaluate_choice(profile, pod, node, 0)
                state_choices[key] = choice
            yield name, choice
