"""The fast victim search (scheduler/sharing/victim_fit.py) decides as the straightforward one.

The straightforward `fits` plans the preemptor on a what-if copy of the snapshot made
for the search, with a planner made for the search (scheduler.sharing.preemption.WhatIf), for
every victim set `choose_victims` asks about; the core's keeps one copy and one planner
between searches, skips sets the resource bound refuses, and answers sets spanning many
nodes with a witness. Two cores get the same events on random small clusters (arrivals,
decisions carried out or refused, nodes added and removed), one deciding with each:
they must place the same gangs and pick the same victims and held placements.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from unittest import mock

from hypothesis import event, given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from policies.profile import build_profile
from scheduler.cycle.core import Attempt, SchedulingCore
from scheduler.gangs.gang import Gang
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan
from scheduler.sharing import victim_fit
from scheduler.sharing.preemption import Preempter, VictimGang, WhatIf
from scheduler.sharing.quotas import within_quota
from tests.factories import gang_pods, node_obj
from tests.quota_objects import gpu_quota

Decision = tuple[frozenset[str], frozenset[tuple[str, str, tuple[tuple[int, int], ...]]]]


@dataclass
class Straightforward:
    """`fits` and `plan` as first written: every set planned on a what-if copy made
    for this search, by a planner made for this search."""

    gang: Gang
    victims: Mapping[str, VictimGang]
    what_if: WhatIf
    planner: Planner
    cache: ClusterCache
    # Only for the GPU floor, which orders the search (the straightforward fit refuses
    # nothing without planning it).
    bound: victim_fit.RoomBound

    def plan(self, keys: frozenset[str]) -> Plan | None:
        view = self.what_if.without(p for k in keys for p in self.victims[k].pods)
        result = self.planner.plan(self.gang, view)
        if not isinstance(result, Plan):
            return None
        admitted = within_quota(self.gang, result, self.cache.quotas, self.cache.pod)
        return admitted if isinstance(admitted, Plan) else None

    def fits(self, keys: frozenset[str]) -> bool:
        return self.plan(keys) is not None

    def refuses(self, keys: frozenset[str]) -> bool:
        return False


def straightforward_fit(
    self: Preempter,
    gang: Gang,
    victims: Mapping[str, VictimGang],
    snapshot: Any,
    pool: Any,
) -> Straightforward:
    """Stands in for `Preempter._victim_fit`: everything else of the search (which
    gangs are candidates, their order, the budget) stays the production code."""
    what_if = WhatIf(self.cache, snapshot)
    planner = Planner(self.profile, explain=False)
    bound = victim_fit.RoomBound(gang, snapshot, self.profile)
    return Straightforward(gang, victims, what_if, planner, self.cache, bound)


def decided(attempt: Attempt) -> Decision | None:
    decision = attempt.preemption
    if decision is None:
        return None
    return (
        frozenset(v.key for v in decision.victims),
        frozenset((p.pod_uid, p.node, p.shares) for p in decision.placements),
    )


def members(name: str, namespace: str, size: int, gpus: int, priority: int) -> list[dict[str, Any]]:
    cpu = "4" if gpus else "16"
    return gang_pods(name, size, namespace=namespace, gpus=gpus, cpu=cpu, priority=priority)


class Pair:
    """The same cluster twice, fed the same events: `fast` decides with the core's
    search, `plain` with the straightforward one."""

    def __init__(self) -> None:
        self.fast = SchedulingCore(build_profile())
        self.plain = SchedulingCore(build_profile())
        for core in self.both:
            core.preempter.enabled = True

    @property
    def both(self) -> tuple[SchedulingCore, SchedulingCore]:
        return self.fast, self.plain

    def node(self, event: EventType, obj: dict[str, Any], now: float) -> None:
        for core in self.both:
            core.apply_node(event, obj, now)

    def pod(self, event: EventType, obj: dict[str, Any], now: float) -> None:
        for core in self.both:
            core.apply_pod(event, obj, now)

    def next(self, now: float) -> tuple[Attempt | None, Attempt | None]:
        plain = functools.partial(straightforward_fit, self.plain.preempter)
        with mock.patch.object(self.plain.preempter, "_victim_fit", plain):
            expected = self.plain.schedule_next(now)
        return self.fast.schedule_next(now), expected

    def bind(self, attempt: Attempt) -> None:
        assert isinstance(attempt.result, Plan)
        for core in self.both:
            for placement in attempt.result.placements:
                core.bound(placement)

    def refuse(self, key: str, now: float) -> None:
        for core in self.both:
            core.preempter.refuse(key, None, "test", now)

    def refresh(self, now: float) -> None:
        for core in self.both:
            core.refresh(now)


def same(attempt: Attempt | None, expected: Attempt | None) -> Attempt | None:
    """The fast core's attempt, once checked to be the plain one's: same gang, same
    outcome, same decision (victims and held placements)."""
    if attempt is None or expected is None:
        assert attempt is expected
        return None
    assert attempt.gang.key == expected.gang.key
    assert type(attempt.result) is type(expected.result)
    if isinstance(attempt.result, Plan) and isinstance(expected.result, Plan):
        assert attempt.result.placements == expected.result.placements
    assert decided(attempt) == decided(expected)
    return attempt


def place_all(pair: Pair, now: float) -> None:
    while (attempt := same(*pair.next(now))) is not None:
        if isinstance(attempt.result, Plan):
            pair.bind(attempt)
        elif attempt.preemption is not None:
            pair.refuse(attempt.gang.key, now)
    pair.refresh(now)


shape = st.tuples(
    st.integers(1, 4),  # members
    st.sampled_from([0, 1, 2, 4, 8]),  # GPUs each (0: cpu only)
    st.integers(0, 6),  # priority
    st.sampled_from(["default", "team"]),
)


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.lists(st.sampled_from([4, 8]), min_size=1, max_size=5),
    running=st.lists(shape, min_size=1, max_size=10),
    arrivals=st.lists(
        st.tuples(
            shape, st.sampled_from(["carry out", "refuse"]), st.sampled_from(["", "add", "remove"])
        ),
        min_size=1,
        max_size=6,
    ),
    limits=st.none() | st.tuples(st.integers(4, 40), st.integers(0, 16)),
    witness_above=st.sampled_from([0, 3, victim_fit.WITNESS_NODES]),
)
def test_the_fast_search_decides_as_the_straightforward_one(
    nodes: list[int],
    running: list[tuple[int, int, int, str]],
    arrivals: list[tuple[tuple[int, int, int, str], str, str]],
    limits: tuple[int, int] | None,
    witness_above: int,
) -> None:
    pair = Pair()
    now = 1.0
    for i, gpus in enumerate(nodes):
        pair.node(EventType.ADDED, node_obj(f"n{i}", gpus=gpus, cpu="32"), now)
    if limits is not None:
        for core in pair.both:
            core.apply_elasticquota(EventType.ADDED, gpu_quota("team", *limits, name="q"), now)
    for i, (size, gpus, priority, namespace) in enumerate(running):
        pods = members(f"r{i}", namespace, size, gpus, priority)
        for pod in pods:
            pair.pod(EventType.ADDED, pod, now)
        place_all(pair, now)
        if f"{namespace}/r{i}" in pair.fast.queue:  # did not fit: not part of the cluster
            for pod in pods:
                pair.pod(EventType.DELETED, pod, now)
            pair.refresh(now)
    with mock.patch.object(victim_fit, "WITNESS_NODES", witness_above):
        for j, ((size, gpus, priority, namespace), outcome, change) in enumerate(arrivals):
            now += 10.0
            pods = members(f"a{j}", namespace, size, gpus, 4 + priority)
            for pod in pods:
                pair.pod(EventType.ADDED, pod, now)
            attempt = same(*pair.next(now))
            assert attempt is not None and attempt.gang.key == f"{namespace}/a{j}"
            if isinstance(attempt.result, Plan):
                pair.bind(attempt)
                continue
            decision = attempt.preemption
            event("a decision" if decision is not None else "no decision")
            if decision is not None and outcome == "carry out":
                for victim in decision.victims:
                    for member in victim.pods:
                        meta = {
                            "uid": member.uid,
                            "name": member.name,
                            "namespace": member.namespace,
                        }
                        pair.pod(EventType.DELETED, {"metadata": meta}, now)
                place_all(pair, now + 1.0)
            else:
                if decision is not None:
                    pair.refuse(attempt.gang.key, now)
                for pod in pods:
                    pair.pod(EventType.DELETED, pod, now)
                pair.refresh(now)
            # The kept copy catches up with nodes that come and go (their pods stay).
            if change == "add":
                pair.node(EventType.ADDED, node_obj(f"m{j}", gpus=4, cpu="32"), now)
            elif change == "remove":
                pair.node(EventType.DELETED, node_obj(f"n{j % len(nodes)}", gpus=4), now)
