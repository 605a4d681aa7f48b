"""Allocating a pod's ResourceClaims on one node, with kube-scheduler's semantics
(k8s.io/dynamic-resource-allocation/structured, the "incubating" allocator that 1.36
uses by default), enumerating every allocation lazily so that a gang's planner can
revisit an earlier member's choice (gang.py).

The order is kube-scheduler's, so the first allocation is the one it would choose:
claims in the pod's order, requests in the claim's order, a firstAvailable request's
sub-requests in their order (the first that can be satisfied), and devices by pool
(driver, pool), slice name, then as listed, each request's devices as combinations in
that order (never two orders of one set). Every later allocation is the next in that
search: other devices of the same sub-request first, then the next sub-request.

A device fits a request when: it is in a complete, valid pool the node reaches (per
device with perDeviceNodeSelection); this scheduler supports it (`Device.refusal`);
the class's selectors and the request's selectors match (CEL); every NoSchedule or
NoExecute taint is tolerated by the request; and it is free: no allocation, hold or
keep takes it (DraCache: a device kept for a preemptor is taken whole; a what-if view,
cache/dra/view.py, releases its victims' claims), no earlier member of the gang took it
(Tentative), and no other request of this pod took it. With adminAccess (only in a
namespace labelled `resource.kubernetes.io/admin-access: "true"`) a device in use may be
taken, but not twice by one claim. Constraints (matchAttribute, distinctAttribute) hold over the
devices of the requests they name (all when they name none).

Bounded: one search (one pod, one node) tries at most MAX_SEARCH_STEPS devices; a pod
may ask for at most MAX_DEVICES_PER_POD new devices, a claim for at most 32
(AllocationResultsMaxSize).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from cache.dra.claims import (
    ALL,
    Allocation,
    Claim,
    Constraint,
    DeviceResult,
    ExactRequest,
    Request,
)
from cache.dra.classes import DeviceClass
from cache.dra.fields import BLOCKING_EFFECTS, MAX_RESERVED_FOR, MAX_RESULTS, Attribute
from cache.dra.nodes import terms_reach
from cache.dra.slices import Device, DeviceId, PoolId
from cache.dra.store import Candidate, NodeDevices
from cache.dra.topology import DeviceTopology, device_topology
from cache.dra.usage import Counters, DeviceUse, capacity_overrun, draw, overdrawn
from cache.dra.view import DeviceView
from policies.dra.capacity import Consumed, consumption
from policies.dra.gang import ClaimChoice, GangMember, PodAllocation, Tentative
from policies.dra.partitions import by_remainder
from policies.dra.results import Picked, build_allocation, share_id
from policies.dra.selection import MAX_RESULTS_PER_DEVICE, SelectorError, Selectors
from policies.dra.topology import preferred_set

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
# Devices one search tries (each device considered for one slot of one request counts
# once) before it stops: kube-scheduler bounds the same search with a filter timeout.
MAX_SEARCH_STEPS = 20_000
# New devices one pod's claims may ask for together (each claim at most 32).
MAX_DEVICES_PER_POD = 256
PREFIX = "cannot allocate all claims: "


@dataclass(slots=True)
class _Slot:
    """One request (or sub-request) of a claim being allocated, resolved."""

    request: str  # the request's name
    sub: str  # the sub-request's name ("" for an `exactly` request)
    exact: ExactRequest
    device_class: DeviceClass
    path: str = ""  # the request's field path ("spec.devices.requests[0].exactly")
    fitting: list[Candidate] | None = None  # the devices that fit, free or not
    # What one allocation of each fitting device consumes (consumable capacity).
    consumed: dict[DeviceId, Consumed] = field(default_factory=dict)
    # Why devices that match the selectors cannot serve the capacity request.
    capacity_refusals: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.request}/{self.sub}" if self.sub else self.request


@dataclass(slots=True)
class _Todo:
    """A claim this pod allocates now: its requests as lists of slot choices (one
    slot for `exactly`, one per sub-request for firstAvailable)."""

    claim: Claim
    requests: list[list[_Slot]]


class _Refused(Exception):
    pass


class StepMeter:
    """Devices several searches may try together (a gang search revisiting earlier
    members' choices), beside each search's own MAX_SEARCH_STEPS."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit


class ClaimAllocator:
    """Allocations of pods' claims against one DraCache, or a what-if view of one
    (cache/dra/view.py), and the devices a gang's earlier members took.
    `namespace_labels`: each namespace's labels (admin access)."""

    __slots__ = ("cache", "max_steps", "meter", "namespace_labels", "selectors")

    def __init__(
        self,
        cache: DeviceView,
        namespace_labels: Mapping[str, Mapping[str, str]],
        selectors: Selectors | None = None,
        max_steps: int = MAX_SEARCH_STEPS,
        meter: StepMeter | None = None,
    ) -> None:
        self.cache = cache
        self.namespace_labels = namespace_labels
        self.selectors = selectors or Selectors()
        self.max_steps = max_steps
        # Shared by every search of this allocator (None: each search's bound alone).
        self.meter = meter

    def allocate(
        self, member: GangMember, tentative: Tentative | None = None
    ) -> PodAllocation | str:
        """kube-scheduler's allocation (the first alternative), or why there is none."""
        search = PodSearch(self, member, tentative or Tentative())
        for found in search:
            return found
        return search.reason

    def alternatives(self, member: GangMember, tentative: Tentative) -> Iterator[PodAllocation]:
        return iter(PodSearch(self, member, tentative))

    def why_none(self, member: GangMember, tentative: Tentative) -> str:
        search = PodSearch(self, member, tentative)
        for _ in search:
            return ""
        return search.reason


@dataclass(frozen=True, slots=True)
class DeviceDemand:
    """The least one pod's claims take on its node, whatever the allocation:
    `least` new devices for each claim it allocates (claim key -> count), among the
    `usable` ones (free devices that fit one of its requests). `counted`: False when
    the counts say nothing (a request with admin access, or a device several claims
    may share)."""

    least: tuple[tuple[str, int], ...]
    usable: frozenset[DeviceId]
    counted: bool = True


class PodSearch:
    """The allocations of one pod's claims on one node, lazily, in kube-scheduler's
    order. `reason` says why there is none once the iteration found none (`explain`
    False: left empty, for a search whose words nobody reads)."""

    def __init__(
        self,
        allocator: ClaimAllocator,
        member: GangMember,
        tentative: Tentative,
        explain: bool = True,
    ) -> None:
        self.allocator = allocator
        self.member = member
        self.tentative = tentative
        self.explain = explain
        self.reason = ""
        self.steps = 0
        self._node: NodeDevices = allocator.cache.node_devices(member.node, member.labels)
        self._reused: list[ClaimChoice] = []
        self._todo: list[_Todo] = []
        # Search state.
        self._chosen: dict[DeviceId, set[int]] = {}  # device -> claims (indices) taking it
        # Shares this search took of devices that allow multiple allocations.
        self._shared: dict[DeviceId, list[Consumed]] = {}
        self._picked: list[list[Picked]] = []
        self._subs: list[dict[str, str]] = []
        self._values: list[list[list[Attribute]]] = []  # per claim, per constraint
        self._found = 0

    # --- preparation -------------------------------------------------------------------
    def _prepare(self) -> None:
        cache = self.allocator.cache
        seen: set[str] = set()
        total = 0
        for key in self.member.claims:
            if key in seen:
                continue
            seen.add(key)
            claim = cache.claim(key)
            if claim is None:
                raise _Refused(f"claim {key} does not exist")
            if claim.deleting:
                raise _Refused(f"claim {key} is being deleted")
            existing = self.tentative.claim(key) or cache.allocation_of(key)
            if existing is not None:
                self._reuse(claim, existing)
                continue
            if claim.problems:
                raise _Refused(claim.problems[0])
            todo = _Todo(claim, [self._slots(claim, r.name, r) for r in claim.requests])
            least = sum(
                min(s.exact.count if s.exact.mode != ALL else 1 for s in r) for r in todo.requests
            )
            if least > MAX_RESULTS:
                raise _Refused(
                    f"claim {key}: number of requested devices {least} exceeds the claim "
                    f"limit of {MAX_RESULTS}"
                )
            total += least
            self._todo.append(todo)
        if total > MAX_DEVICES_PER_POD:
            raise _Refused(
                f"the pod's claims ask for {total} devices, more than {MAX_DEVICES_PER_POD}"
            )

    def _reuse(self, claim: Claim, allocation: Allocation) -> None:
        selector = allocation.node_selector
        if selector is not None and not terms_reach(selector, self.member.node, self.member.labels):
            raise _Refused(
                f"claim {claim.key} is allocated on devices node {self.member.node} cannot use"
            )
        consumers = {c.uid for c in claim.reserved_for}
        if len(consumers) >= MAX_RESERVED_FOR and self.member.uid not in consumers:
            raise _Refused(
                f"claim {claim.key} is reserved for {MAX_RESERVED_FOR} consumers already"
            )
        self._reused.append(ClaimChoice(claim.key, allocation, new=False))

    def _slots(self, claim: Claim, name: str, request: Request) -> list[_Slot]:
        number = next(i for i, r in enumerate(claim.requests) if r.name == name)
        pairs: list[tuple[str, ExactRequest, str]] = (
            [("", request.exactly, f"spec.devices.requests[{number}].exactly")]
            if request.exactly is not None
            else [
                (sub.name, sub, f"spec.devices.requests[{number}].firstAvailable[{i}]")
                for i, sub in enumerate(request.first_available)
            ]
        )
        slots = []
        for sub, exact, path in pairs:
            label = f"{name}/{sub}" if sub else name
            where = f"claim {claim.key} request {label}"
            if exact.refusal:
                raise _Refused(f"{where}: {exact.refusal}")
            if exact.admin_access:
                labels = self.allocator.namespace_labels.get(claim.namespace, {})
                if labels.get(ADMIN_ACCESS_LABEL) != "true":
                    raise _Refused(
                        f"{where}: adminAccess requires the label {ADMIN_ACCESS_LABEL}=true "
                        f"on namespace {claim.namespace}"
                    )
            device_class = self.allocator.cache.classes.get(exact.device_class)
            if device_class is None:
                raise _Refused(f"{where}: device class {exact.device_class} does not exist")
            if device_class.problems:
                raise _Refused(f"{where}: {device_class.problems[0]}")
            slots.append(_Slot(name, sub, exact, device_class, path))
        return slots

    # --- what fits ---------------------------------------------------------------------
    def _fitting(self, todo: _Todo, slot: _Slot) -> list[Candidate]:
        """The node's devices that fit the slot, free or not (selectors, taints,
        support), computed once per search."""
        if slot.fitting is not None:
            return slot.fitting
        selectors = self.allocator.selectors
        class_who = f"class {slot.device_class.name}"
        claim_who = f"claim {todo.claim.key} request {slot.label}"
        fitting = []
        for candidate in self._node.candidates:
            device = candidate.device
            if device.refusal:
                continue
            driver = candidate.device_id.driver
            if not selectors.match(slot.device_class.selectors, class_who, driver, device):
                continue
            if not selectors.match(slot.exact.selectors, claim_who, driver, device):
                continue
            if _blocked_by_taint(candidate, slot.exact):
                continue
            consumed = _consumption(device, slot)
            if isinstance(consumed, str):
                slot.capacity_refusals.append(consumed)
                continue
            slot.consumed[candidate.device_id] = consumed
            fitting.append(candidate)
        # Partitions: the one leaving the largest useful remainder first (partitions.py).
        fitting = by_remainder(fitting, self.allocator.cache, self.tentative.devices())
        slot.fitting = fitting
        return fitting

    def _taken(self, device: DeviceId) -> bool:
        """Whether anything uses the device (whole or a share)."""
        return bool(
            self.allocator.cache.holder(device)
            or self.tentative.holder(device)
            or self._chosen.get(device)
            or self._shared.get(device)
        )

    def _use(self, device: DeviceId) -> DeviceUse:
        """What the cache, earlier members and this search take of a device."""
        use = self.allocator.cache.use(device)
        use.add(self.tentative.use(device))
        if self._chosen.get(device):
            use.whole = True
        for consumed in self._shared.get(device, ()):
            use.add(DeviceUse(shares=1, consumed=dict(consumed)))
        return use

    def _room(self, slot: _Slot, candidate: Candidate) -> str:
        """Why the device cannot take one more allocation for the slot now ("" when it
        can): taken whole, capacity left short, or counters left short."""
        device = candidate.device
        device_id = candidate.device_id
        use: DeviceUse | None = None
        if device.allow_multiple_allocations:
            use = self._use(device_id)
            if use.whole:
                return "in use"
            overrun = capacity_overrun(device, use.consumed, dict(slot.consumed[device_id]))
            if overrun:
                return overrun
        if device.consumes_counters and not (use is not None and use.in_use):
            return self._counters_short(candidate)
        return ""

    def _counters_short(self, candidate: Candidate) -> str:
        """Why the pool's counter sets cannot also give what the device draws ("" when
        they can): devices in use anywhere (cache), by earlier members, by this search."""
        cache = self.allocator.cache
        pool_id = PoolId(candidate.device_id.driver, candidate.device_id.pool)
        pool = cache.pool(pool_id)
        if pool is None:
            return "its pool is gone"
        drawn, counted = cache.counters_drawn(pool_id)
        total: Counters = {name: dict(c) for name, c in drawn.items()}
        extra = {candidate.device_id} | self.tentative.devices() | set(self._chosen)
        extra |= set(self._shared)
        for device_id in extra:
            if (device_id.driver, device_id.pool) != pool_id or device_id.device in counted:
                continue
            device = pool.device(device_id.device)
            if device is not None:
                draw(total, device)
        why = overdrawn(pool.counters, total)
        return f"pool {pool_id}: {why}" if why else ""

    # --- the search ----------------------------------------------------------------------
    def __iter__(self) -> Iterator[PodAllocation]:
        try:
            self._prepare()
            for _ in self._claims(0):
                self._found += 1
                yield self._result()
        except _Refused as refused:
            self.reason = PREFIX + str(refused)
            return
        except SelectorError as error:
            self.reason = PREFIX + str(error)
            return
        if not self._found and self.explain:
            self.reason = PREFIX + self._explain()

    def reason_later(self) -> Callable[[], str]:
        """After an iteration (with `explain` False) that found nothing: what words
        the reason when asked, as the iteration would have then (against a copy of the
        devices the gang's members held at its end). Most refusals are never read."""
        if self.reason or self._found:
            said = self.reason
            return lambda: said
        self.tentative = self.tentative.copy()
        worded: list[str] = []

        def word() -> str:
            if not worded:
                worded.append(PREFIX + self._explain())
            return worded[0]

        return word

    # --- the least any allocation takes --------------------------------------------------
    def demand(self, allocated: Collection[str] = ()) -> DeviceDemand | None:
        """What every allocation of the pod's claims must take, read from the claims
        and the free devices without searching (None: the claims cannot be allocated
        here at all). `allocated`: claim keys another pod allocates first, left out as
        the search would reuse them."""
        self._todo.clear()
        self._reused.clear()
        member = self.member
        kept = dataclasses.replace(
            member, claims=tuple(k for k in member.claims if k not in allocated)
        )
        self.member = kept
        try:
            self._prepare()
        except (_Refused, SelectorError):
            return None
        finally:
            self.member = member
        least: list[tuple[str, int]] = []
        usable: set[DeviceId] = set()
        counted = True
        try:
            for todo in self._todo:
                fewest = 0
                for slots in todo.requests:
                    options = []
                    for slot in slots:
                        fitting = self._fitting(todo, slot)
                        if slot.exact.admin_access:
                            counted = False  # takes devices in use, shares them
                        for candidate in fitting:
                            if candidate.device.allow_multiple_allocations:
                                counted = False
                            if not self._taken(candidate.device_id):
                                usable.add(candidate.device_id)
                        options.append(len(fitting) if slot.exact.mode == ALL else slot.exact.count)
                    fewest += min(options, default=0)
                least.append((todo.claim.key, fewest))
        except SelectorError:
            # The search fails on it only once it gets there (a firstAvailable
            # sub-request after one that fits may never be read): no count holds.
            counted = False
        finally:
            self._todo.clear()
            self._reused.clear()
        return DeviceDemand(tuple(least), frozenset(usable), counted)

    def _claims(self, index: int) -> Iterator[None]:
        if index == len(self._todo):
            yield None
            return
        todo = self._todo[index]
        self._picked.append([])
        self._subs.append({})
        self._values.append([[] for _ in todo.claim.constraints])
        yield from self._requests(index, 0)
        self._picked.pop()
        self._subs.pop()
        self._values.pop()

    def _requests(self, index: int, position: int) -> Iterator[None]:
        todo = self._todo[index]
        if position == len(todo.requests):
            yield from self._claims(index + 1)
            return
        for slot in todo.requests[position]:
            if len(self._picked[index]) + max(slot.exact.count, 1) > MAX_RESULTS:
                continue
            if slot.sub:
                self._subs[index][slot.request] = slot.sub
            fitting = self._fitting(todo, slot)
            if slot.exact.mode == ALL:
                yield from self._all(index, position, slot, fitting)
            else:
                ordered = self._preferred(slot, fitting)
                yield from self._pick(index, position, slot, ordered, 0, slot.exact.count)
            self._subs[index].pop(slot.request, None)

    def _preferred(self, slot: _Slot, fitting: list[Candidate]) -> list[Candidate]:
        """`fitting` with the devices the member prefers first (GangMember.prefer: the
        shared GPUs its node choice took), else with the free devices that join best
        (policies/dra/topology.py) first: to each other, to the devices this pod took
        for its earlier requests, and to those the gang's earlier members took on this
        node. Only the order
        changes, so every allocation is still found; without topology facts the order
        is kube-scheduler's."""
        if self.member.prefer:
            order = {device: i for i, device in enumerate(self.member.prefer)}
            first = sorted(
                (c for c in fitting if c.device_id in order), key=lambda c: order[c.device_id]
            )
            if first:
                return first + [c for c in fitting if c.device_id not in order]
        admin = bool(slot.exact.admin_access)
        free = [c for c in fitting if admin or not self._taken(c.device_id)]
        if len(free) <= slot.exact.count:
            return fitting
        labels = self.member.labels
        tops = tuple(device_topology(c.device_id.driver, c.device, labels) for c in free)
        chosen = preferred_set(tops, slot.exact.count, self._anchors())
        if chosen is None or chosen == tuple(range(slot.exact.count)):
            return fitting
        first = [free[i] for i in chosen]
        firsts = {c.device_id for c in first}
        return first + [c for c in fitting if c.device_id not in firsts]

    def _anchors(self) -> tuple[DeviceTopology, ...]:
        """Where the devices already taken for this pod, and by the gang's earlier
        members on this node, sit (only those with a known place)."""
        labels = self.member.labels
        found = [
            device_topology(p.result.driver, p.device, labels)
            for picked in self._picked
            for p in picked
        ]
        held = self.tentative.held()
        if held:
            found.extend(
                device_topology(c.device_id.driver, c.device, labels)
                for c in self._node.candidates
                if c.device_id in held
            )
        return tuple(t for t in found if t.known)

    def _all(
        self, index: int, position: int, slot: _Slot, fitting: list[Candidate]
    ) -> Iterator[None]:
        if self._node.unusable:
            # "All" cannot be known while a pool the node reaches is incomplete or invalid.
            return
        # A device whose capacity left cannot serve the request is not part of "all"
        # (kube-scheduler leaves it out when it gathers the devices).
        fitting = [
            c
            for c in fitting
            if not c.device.allow_multiple_allocations
            or not capacity_overrun(
                c.device, self._use(c.device_id).consumed, dict(slot.consumed[c.device_id])
            )
        ]
        if not fitting or len(self._picked[index]) + len(fitting) > MAX_RESULTS:
            return
        added = 0
        for candidate in fitting:
            if not self._add(index, slot, candidate):
                break
            added += 1
        if added == len(fitting):
            yield from self._requests(index, position + 1)
        for candidate in reversed(fitting[:added]):
            self._remove(index, slot, candidate)

    def _pick(
        self,
        index: int,
        position: int,
        slot: _Slot,
        fitting: list[Candidate],
        start: int,
        left: int,
    ) -> Iterator[None]:
        if left == 0:
            yield from self._requests(index, position + 1)
            return
        for at in range(start, len(fitting) - left + 1):
            candidate = fitting[at]
            if not self._add(index, slot, candidate):
                continue
            yield from self._pick(index, position, slot, fitting, at + 1, left - 1)
            self._remove(index, slot, candidate)

    def _add(self, index: int, slot: _Slot, candidate: Candidate) -> bool:
        self.steps += 1
        if self.steps > self.allocator.max_steps:
            raise _Refused(
                f"device search bound reached ({self.allocator.max_steps} devices tried on "
                f"node {self.member.node})"
            )
        meter = self.allocator.meter
        if meter is not None:
            meter.left -= 1
            if meter.left < 0:
                raise _Refused(
                    f"device search bound of the gang reached ({meter.limit} devices tried)"
                )
        device_id = candidate.device_id
        admin = bool(slot.exact.admin_access)
        multiple = candidate.device.allow_multiple_allocations
        if admin:
            if not multiple and index in self._chosen.get(device_id, ()):
                return False
        elif not multiple and self._taken(device_id):
            return False
        if (multiple or candidate.device.consumes_counters) and self._room(slot, candidate):
            return False
        constraints = self._todo[index].claim.constraints
        values = self._values[index]
        pending: list[int] = []
        for number, constraint in enumerate(constraints):
            if not constraint.applies(slot.request, slot.sub):
                continue
            value = candidate.device.attributes.get(constraint.attribute)
            if value is None or not _admits(constraint, values[number], value):
                for undo in pending:
                    values[undo].pop()
                return False
            values[number].append(value)
            pending.append(number)
        consumed: Consumed = ()
        share = ""
        if multiple:
            # One share: a shareID and what it consumes, as kube-scheduler records it.
            consumed = slot.consumed[device_id]
            self._shared.setdefault(device_id, []).append(consumed)
            claim = self._todo[index].claim
            share = share_id(claim, len(self._picked[index]), device_id)
        else:
            self._chosen.setdefault(device_id, set()).add(index)
        self._picked[index].append(
            Picked(
                DeviceResult(
                    request=slot.label,
                    driver=device_id.driver,
                    pool=device_id.pool,
                    device=device_id.device,
                    admin_access=admin,
                    share_id=share,
                    tolerations=slot.exact.tolerations,
                    consumed=consumed,
                ),
                candidate.device,
                candidate.slice,
                slot.device_class,
            )
        )
        return True

    def _remove(self, index: int, slot: _Slot, candidate: Candidate) -> None:
        constraints = self._todo[index].claim.constraints
        for number, constraint in enumerate(constraints):
            if constraint.applies(slot.request, slot.sub):
                self._values[index][number].pop()
        picked = self._picked[index].pop()
        device_id = candidate.device_id
        if picked.result.share_id:
            shares = self._shared[device_id]
            shares.pop()
            if not shares:
                del self._shared[device_id]
            return
        holders = self._chosen[device_id]
        holders.discard(index)
        if not holders:
            del self._chosen[device_id]

    def _result(self) -> PodAllocation:
        choices = list(self._reused)
        for index, todo in enumerate(self._todo):
            allocation = build_allocation(
                todo.claim, self._picked[index], dict(self._subs[index]), self.member.node
            )
            choices.append(ClaimChoice(todo.claim.key, allocation, new=True))
        return PodAllocation(tuple(choices))

    # --- why nothing fits --------------------------------------------------------------
    def _explain(self) -> str:
        """The first request that alone cannot get its devices, in kube-scheduler's
        words; else the claims' constraints or their combined demand."""
        node = self._node
        total = len(node.candidates)
        taken = sum(1 for c in node.candidates if self._taken(c.device_id))
        pools = "".join(f"; {why}" for why in node.unusable)
        for todo in self._todo:
            for slots in todo.requests:
                shortages = [self._shortage(todo, slot, total, taken) for slot in slots]
                if all(shortages):
                    return shortages[0] + pools
        names = ", ".join(todo.claim.key for todo in self._todo)
        constraints = [
            f"{c.kind} {c.attribute}" for todo in self._todo for c in todo.claim.constraints
        ]
        what = f" and constraints ({', '.join(constraints)})" if constraints else ""
        return (
            f"no combination of free devices on node {self.member.node} "
            f"satisfies the requests{what} of claims {names} together"
        ) + pools

    def _shortage(self, todo: _Todo, slot: _Slot, total: int, taken: int) -> str:
        fitting = self._fitting(todo, slot)
        free = []
        short: list[str] = []
        for candidate in fitting:
            multiple = candidate.device.allow_multiple_allocations
            if not slot.exact.admin_access and not multiple and self._taken(candidate.device_id):
                continue
            room = self._room(slot, candidate)
            if room:
                if room != "in use":
                    short.append(room)
                continue
            free.append(candidate)
        who = f"claim {todo.claim.key} request {slot.label}"
        tainted = sum(1 for c in self._node.candidates if _blocked_by_taint(c, slot.exact))
        refused = sum(1 for c in self._node.candidates if c.device.refusal)
        extra = "".join(
            (
                f", {tainted} with a taint not tolerated" if tainted else "",
                f", {refused} not supported" if refused else "",
                f", {len(slot.capacity_refusals)} outside the capacity request's policy"
                if slot.capacity_refusals
                else "",
                f", {len(short)} without room left ({short[0]})" if short else "",
            )
        )
        counts = f"({total} devices, {taken} in use{extra})"
        cls = slot.device_class.name
        if not fitting and slot.capacity_refusals:
            return f"{who}: {slot.capacity_refusals[0]} {counts}"
        if slot.exact.mode == ALL:
            if self._node.unusable:
                return f"{who}: asks for all devices of class {cls}, but a pool is unusable"
            if not fitting:
                return f"{who}: no device of class {cls} matches {counts}"
            if len(free) < len(fitting):
                return (
                    f"{who}: asks for all {len(fitting)} devices of class {cls}, "
                    f"{len(fitting) - len(free)} of them in use {counts}"
                )
            return ""
        if len(free) < slot.exact.count:
            return f"{who}: {len(free)} of {slot.exact.count} devices of class {cls} match {counts}"
        return ""


# Entries a device record's memo may hold with consumption results: its selector
# results' bound plus 64 distinct capacity requests.
MAX_MEMO_PER_DEVICE = MAX_RESULTS_PER_DEVICE + 64


def _consumption(device: Device, slot: _Slot) -> Consumed | str:
    """What one allocation of the device consumes for the slot's capacity request (or
    why it cannot), remembered on the device record: 5,000 nodes of 8 devices are asked
    each cycle, and a record is replaced whenever its slice changes."""
    key = ("consumption", slot.exact.capacity, slot.path)
    memo = device.memo
    known = memo.get(key)
    if known is not None:
        return known  # type: ignore[no-any-return]
    found = consumption(device, dict(slot.exact.capacity), f"{slot.path}.capacity")
    if len(memo) < MAX_MEMO_PER_DEVICE:
        memo[key] = found
    return found


def _admits(constraint: Constraint, values: Sequence[Attribute], value: Attribute) -> bool:
    if constraint.kind == "matchAttribute":
        return not values or values[0] == value
    return value not in values


def _blocked_by_taint(candidate: Candidate, request: ExactRequest) -> bool:
    for taint in candidate.device.taints:
        if taint.effect in BLOCKING_EFFECTS and not any(
            toleration.tolerates(taint) for toleration in request.tolerations
        ):
            return True
    return False
