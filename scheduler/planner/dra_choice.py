"""DRA devices as a kind of member choice (member_choice.py): every claim of every
member of a gang allocated in one plan, together with the node choice
(docs/dra.md, "Whole-gang allocation").

On the node the search picks, a member's claims get kube-scheduler's allocation
(policies/dra/allocator.py, the first alternative) against the devices others hold
and those earlier members of the same attempt took (`Tentative`); a claim an earlier
member allocated is reused where its node selector allows, so a claim shared by
several members is allocated once. When a member finds no devices on the nodes the
search offers it, `revisit` searches again with the earlier members' choices open:
each earlier member that could be in the way keeps its node and moves through its
other allocations (other devices, later firstAvailable sub-requests), depth first in
placement order, until the member fits too (kubernetes#138765, which pod-by-pod
allocation fails). Bounded per planning call by MAX_REVISIT_ALTERNATIVES allocations
and MAX_REVISIT_STEPS devices over every revisit; beyond that the member waits.

Most revisits find nothing, and a search that finds nothing has tried every
combination first: the devices are counted before (policies/dra/shortage.py), and when
the members on a node need more than are free there, the search is not run (it would
fail). Only searches run count against the bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping
from functools import partial

from cache.dra.claims import Allocation, Consumer
from cache.dra.gpu_shares import shared_gpu_ids
from cache.dra.slices import DeviceId
from cache.dra.view import DeviceView
from cache.gpu import DeviceShares
from cache.group_claims import PODGROUP_CONSUMER_GROUP, PODGROUP_CONSUMER_RESOURCE, GroupClaims
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.dra.allocator import ClaimAllocator, PodSearch, StepMeter
from policies.dra.gang import GangMember, PodAllocation, Tentative
from policies.dra.shortage import too_few_devices
from policies.filters.dynamic_resources import CANNOT_ALLOCATE, NOT_AVAILABLE
from scheduler.planner.extended_claims import ExtendedDemand, readable
from scheduler.planner.member_choice import Take
from scheduler.planner.result import ClaimAllocation, Plan

# Words on why a member found no devices, or what words them when first asked.
Words = str | Callable[[], str]

# Pod allocations and devices all revisits of one planning call may try together.
MAX_REVISIT_ALTERNATIVES = 1_000
MAX_REVISIT_STEPS = 100_000


class DraChoiceKind:
    """The gang's DRA claims for one planning call: member uid -> its claim keys, in
    the pod's order, resolved (scheduler/planner/dra_claims.py)."""

    __slots__ = (
        "allocator",
        "alternatives_left",
        "claims",
        "details",
        "extended",
        "gpu_members",
        "group",
        "group_keys",
        "pods",
        "reached",
        "refused",
        "revising",
    )

    def __init__(
        self,
        allocator: ClaimAllocator,
        claims: Mapping[str, tuple[str, ...]],
        pods: Mapping[str, PodInfo],
        details: Mapping[str, Words] | None = None,
        extended: Mapping[str, ExtendedDemand] | None = None,
        shared: tuple[GroupClaims, frozenset[str]] | None = None,
        gpu_members: frozenset[str] = frozenset(),
    ) -> None:
        self.allocator = allocator
        # The gang's own claims (its native PodGroup's) and the keys members use them
        # by: each reserved for the PodGroup, not its pods.
        self.group: GroupClaims | None = None if shared is None else shared[0]
        self.group_keys: frozenset[str] = frozenset() if shared is None else shared[1]
        self.claims = claims
        # uid -> the member's DRA-backed extended resources (a virtual claim per node).
        self.extended: Mapping[str, ExtendedDemand] = extended or {}
        self.pods = pods
        # Members judged by the GPU demand of their claim (dra_claims.py): the shares
        # their node choice takes are shared GPUs of the node, which their allocation
        # follows, and which the plan does not charge a second time.
        self.gpu_members = gpu_members
        # uid -> the allocator's own words on why the member found nothing (last seen),
        # or what words them when asked.
        self.details: dict[str, Words] = dict(details or {})
        self.alternatives_left = MAX_REVISIT_ALTERNATIVES
        # Offers refused, by what decides them (`refusal_key`): members of one template
        # are refused alike on a node whose devices earlier members took, in this
        # attempt and the next, so one search answers for all of them.
        self.refused: set[Hashable] = set()
        # node -> the devices it reaches (None: one of them may be shared by claims).
        self.reached: dict[str, frozenset[DeviceId] | None] = {}
        # Revisits search through their own allocator, whose meter they all share.
        self.revising = ClaimAllocator(
            allocator.cache,
            allocator.namespace_labels,
            allocator.selectors,
            allocator.max_steps,
            StepMeter(MAX_REVISIT_STEPS),
        )

    @property
    def cache(self) -> DeviceView:
        return self.allocator.cache

    def concerns(self, uid: str) -> bool:
        return uid in self.claims

    def start(self) -> DraChoices:
        return DraChoices(self)

    def unmet(self, nodes: int, gang_key: str) -> str:
        return (
            f"0/{nodes} nodes are available: {nodes} {CANNOT_ALLOCATE} (the devices "
            f"left were taken by other members of gang {gang_key})"
        )

    def detail(self, uid: str, reasons: Collection[str]) -> str:
        if reasons and CANNOT_ALLOCATE not in reasons and NOT_AVAILABLE not in reasons:
            return ""
        words = self.details.get(uid, "")
        if not isinstance(words, str):
            words = self.details[uid] = words()
        return words

    def spent(self) -> bool:
        meter = self.revising.meter
        return self.alternatives_left <= 0 or (meter is not None and meter.left <= 0)


class DraChoices:
    """One attempt's device choices: what each member took, in placement order."""

    __slots__ = ("kind", "members", "tentative")

    def __init__(self, kind: DraChoiceKind) -> None:
        self.kind = kind
        self.tentative = Tentative()
        self.members: dict[str, GangMember] = {}  # uid -> the member on its node, in order

    def _member(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> GangMember:
        keys = self.kind.claims[pod.uid]
        demand = self.kind.extended.get(pod.uid)
        if demand is not None:
            keys = demand.keys_on(keys, node)
        prefer: tuple[DeviceId, ...] = ()
        if shares and pod.uid in self.kind.gpu_members:
            prefer = shared_gpu_ids(node.devices, shares)
        return GangMember(pod.uid, pod.namespace, keys, node.name, node.labels, prefer)

    def offer(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> Take | None:
        member = self._member(pod, node, shares)
        kind = self.kind
        key = refusal_key(kind, member, self.tentative)
        if key is not None and key in kind.refused:
            # Refused as a member asking alike was, on this node as it stands: the words
            # (which name this member's claims) are worded from a copy, if read.
            frozen = self.tentative.copy()
            kind.details[pod.uid] = lambda: (
                f"on node {node.name}: "
                f"{readable(_refusal(PodSearch(kind.allocator, member, frozen)))}"
            )
            return None
        search = PodSearch(kind.allocator, member, self.tentative, explain=False)
        choice = next(iter(search), None)
        if choice is None:
            if key is not None:
                kind.refused.add(key)
            # Worded only if the member ends up with no node (most are placed after all).
            reason = search.reason_later()
            kind.details[pod.uid] = lambda: f"on node {node.name}: {readable(reason())}"
            return None
        return partial(self._take, ((member, choice),))

    def revisit(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares = ()) -> Take | None:
        """`pod`'s devices on `node` found by moving the earlier members that could be
        in its way (on the same node, holding devices the node reaches, or having
        allocated a claim it shares) to other allocations on their own nodes."""
        kind = self.kind
        if kind.spent():
            return None
        target = self._member(pod, node, shares)
        reached = {c.device_id for c in kind.cache.node_devices(node.name, node.labels).candidates}
        wanted = set(target.claims)
        held = self.tentative.by_pod()
        relevant = [
            member
            for uid, member in self.members.items()
            if uid in held
            and (
                member.node == node.name
                or any(c.new and c.key in wanted for c in held[uid].claims)
                or not reached.isdisjoint(held[uid].taken())
            )
        ]
        if not relevant:
            return None
        saved = [(member.uid, held[member.uid]) for member in relevant]
        for member in relevant:
            self.tentative.release(member.uid)
        sequence = [*relevant, target]
        try:
            # Most searches that follow a refusal fail: too few devices left for the
            # members on the node (policies/dra/shortage.py) is told without one.
            if too_few_devices(kind.allocator, sequence, self.tentative):
                found = None
            else:
                found = self._search(sequence)
        finally:
            for uid, choice in saved:  # in placement order: a shared claim's first taker first
                self.tentative.take(uid, choice)
        if found is None:
            return None
        return partial(self._retake, relevant, found)

    def _search(self, sequence: list[GangMember]) -> list[tuple[GangMember, PodAllocation]] | None:
        """Every member of `sequence` an allocation on its node, depth first (the last
        member's failure moves the one before it to its next allocation, and so on
        back), within the kind's budget; the tentative state is left as found."""
        kind = self.kind
        streams: list[Iterator[PodAllocation]] = []
        chosen: list[PodAllocation] = []
        index = 0
        while 0 <= index < len(sequence):
            if len(streams) <= index:
                search = PodSearch(kind.revising, sequence[index], self.tentative, explain=False)
                streams.append(iter(search))
            choice = next(streams[index], None)
            if choice is None:
                streams.pop()
                index -= 1
                if index >= 0:
                    self.tentative.release(sequence[index].uid)
                    chosen.pop()
                continue
            if kind.spent():
                break
            kind.alternatives_left -= 1
            self.tentative.take(sequence[index].uid, choice)
            chosen.append(choice)
            index += 1
        complete = len(chosen) == len(sequence)
        for member in reversed(sequence[: len(chosen)]):
            self.tentative.release(member.uid)
        return list(zip(sequence, chosen, strict=True)) if complete else None

    def _take(self, chosen: tuple[tuple[GangMember, PodAllocation], ...]) -> None:
        for member, choice in chosen:
            self.tentative.take(member.uid, choice)
            self.members[member.uid] = member  # a member already listed keeps its place

    def _retake(
        self, relevant: list[GangMember], found: list[tuple[GangMember, PodAllocation]]
    ) -> None:
        for member in relevant:
            self.tentative.release(member.uid)
        self._take(tuple(found))

    def into_plan(self, plan: Plan, left_out: Collection[str]) -> Plan:
        """The plan with every claim its placed members use, each once: the
        allocation when this attempt made it, the placed members as consumers (the
        PodGroup for a claim of the whole gang)."""
        placed = {p.pod_uid for p in plan.placements}
        allocations: dict[str, Allocation | None] = {}
        consumers: dict[str, list[Consumer]] = {}
        for uid, choice in self.tentative.by_pod().items():
            for claim in choice.claims:
                if claim.new or claim.key not in allocations:
                    allocations[claim.key] = claim.allocation if claim.new else None
                users = consumers.setdefault(claim.key, [])
                pod = self.kind.pods.get(uid)
                if uid in placed and pod is not None:
                    users.append(Consumer("pods", pod.name, pod.uid))
        claims = []
        group = self.kind.group
        for key, users in consumers.items():
            record = self.kind.cache.claim(key)
            if not users or record is None:
                continue
            members: tuple[str, ...] = ()
            if group is not None and key in self.kind.group_keys:
                members = tuple(user.uid for user in users)
                if any(c.uid == group.uid for c in record.reserved_for):
                    members = ()  # the PodGroup held it before: not this plan's to undo
                users = [
                    Consumer(
                        PODGROUP_CONSUMER_RESOURCE,
                        group.podgroup,
                        group.uid,
                        PODGROUP_CONSUMER_GROUP,
                    )
                ]
            made_up = self.kind.extended.get(users[0].uid) if record.extended else None
            claims.append(
                ClaimAllocation(
                    namespace=record.namespace,
                    name=record.name,
                    uid=record.uid,
                    resource_version=record.resource_version,
                    allocation=allocations[key],
                    reserved_for=tuple(users),
                    extended=None if made_up is None else made_up.built.get(key),
                    group_members=members,
                )
            )
        placements = plan.placements
        claim_gpus = tuple(
            (p.pod_uid, self.kind.pods[p.pod_uid].gpu)
            for p in placements
            if p.pod_uid in self.kind.gpu_members and p.pod_uid in self.kind.pods
        )
        if self.kind.gpu_members:
            # Their shares are the claims' devices, held by the DRA cache: the cluster
            # cache charges no device for them (nor would a bind annotate one).
            placements = tuple(
                dataclasses.replace(p, shares=())
                if p.pod_uid in self.kind.gpu_members and p.shares
                else p
                for p in placements
            )
        return dataclasses.replace(
            plan, claims=tuple(claims), placements=placements, claim_gpus=claim_gpus
        )


def refusal_key(kind: DraChoiceKind, member: GangMember, tentative: Tentative) -> Hashable | None:
    """What decides whether `member` has an allocation on its node: the node (its labels
    do not change within a planning call), the specs of its claims (each to allocate:
    none allocated already, by anyone or by an earlier member), and which of the devices
    the node reaches earlier members hold. None when more decides it (a claim allocated
    already or shared within the gang, a device several claims may share): such an
    offer is always searched."""
    cache = kind.cache
    parts: list[Hashable] = [member.node, member.prefer]
    for key in member.claims:
        claim = cache.claims.get(key)
        if claim is None or tentative.claim(key) is not None or cache.allocation_of(key):
            return None
        parts.append(
            (claim.namespace, claim.requests, claim.constraints, claim.deleting, claim.problems)
        )
    if len(set(member.claims)) != len(member.claims):
        return None
    reached = kind.reached.get(member.node)
    if reached is None:
        candidates = cache.node_devices(member.node, member.labels).candidates
        shared = any(c.device.allow_multiple_allocations for c in candidates)
        reached = kind.reached[member.node] = (
            None if shared else frozenset(c.device_id for c in candidates)
        )
    if reached is None:
        return None
    parts.append(frozenset(device for device in tentative.held() if device in reached))
    return tuple(parts)


def _refusal(search: PodSearch) -> str:
    """The search's words, searching first."""
    for _ in search:
        return ""
    return search.reason
