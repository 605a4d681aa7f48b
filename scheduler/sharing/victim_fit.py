"""Answering the victim search's question fast: would the gang fit with these gangs gone?

`policies.preemption.choose_victims` asks `fits(keys)` for victim sets in cost order;
the straightforward answer plans the gang on a copy of the snapshot without those
gangs' pods. At 5,000 nodes that costs seconds per search (docs/benchmarks.md,
"Preemption"): copying every node into a new snapshot, a fresh planner ranking every
node, and sets that free nothing useful planned one by one. Here the same answers
come cheaper:

- `WhatIfSnapshot` is one copy of the core's snapshot kept for the scheduler's life
  and caught up with the nodes changed since the last search (as the cache updates a
  snapshot), with a planner of its own whose rankings catch up the same way. A search
  re-makes only the nodes its victims run on, and puts them back when it is over.
  Its node generations are its own counter's, always increasing, so that the
  planner's per-node memos never mistake one node state for another.
- `RoomBound`: before planning a set, an upper bound on how many members could be
  placed once it is gone, from resources alone (pod slots, cpu, memory, GPU milli:
  each member takes at least the smallest request among the members in each, and
  ResourceFit and GpuFit refuse a node short of it). Below the members the gang
  needs, the planner would refuse too: no planning pass, and the search does not
  count it against its budget (`VictimFit.refuses`). The bound ignores every
  other filter and the devices' layout, so it can only say "no" when the planner
  would. It also gives the fewest GPU milli any set must free (`gpu_floor`), from
  which reclaim's search starts.
- A set whose gangs hold many pods (in practice the search's first question: every
  candidate at once) is answered with a witness when one fits: a few of its gangs,
  those holding the most GPUs, whose removal lets the gang be planned. The search
  already takes fitting to be monotone (it refuses to preempt when every candidate
  gone would not make room), so a superset of a set that fits fits. When no witness
  fits, the whole set is planned as before. Every other set is planned, or refused
  by the bound, and the set finally chosen is always planned for real.

The planning passes are the ones the straightforward search makes (same planner code,
same what-if node contents, same quota check), so the decisions are the same as long
as fitting is monotone, which the search assumes anyway;
tests/scheduler/test_victim_fit.py compares the two on random clusters.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from cache import resources as res
from cache.cluster import ClusterCache
from cache.dra.store import DraCache
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from cache.volumes import VolumeCache
from policies.filters.gpu_fit import GpuFit
from policies.filters.resource_fit import DEFAULT_MAX_PODS, ResourceFit
from policies.profile import Profile
from scheduler.gangs.gang import Gang
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan
from scheduler.planner.volume_claims import plan_with_claims
from scheduler.sharing.quotas import within_quota

# A set whose pods run on more nodes than this is answered with a witness first:
# re-making thousands of nodes costs more than a few small planning passes.
WITNESS_NODES = 64
# How many witnesses are tried (each with twice the room of the last) before the
# whole set is planned.
WITNESS_TRIES = 3


class WhatIfSnapshot:
    """The core's snapshot as it would be without some pods, kept between searches."""

    def __init__(self, cache: ClusterCache, profile: Profile) -> None:
        self.cache = cache
        self.view = Snapshot()
        self.planner = Planner(profile, explain=False)
        self._base: Snapshot | None = None
        self._seen = -1  # the base's generation last caught up with
        self._generations: Iterator[int] = itertools.count(1)
        self._changed: set[str] = set()  # nodes re-made without some pods

    def sync(self, base: Snapshot) -> None:
        """Catch up with `base` (the core's snapshot, just updated): nodes changed
        since the last search, and those the last search re-made, as `base` has them."""
        if base is not self._base or not base.remembers(self._seen):
            self.view = Snapshot()
            self._base, self._changed = base, set()
            names: Iterable[str] = list(base.nodes)
        else:
            names = self._changed.union(base.changed_since(self._seen))
        for name in names:
            node = base.nodes.get(name)
            if node is None:
                if name in self.view.nodes:
                    self.view.remove(name, self._next())
            else:
                self._put(node, base.pods.on_node.get(name, ()))
        self._changed = set()
        self._seen = base.generation
        self.view.pods.namespace_labels = base.pods.namespace_labels

    def without(self, pods: Iterable[PodInfo]) -> Snapshot:
        """The view with `pods` gone (and every pod taken away before put back)."""
        assert self._base is not None, "sync first"
        base = self._base
        by_node: dict[str, list[PodInfo]] = {}
        for pod in pods:
            if pod.node_name in base.nodes:
                by_node.setdefault(pod.node_name, []).append(pod)
        # `_changed` always covers every node re-made here, even if this is cut short
        # by an error, so that the next `sync` puts them all back.
        for name in self._changed - by_node.keys():
            self._put(base.nodes[name], base.pods.on_node.get(name, ()))
            self._changed.discard(name)
        for name, gone in by_node.items():
            self._changed.add(name)
            node = base.nodes[name].clone()
            leaving = {pod.uid for pod in gone}
            for pod in gone:
                shares = self.cache.charged_shares(pod.uid) or ()
                node.discharge(pod.requests, shares, pod.host_ports)
            staying = tuple(p for p in base.pods.on_node.get(name, ()) if p.uid not in leaving)
            self._put(node, staying, cloned=True)
        return self.view

    def _put(self, node: NodeInfo, pods: tuple[PodInfo, ...], cloned: bool = False) -> None:
        copy = node if cloned else node.clone()
        copy.generation = self._next()
        self.view.put(copy, pods)
        self.view.generation = copy.generation

    def _next(self) -> int:
        return next(self._generations)


# --- the resource bound ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Freed:
    """What a set of pods gives back on one node."""

    pods: int = 0
    cpu: int = 0
    memory: int = 0
    gpu_milli: int = 0

    def plus(self, other: _Freed) -> _Freed:
        return _Freed(
            self.pods + other.pods,
            self.cpu + other.cpu,
            self.memory + other.memory,
            self.gpu_milli + other.gpu_milli,
        )


class RoomBound:
    """At most how many of the gang's members fit once some pods are gone, from
    resources alone. None of it holds unless the profile filters with ResourceFit and
    GpuFit (`applies`)."""

    def __init__(self, gang: Gang, base: Snapshot, profile: Profile) -> None:
        members = gang.pending
        self.applies = bool(members) and _filters_resources(profile)
        self.needed = max(gang.needed, 1)
        self.cpu = min((p.requests.get(res.CPU, 0) for p in members), default=0)
        self.memory = min((p.requests.get(res.MEMORY, 0) for p in members), default=0)
        self.gpu = min((p.gpu.total_milli if p.gpu.count else 0 for p in members), default=0)
        self.base = base
        # node name -> (pod slots, cpu, memory, GPU milli) free in the base snapshot
        self._free: dict[str, tuple[int, int, int, int]] = {}
        self._members: dict[str, int] = {}  # node name -> members_on with nothing freed
        # The fewest GPU milli a set must free to reach `needed` (0: no such floor).
        self.gpu_floor = 0
        self.total = self._base_total() if self.applies else 0

    def _base_total(self) -> int:
        # Only nodes with some room in the scarcest requested dimension can count; the
        # snapshot's free-capacity index lists those (a superset: one device's worth).
        names: Iterable[str]
        if self.gpu:
            names = list(self.base.candidates(1, 1, 0, tight=True))
            # Each member takes `gpu` milli on one node, so the members that fit number
            # at most (GPU milli free + GPU milli freed) / `gpu`: a set freeing less
            # than this floor is refused by the bound whatever nodes it frees.
            free = sum(self._free_on(name)[3] for name in names)
            self.gpu_floor = max(0, self.needed * self.gpu - free)
        elif self.cpu:
            names = self.base.candidates(0, 0, self.cpu, tight=True)
        else:
            names = self.base.nodes
        return sum(self.base_members_on(name) for name in names)

    def _free_on(self, name: str) -> tuple[int, int, int, int]:
        free = self._free.get(name)
        if free is None:
            node = self.base.nodes[name]
            allocatable, requested = node.allocatable, node.requested
            free = self._free[name] = (
                allocatable.get(res.PODS, DEFAULT_MAX_PODS) - requested.get(res.PODS, 0),
                allocatable.get(res.CPU, 0) - requested.get(res.CPU, 0),
                allocatable.get(res.MEMORY, 0) - requested.get(res.MEMORY, 0),
                node.free_gpu_milli,
            )
        return free

    def members_on(self, name: str, freed: _Freed) -> int:
        """Members that could fit on node `name` given `freed` back, at most."""
        slots, cpu, memory, gpu = self._free_on(name)
        count = max(0, slots + freed.pods)
        if self.cpu > 0:
            count = min(count, max(0, cpu + freed.cpu) // self.cpu)
        if self.memory > 0:
            count = min(count, max(0, memory + freed.memory) // self.memory)
        if self.gpu > 0:
            count = min(count, (gpu + freed.gpu_milli) // self.gpu)
        return count

    def base_members_on(self, name: str) -> int:
        known = self._members.get(name)
        if known is None:
            known = self._members[name] = self.members_on(name, _NOTHING)
        return known

    def with_freed(self, freed: Mapping[str, _Freed]) -> int:
        """The bound with `freed` given back on those nodes."""
        total = self.total
        for name, back in freed.items():
            if name in self.base.nodes:
                total += self.members_on(name, back) - self.base_members_on(name)
        return total


_NOTHING = _Freed()


def _filters_resources(profile: Profile) -> bool:
    kinds = {type(f) for f in profile.filters}
    return ResourceFit in kinds and GpuFit in kinds


def freed_by(pods: Iterable[PodInfo], cache: ClusterCache) -> dict[str, _Freed]:
    """Per node, what the pods give back when they go (as the what-if discharges)."""
    freed: dict[str, _Freed] = {}
    for pod in pods:
        shares = cache.charged_shares(pod.uid) or ()
        back = _Freed(
            1,
            pod.requests.get(res.CPU, 0),
            pod.requests.get(res.MEMORY, 0),
            sum(milli for _, milli in shares),
        )
        old = freed.get(pod.node_name)
        freed[pod.node_name] = back if old is None else old.plus(back)
    return freed


def _merge(into: dict[str, _Freed], more: Mapping[str, _Freed]) -> None:
    for name, back in more.items():
        old = into.get(name)
        into[name] = back if old is None else old.plus(back)


# --- the question the search asks --------------------------------------------------------------
@dataclass
class VictimFit:
    """`fits(keys)` for one search: whether `gang` is planned, and admitted by its
    quota, with the pods of the gangs `keys` gone; `plan(keys)` the plan itself."""

    gang: Gang
    victims: Mapping[str, Sequence[PodInfo]]  # candidate gang key -> its pods
    what_if: WhatIfSnapshot
    cache: ClusterCache
    bound: RoomBound
    gpus: Mapping[str, int]  # candidate gang key -> GPU milli its members hold
    # The core's claims and PVs: the preemptor's claims are resolved as on its own
    # planning path (scheduler/planner/volume_claims.py), with the victims' claims freed.
    volumes: VolumeCache
    # The core's devices: the preemptor's DRA claims are resolved as on its own path,
    # the victims' claims released as their controller will release them
    # (cache/dra/view.py; the DraCache itself is only read).
    dra: DraCache | None = None
    plans: dict[frozenset[str], Plan | None] = field(default_factory=dict)
    _freed: dict[str, dict[str, _Freed]] = field(default_factory=dict)  # per gang
    _roomy: set[frozenset[str]] = field(default_factory=set)  # sets the bound let through

    def fits(self, keys: frozenset[str]) -> bool:
        if keys in self.plans:
            return self.plans[keys] is not None
        pods = sum(len(self.victims[key]) for key in keys)
        if pods > WITNESS_NODES and self._witness(keys):
            return True
        if self.refuses(keys):
            return False
        return self.plan(keys) is not None

    def refuses(self, keys: frozenset[str]) -> bool:
        """Whether the bound says the gang cannot fit with `keys` gone: no planning pass
        (the search does not count it against its budget)."""
        if keys in self.plans:
            return self.plans[keys] is None
        if not self.bound.applies or keys in self._roomy:
            return False
        if self.bound.with_freed(self.freed(keys)) < self.bound.needed:
            self.plans[keys] = None  # the planner would refuse: not enough room anywhere
            return True
        self._roomy.add(keys)
        return False

    def plan(self, keys: frozenset[str]) -> Plan | None:
        """The gang's plan with `keys` gone (None: not placed or not admitted)."""
        if keys in self.plans:  # planned, or refused by the bound: both exact
            return self.plans[keys]
        gone = [p for key in keys for p in self.victims[key]]
        view = self.what_if.without(gone)
        uids = frozenset(p.uid for p in gone)
        result = plan_with_claims(
            self.what_if.planner, self.gang, view, self.volumes, self.cache, uids, self.dra
        )
        plan: Plan | None = None
        if isinstance(result, Plan):
            admitted = within_quota(self.gang, result, self.cache.quotas, self.cache.pod, self.dra)
            plan = admitted if isinstance(admitted, Plan) else None
        self.plans[keys] = plan
        return plan

    def freed(self, keys: Iterable[str]) -> dict[str, _Freed]:
        total: dict[str, _Freed] = {}
        for key in keys:
            _merge(total, self._gang_freed(key))
        return total

    def _gang_freed(self, key: str) -> dict[str, _Freed]:
        known = self._freed.get(key)
        if known is None:
            known = self._freed[key] = freed_by(self.victims[key], self.cache)
        return known

    def _witness(self, keys: frozenset[str]) -> bool:
        """Whether a few of `keys`' gangs, those holding the most GPUs (then the most
        pods), are enough (then `keys` is too: fitting is monotone)."""
        gpus, victims = self.gpus, self.victims
        order = sorted(keys, key=lambda key: (-gpus.get(key, 0), -len(victims[key]), key))
        target = self.bound.needed
        for _ in range(WITNESS_TRIES):
            picked = self._enough(order, target)
            if picked is None or picked == keys:
                return False
            if self.plan(picked) is not None:
                return True
            target *= 2
        return False

    def _enough(self, order: Sequence[str], target: int) -> frozenset[str] | None:
        """The first gangs of `order` whose room reaches `target` members by the bound
        (the first `target` when the bound does not apply; None: all of them do not)."""
        bound = self.bound
        if not bound.applies:
            return frozenset(order[:target])
        freed: dict[str, _Freed] = {}
        total = bound.total
        for count, key in enumerate(order, 1):
            for name, back in self._gang_freed(key).items():
                if name not in bound.base.nodes:
                    continue
                old = freed.get(name)
                now = back if old is None else old.plus(back)
                before = bound.base_members_on(name) if old is None else bound.members_on(name, old)
                total += bound.members_on(name, now) - before
                freed[name] = now
            if total >= target:
                return frozenset(order[:count])
        return None
