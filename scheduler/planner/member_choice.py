"""A second kind of choice per member, made beside its node: the interface the search
(search.py) plugs such a kind in by.

The node choice (node_choice.py) decides where a member goes. Some members need more
decided on that node, and decided across the gang so that two members never take the
same thing: volumes for their unbound claims (volume_choice.py), devices from a pool,
a topology domain shared by a slice of members. Such a kind implements the two
Protocols below; the search then, for every member the kind concerns, asks it about
the node the pick found, and when it (or another kind) says no, picks the next node
without the refused ones, a bounded number of times (search.MEMBER_CHOICE_TRIES).
Every kind is asked before any records: a node one kind refuses leaves no trace in
the others. When no node offered is accepted, a kind may `revisit`: change the
choices earlier members made (on their own nodes) so that this one fits too, within
its own bound; the search asks it on the first refused nodes
(search.MEMBER_REVISIT_NODES). docs/architecture.md, "The planner package", says how to add one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from cache.gpu import DeviceShares
from cache.node import NodeInfo
from cache.pod import PodInfo
from scheduler.planner.result import Plan

# Records an offered choice in the attempt's state.
Take = Callable[[], None]


class MemberChoices(Protocol):
    """One attempt's choices of one kind: empty at the start of the attempt, filled
    member by member in the order the attempt places them."""

    def offer(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> Take | None:
        """`pod`'s choice on `node`, given the choices recorded for the members before
        it, without recording it: calling the returned function records it. None when
        `node` offers none (the search then tries another node). `shares`: the devices
        of the node the pod's node choice took (a kind whose devices they are follows
        them; docs/dra.md, "Packing DRA shares")."""
        ...

    def revisit(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> Take | None:
        """`pod`'s choice on `node` found by changing the choices recorded for earlier
        members (each keeps its node), without recording anything: the returned
        function records the new choices of all of them. None when there is none, or
        the kind's bound is spent (a kind that never revisits says None)."""
        ...

    def into_plan(self, plan: Plan, left_out: Collection[str]) -> Plan:
        """`plan` carrying this attempt's choices for the members it places (`left_out`:
        uids of members the attempt recorded a choice for but did not place)."""
        ...


class MemberChoiceKind(Protocol):
    """One kind of choice, for one planning call of one gang."""

    def concerns(self, uid: str) -> bool:
        """Whether the member needs a choice of this kind (others are never asked)."""
        ...

    def start(self) -> MemberChoices:
        """The choices of a new attempt, none made."""
        ...

    def unmet(self, nodes: int, gang_key: str) -> str:
        """Why a member this kind concerns found no node although every one of the
        `nodes` passes its filters alone: the choices it needs went to other members."""
        ...

    def detail(self, uid: str, reasons: Collection[str]) -> str:
        """The kind's own precise words on why the member found no node, added to the
        counts of filter `reasons` (empty when every node passed alone); "" for none."""
        ...
