"""The whole-node reserve as the planner meets it (Profile.whole_node_reserve): its
summary of the cluster kept between plans and caught up from the change log; within
one planning call, the guard a member's node must keep with the attempt's members
placed; and the tests a pick applies."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.snapshot import PlanningView, Snapshot
from policies.node_builds import LargestNodes, NodeBuilds
from policies.profile import Profile
from policies.whole_node_reserve import PlannedNode, ReserveGuard, ReserveLedger
from scheduler.planner.node_choice import NodeChoice

# Whether a member may go to a node on a choice's devices.
NodeTest = Callable[[str, NodeChoice], bool]


class _NodeSummary(Protocol):
    """A summary kept per node and caught up from a snapshot's change log."""

    generation: int

    def update(self, nodes: Mapping[str, NodeInfo], names: Iterable[str]) -> None: ...


def _catch_up(summary: _NodeSummary, snapshot: Snapshot, anew: bool) -> None:
    """Bring `summary` up to `snapshot`: every node when it is new (`anew`), else the
    nodes changed since its generation."""
    if anew:
        summary.update(snapshot.nodes, snapshot.nodes.keys())
    elif summary.generation != snapshot.generation:
        summary.update(snapshot.nodes, snapshot.changed_since(summary.generation))
    summary.generation = snapshot.generation


class ReserveMemory:
    """The reserve's ledger and the nodes' builds (for a learnt reserve's classes),
    each caught up with the snapshot it was made from."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._ledger: ReserveLedger | None = None
        self._ledger_snapshot: Snapshot | None = None
        self._node_builds = NodeBuilds()
        self._builds_snapshot: Snapshot | None = None

    def ledger(self, snapshot: Snapshot) -> ReserveLedger | None:
        """The whole-node reserve's summary of `snapshot` (None without a reserve),
        caught up from its change log like the rankings."""
        source = self.profile.whole_node_reserve
        if source is None:
            return None
        # A learnt reserve may have been rebuilt (more pods seen, other nodes).
        reserve = source.current(lambda: self._largest_nodes(snapshot))
        ledger = self._ledger
        anew = (
            ledger is None
            or ledger.reserve is not reserve
            or snapshot is not self._ledger_snapshot
            or not snapshot.remembers(ledger.generation)
        )
        if ledger is None or anew:
            ledger = self._ledger = ReserveLedger(reserve)
            self._ledger_snapshot = snapshot
        _catch_up(ledger, snapshot, anew)
        return ledger

    def reserving(self, snapshot: Snapshot) -> bool:
        """Whether a whole-node reserve has classes to keep (a learnt one has none until
        a pod asking whole GPUs some node could hold has been seen): the fast paths that
        skip it apply otherwise."""
        source = self.profile.whole_node_reserve
        if source is None:
            return False
        return bool(source.current(lambda: self._largest_nodes(snapshot)).requests)

    def cluster_totals(self, snapshot: Snapshot) -> tuple[int, int]:
        """All the nodes' allocatable CPU milli and GPU milli in `snapshot`."""
        self._largest_nodes(snapshot)
        return self._node_builds.totals

    def _largest_nodes(self, snapshot: Snapshot) -> LargestNodes:
        """What the nodes of `snapshot` are built with, caught up from its change log."""
        builds = self._node_builds
        anew = snapshot is not self._builds_snapshot or not snapshot.remembers(builds.generation)
        if anew:
            builds = self._node_builds = NodeBuilds()
            self._builds_snapshot = snapshot
        _catch_up(builds, snapshot, anew)
        return builds.largest


class ReserveGuards:
    """Within one planning call: each member's guard, with the attempt's members
    placed."""

    def __init__(self, memory: ReserveMemory, snapshot: Snapshot) -> None:
        self.memory = memory
        self.snapshot = snapshot
        # The ledger's reading of attempts' changed nodes, by view version.
        self._planned_nodes: dict[int, PlannedNode] = {}
        self._planned_by: ReserveLedger | None = None

    def guard(self, pod: PodInfo, view: PlanningView) -> ReserveGuard | None:
        """The whole-node reserve's guard for `pod` with this attempt's members placed
        (None: no reserve, or no class it may not use is short)."""
        ledger = self.memory.ledger(self.snapshot)
        if ledger is None:
            return None
        changed = view.changed_nodes()
        return ledger.guard(pod, (self._planned(ledger, view, name) for name in changed))

    def _planned(self, ledger: ReserveLedger, view: PlanningView, name: str) -> PlannedNode:
        """The ledger's reading of a node the attempt changed, once per change: every
        member's guard reads every node changed before it, so a gang of n would
        otherwise pay n^2 / 2 readings per attempt. View versions come from this
        planning's one counter, so a version names one node state of one attempt."""
        if ledger is not self._planned_by:
            self._planned_nodes.clear()  # its class numbers are another reserve's
            self._planned_by = ledger
        version = view.version(name)
        known = self._planned_nodes.get(version)
        if known is None:
            known = self._planned_nodes[version] = ledger.planned(view.node(name))
        return known


def reserve_tests(guard: ReserveGuard, view: PlanningView) -> list[NodeTest]:
    """The tests a guarded member's node is picked by, in turn: first the nodes that
    keep the reserve; when none does, those its last resort lets the member break
    ("none": no second test, the member waits as for a lack of room)."""
    tests = [_keeping(guard, view)]
    if guard.reserve.last_resort != "none":
        tests.append(_last_resort(guard, view))
    return tests


def _keeping(guard: ReserveGuard, view: PlanningView) -> NodeTest:
    """Whether placing the guarded pod on a node, on its choice's devices, keeps the
    whole-node reserve."""
    return lambda name, choice: not guard.breaks(view.node(name), choice.shares)


def _last_resort(guard: ReserveGuard, view: PlanningView) -> NodeTest:
    """Whether the guarded pod may go to a node when none keeps the reserve."""
    return lambda name, choice: guard.may_break(view.node(name), choice.shares)
