"""A required topology level (cache/topology_requirement.py): the whole gang inside one
domain of that node label, or it waits.

- Members already bound fix the domain: the one their nodes are in. Bound members on a
  node without the label, or in two domains, leave no domain the gang can be whole in.
- A node without the label is in no domain, so no member goes there.
- Among the domains that can hold every member (by resources alone, counted over each
  shape's feasible nodes), the choice keeps large domains whole for the large gangs that
  need them: the smallest domain (fewest GPUs) first, then best fit (the least free GPU
  capacity that holds the gang), then by name (DomainChoice lists the others compared).
  Each is tried in turn (a greedy pass inside it, preferred levels first) until one
  places the gang; at most MAX_DOMAINS_TRIED, so a gang that fits nowhere costs a
  bounded search.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from cache.pod import PodInfo
from cache.resources import MILLI_PER_GPU
from policies.domain_demand import DomainDemand
from scheduler.planner.domains import domain_attempts
from scheduler.planner.level_room import LevelRoom, LevelRooms
from scheduler.planner.search import Attempt, GangSearch

# How the fitting domains are ordered (bench/topology_choice.py compares them):
# - "smallest" (the default): the smallest domain (fewest GPUs, busy or not) that holds
#   the gang, then the least free: large domains stay whole for the large gangs;
# - "learnt": first the least learnt demand lost (policies/domain_demand.py), then as
#   "smallest" (measured worse than "smallest" so far: docs/benchmarks.md);
# - "best-fit": the least free capacity that holds the gang (as Kueue's TAS);
# - "first-fit": by name (as a per-domain placement generator).
DomainChoice = Literal["smallest", "learnt", "best-fit", "first-fit"]
# How many fitting domains are tried before the gang is declared to fit none: each try
# is a greedy pass over its members, and resources alone already said they fit.
MAX_DOMAINS_TRIED = 32


@dataclass(slots=True)
class Domain:
    """One value of the required label: its nodes and room."""

    name: str
    # Its nodes some member could go to (feasible for the member's shape), and their
    # free GPU milli.
    nodes: set[str] = field(default_factory=set)
    free_gpu_milli: int = 0
    # GPUs its nodes have, busy or not.
    gpus: int = 0
    # Per shape (by position), how many of its members the domain's feasible nodes take.
    copies: list[int] = field(default_factory=list)


@dataclass(slots=True)
class RequiredDomains:
    """The domains of the gang's required level, as one planning call sees them."""

    key: str
    domains: dict[str, Domain]
    # The domain bound members fix (None: no member bound, or none in a domain known).
    fixed: str | None
    # Why no domain can hold the whole gang whatever the room (bound members split).
    conflict: str | None
    # The GPU milli the members to place ask in all.
    gpu_milli: int
    # Domains that hold every member by resources, in the order they are tried.
    fitting: list[str]
    search: GangSearch

    @property
    def level(self) -> str:
        """The level's short name for messages: "rack" for topology.kubernetes.io/rack."""
        return self.key.rpartition("/")[2]

    def shortfall(self) -> str:
        """What the gang waits for, as its line in waiting messages says it: the free
        GPUs of every node of the level, not only those its members could use."""
        if self.conflict is not None:
            return self.conflict
        needs = f"needs {_gpus(self.gpu_milli)} GPUs" if self.gpu_milli else "needs its members"
        free: dict[str, int] = {}
        for node in self.search.snapshot.nodes.values():
            value = node.labels.get(self.key)
            if value is not None:
                free[value] = free.get(value, 0) + node.free_gpu_milli
        if self.fixed is not None:
            return (
                f"{needs} in {self.key}={self.fixed}, where its bound members run; it has "
                f"{_gpus(free.get(self.fixed, 0))} free"
            )
        if not free:
            return f"{needs} in one {self.key}; no node carries the label {self.key}"
        fullest = max(free.values())
        if self.fitting:
            return (
                f"{needs} in one {self.key}; {len(self.fitting)} {self.level}(s) have the "
                "room but not for every member together with its other constraints"
            )
        return f"{needs} in one {self.key}; the fullest {self.level} has {_gpus(fullest)} free"


def _gpus(milli: int) -> str:
    whole, rest = divmod(max(0, milli), MILLI_PER_GPU)
    return str(whole) if not rest else f"{milli / MILLI_PER_GPU:.2f}"


def required_domains(
    search: GangSearch,
    key: str,
    demand: DomainDemand | None,
    rooms: LevelRooms,
    choice: DomainChoice = "smallest",
) -> RequiredDomains:
    """The domains of `key` with their room for the gang's members (level_room.py: each
    shape's feasible nodes, kept between calls), and the order in which they are tried.
    A shape whose candidates were not collected (bounded mode: they are not, for such a
    gang) is given the feasible nodes of the domains that will be tried."""
    snapshot = search.snapshot
    fixed, conflict = _fixed_domain(search, key)
    slices = search.slices
    slice_key = slices.key if slices is not None else None
    shapes = list(search.shapes.items())
    per_shape: list[LevelRoom] = []
    for signature, shape in shapes:
        memo = search.memo.for_shape(shape.pod.filter_signature(), shape.pod, snapshot.nodes.keys())
        per_shape.append(rooms.room(key, slice_key, signature, snapshot, shape.pod, memo))
    domains: dict[str, Domain] = {}
    for position, room in enumerate(per_shape):
        for value, total in room.domains.items():
            if fixed is not None and value != fixed:
                continue
            domain = domains.get(value)
            if domain is None:
                domain = domains[value] = Domain(value, copies=[0] * len(shapes))
                domain.free_gpu_milli = total.free_gpu_milli
                domain.gpus = total.gpus
            domain.nodes |= total.nodes
            domain.copies[position] = total.copies
    wanted = [len(shape.members) for _, shape in shapes]
    gpu_milli = sum(pod.gpu.total_milli for pod in search.members)
    fitting: list[str] = []
    if conflict is None:
        fitting = [
            d.name
            for d in domains.values()
            if all(have >= need for have, need in zip(d.copies, wanted, strict=True))
        ]
    if slices is not None and fitting:
        # Each slice needs a slice domain of its own with room for its members (counted
        # for the shape with the most members): the full slices of `size`, and the last
        # one, shorter when `size` does not divide the members to place.
        largest = max(range(len(shapes)), key=lambda i: wanted[i])
        per_domain: dict[str, list[int]] = {}
        for (value, _), copies in per_shape[largest].slices.items():
            per_domain.setdefault(value, []).append(copies)
        full, last = divmod(len(search.members), slices.size)
        fitting = [
            name
            for name in fitting
            if _slices_fit(per_domain.get(name, []), slices.size, full, last)
        ]
    holders = sorted(d.free_gpu_milli for d in domains.values())

    def cost(name: str) -> tuple[float, int, int, str]:
        if choice == "first-fit":
            return (0.0, 0, 0, name)
        domain = domains[name]
        free = domain.free_gpu_milli
        if choice == "best-fit":
            return (0.0, 0, free, name)
        if choice == "smallest":
            return (0.0, domain.gpus, free, name)
        lost = demand.lost(key, free, gpu_milli, holders) if demand is not None else 0.0
        return (lost, domain.gpus, free, name)

    fitting.sort(key=cost)
    tried = fitting[:MAX_DOMAINS_TRIED]
    for position, (_, shape) in enumerate(shapes):
        if not shape.candidates and shape.ranking is None:
            nodes = per_shape[position].domains
            shape.candidates = sorted(n for name in tried for n in nodes[name].nodes)
    return RequiredDomains(key, domains, fixed, conflict, gpu_milli, tried, search)


def _slices_fit(copies: list[int], size: int, full: int, last: int) -> bool:
    """Whether slice domains holding `copies` members each have room for `full` slices
    of `size` and one of `last` (0: none): the full slices take whole multiples of
    `size`; the last one fits into another such multiple or into what a domain has left
    over beside its full slices."""
    slots = sum(have // size for have in copies)
    if slots < full:
        return False
    return last == 0 or slots > full or any(have % size >= last for have in copies)


def _fixed_domain(search: GangSearch, key: str) -> tuple[str | None, str | None]:
    """The domain the bound members are in, and why none can be (else None)."""
    nodes = search.snapshot.nodes
    seen: dict[str, str] = {}  # domain -> a bound member there
    for pod in search.gang.bound:
        node = nodes.get(pod.node_name or "")
        if node is None:
            continue  # its node is gone: it fixes nothing
        value = node.labels.get(key)
        if value is None:
            return None, (
                f"needs every member in one {key}, but bound member {pod.key} runs on node "
                f"{pod.node_name}, which has no label {key}"
            )
        seen.setdefault(value, pod.key)
    if len(seen) > 1:
        shown = ", ".join(f"{pod} in {value}" for value, pod in sorted(seen.items())[:3])
        return None, f"needs every member in one {key}, but its bound members are split: {shown}"
    return (next(iter(seen)) if seen else None), None


def required_attempts(
    search: GangSearch, order: Sequence[PodInfo], room: RequiredDomains
) -> Iterator[Attempt]:
    """Attempts each inside one fitting domain, in `room.fitting`'s order: the whole
    gang in one domain of its preferred levels there (domains.py), then best score,
    then tightest node."""
    preferred = search.preferred_levels()
    for name in room.fitting:
        allowed = frozenset(room.domains[name].nodes)
        if preferred and len(order) > 1:
            yield from domain_attempts(search, order, preferred, allowed)
        picks = search.picks
        yield search.greedy(f"required-{room.level}", order, allowed, picks.best_scored)
        yield search.greedy(f"required-{room.level}-tightest", order, allowed, picks.tightest)
