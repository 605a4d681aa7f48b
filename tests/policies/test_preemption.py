"""The victim search (policies/preemption.py) against a small cluster model: whole gangs,
the minimal set by brute force, and no preemption that leaves the preemptor unplaced."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.preemption import (
    FEWEST_GPUS,
    FEWEST_VICTIMS,
    Candidate,
    Rank,
    _from_gpu_floor,
    _in_rank_order,
    choose_victims,
    cost,
)


def all_subsets(pool: Sequence[Candidate]) -> Iterator[tuple[Candidate, ...]]:
    """Every subset, for the brute force the search is compared with."""
    for size in range(len(pool) + 1):
        yield from itertools.combinations(pool, size)


@dataclass(frozen=True)
class Model:
    """Nodes with free GPUs; running gangs holding GPUs on nodes; a preemptor of
    `members` members of `gpus` GPUs each, on any nodes."""

    free: tuple[int, ...]
    holdings: dict[str, tuple[tuple[int, int], ...]]  # gang -> (node, gpus) per member
    members: int
    gpus: int

    def fits(self, evicted: frozenset[str]) -> bool:
        free = list(self.free)
        for key in evicted:
            for node, gpus in self.holdings[key]:  # every member of the gang goes
                free[node] += gpus
        return sum(room // self.gpus for room in free) >= self.members


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Model, list[Candidate]]:
    nodes = draw(st.integers(1, 3))
    free = tuple(draw(st.lists(st.integers(0, 4), min_size=nodes, max_size=nodes)))
    holdings: dict[str, tuple[tuple[int, int], ...]] = {}
    candidates = []
    for index in range(draw(st.integers(0, 6))):
        key = f"ns/g{index}"
        members = draw(
            st.lists(
                st.tuples(st.integers(0, nodes - 1), st.integers(1, 4)), min_size=1, max_size=3
            )
        )
        holdings[key] = tuple(members)
        candidates.append(
            Candidate(
                key,
                priority=draw(st.integers(0, 3)),
                gpu_milli=1000 * sum(g for _, g in members),
                running_seconds=draw(st.sampled_from([0.0, 10.0, 100.0])),
            )
        )
    model = Model(free, holdings, draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    return model, candidates


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_the_victims_are_the_minimal_set_of_whole_gangs_that_lets_the_gang_fit(
    scenario: tuple[Model, list[Candidate]],
) -> None:
    model, candidates = scenario
    if model.fits(frozenset()):
        return  # the search is asked only for a gang that does not fit as things are
    asked: list[frozenset[str]] = []

    def fits(evicted: frozenset[str]) -> bool:
        asked.append(evicted)
        return model.fits(evicted)

    found = choose_victims(candidates, fits, max_checks=10_000)
    # Whole gangs: every set asked about is made of candidate gang keys.
    keys = {c.key for c in candidates}
    assert all(evicted <= keys for evicted in asked)
    feasible = [s for s in all_subsets(candidates) if s and model.fits(frozenset(c.key for c in s))]
    if found is None:
        # Never preempt for a gang that would still not fit; and nothing fitting is missed.
        assert not feasible
        return
    assert model.fits(found.keys)  # the preemptor is placed after the eviction
    best = min((len(s), cost(s)) for s in feasible)
    assert (len(found.gangs), cost(found.gangs)) == best


def test_nothing_is_evicted_when_even_every_candidate_would_not_make_room() -> None:
    model = Model((0,), {"ns/a": ((0, 1),)}, members=1, gpus=4)
    calls: list[frozenset[str]] = []

    def fits(evicted: frozenset[str]) -> bool:
        calls.append(evicted)
        return model.fits(evicted)

    assert choose_victims([Candidate("ns/a", 0, 1000, 5.0)], fits) is None
    assert calls == [frozenset({"ns/a"})]


def test_fewest_victims_then_lowest_priority_then_least_gpu_time() -> None:
    everything = lambda evicted: len(evicted) >= 1  # noqa: E731 - any one gang makes room
    old = Candidate("ns/old", 1, 4000, 3600.0)
    young = Candidate("ns/young", 1, 4000, 60.0)
    low = Candidate("ns/low", 0, 8000, 7200.0)
    found = choose_victims([old, young, low], everything)
    assert found is not None and found.keys == {"ns/low"}  # lowest priority first
    found = choose_victims([old, young], everything)
    assert found is not None and found.keys == {"ns/young"}  # then least work lost
    two = lambda evicted: len(evicted) >= 2  # noqa: E731
    found = choose_victims([old, young, low], two)
    assert found is not None and found.keys == {"ns/low", "ns/young"}


def test_the_budget_of_checks_bounds_the_search_and_then_nothing_is_evicted() -> None:
    pool = [Candidate(f"ns/g{i}", 0, 1000, float(i)) for i in range(30)]
    calls: list[frozenset[str]] = []

    def fits(evicted: frozenset[str]) -> bool:
        calls.append(evicted)
        return evicted == frozenset(c.key for c in pool)

    assert choose_victims(pool, fits, max_checks=50) is None
    assert len(calls) == 50


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.data())
def test_reclaim_takes_the_fewest_gpus_then_lowest_priority_among_admissible_sets(
    scenario: tuple[Model, list[Candidate]], data: st.DataObject
) -> None:
    """With reclaim's order and a cap per group of gangs (a namespace may lose only what
    it holds beyond its min), the search finds the cheapest admissible set that fits,
    by brute force, and never one over a cap."""
    model, candidates = scenario
    if model.fits(frozenset()):
        return
    group = {c.key: data.draw(st.integers(0, 1)) for c in candidates}
    caps = (data.draw(st.integers(0, 12)), data.draw(st.integers(0, 12)))

    def admissible(evicted: frozenset[str]) -> bool:
        by_group = [0, 0]
        for c in candidates:
            if c.key in evicted:
                by_group[group[c.key]] += c.gpu_milli // 1000
        return by_group[0] <= caps[0] and by_group[1] <= caps[1]

    # The GPUs any fitting set frees at least (the model's free GPUs count), and the
    # model's own per-node count as the cheap refusal, each given or not.
    floor = 1000 * max(0, model.members * model.gpus - sum(model.free))
    refuses = (lambda evicted: not model.fits(evicted)) if data.draw(st.booleans()) else None
    found = choose_victims(
        candidates,
        model.fits,
        max_checks=10_000,
        rank=FEWEST_GPUS,
        admissible=admissible,
        refuses=refuses,
        gpu_floor=floor if data.draw(st.booleans()) else 0,
    )
    feasible = [
        s
        for s in all_subsets(candidates)
        if s and model.fits(frozenset(c.key for c in s)) and admissible(frozenset(c.key for c in s))
    ]
    if found is None:
        assert not feasible
        return
    assert model.fits(found.keys) and admissible(found.keys)
    assert FEWEST_GPUS(found.gangs) == min(FEWEST_GPUS(s) for s in feasible)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-3, 3), st.integers(0, 3), st.sampled_from([0.0, 5.0])),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from([FEWEST_GPUS, FEWEST_VICTIMS]),
)
def test_sets_come_in_rank_order_each_exactly_once(
    specs: list[tuple[int, int, float]], rank: Rank
) -> None:
    pool = sorted(
        (Candidate(f"ns/g{i}", p, g * 1000, t) for i, (p, g, t) in enumerate(specs)),
        key=lambda c: (rank([c]), c.key),
    )
    for one in pool:  # a gang alone is ranked as any set is (a shortcut computes it)
        expected = (
            (1, *cost([one]))
            if rank is FEWEST_VICTIMS
            else (one.gpu_milli, one.priority, 1, one.priority, one.gpu_time)
        )
        assert rank([one]) == expected
    seen = [frozenset(c.key for c in chosen) for chosen in _in_rank_order(pool, rank)]
    assert len(seen) == len(set(seen)) == 2 ** len(pool) - 1
    ranks = [rank([c for c in pool if c.key in keys]) for keys in seen]
    assert ranks == sorted(ranks)


def test_reclaim_prefers_two_small_gangs_to_one_large_one() -> None:
    small = [Candidate(f"ns/s{i}", 5, 1000, 10.0) for i in range(2)]
    large = Candidate("ns/large", 0, 8000, 10.0)
    fits = lambda evicted: len(evicted) >= 2 or "ns/large" in evicted  # noqa: E731
    found = choose_victims([*small, large], fits, rank=FEWEST_GPUS)
    assert found is not None and found.keys == {"ns/s0", "ns/s1"}
    found = choose_victims([*small, large], fits)  # priority preemption: fewest victims
    assert found is not None and found.keys == {"ns/large"}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-3, 3), st.integers(0, 4), st.sampled_from([0.0, 5.0])),
        min_size=1,
        max_size=7,
    ),
    st.integers(1, 12),
)
def test_from_the_gpu_floor_every_set_reaching_it_comes_once_in_rank_order(
    specs: list[tuple[int, int, float]], floor_gpus: int
) -> None:
    pool = sorted(
        (Candidate(f"ns/g{i}", p, g * 1000, t) for i, (p, g, t) in enumerate(specs)),
        key=lambda c: (FEWEST_GPUS([c]), c.key),
    )
    floor = floor_gpus * 1000
    seen = [frozenset(c.key for c in s) for s in _from_gpu_floor(pool, floor) if s]
    expected = {
        frozenset(c.key for c in s)
        for s in all_subsets(pool)
        if s and sum(c.gpu_milli for c in s) >= floor
    }
    assert len(seen) == len(set(seen)) and set(seen) == expected
    ranks = [FEWEST_GPUS([c for c in pool if c.key in keys]) for keys in seen]
    assert ranks == sorted(ranks)


def test_sets_the_bound_refuses_cost_no_planning_pass_of_the_budget() -> None:
    """299 single gangs each too small, then the one that makes room: the old budget
    (every call counted, 256) gave up before reaching it; refused sets now cost none."""
    small = [Candidate(f"ns/s{i:03d}", 0, 1000, 10.0) for i in range(299)]
    large = Candidate("ns/large", 9, 8000, 10.0)
    planned: list[frozenset[str]] = []

    def fits(evicted: frozenset[str]) -> bool:
        planned.append(evicted)
        return "ns/large" in evicted

    def refuses(evicted: frozenset[str]) -> bool:
        return "ns/large" not in evicted

    found = choose_victims([*small, large], fits, refuses=refuses)
    assert found is not None and found.keys == {"ns/large"}
    assert planned == [frozenset(c.key for c in [*small, large]), frozenset({"ns/large"})]
    assert found.checks == 2


def test_reclaim_skips_the_sets_below_the_gpu_floor_in_bulk() -> None:
    """A gang needing 16 GPUs where 200 one-GPU gangs run beside two of 16: below the
    floor there are more sets than any budget could look at (C(200, 15)), and the old
    search gave up among them; from the floor up the first set is the minimal one
    (fewest GPUs, then lowest priority: the one-GPU gangs rank higher here)."""
    ones = [Candidate(f"ns/one{i:03d}", 5, 1000, 10.0) for i in range(200)]
    big = [Candidate("ns/big-high", 7, 16_000, 10.0), Candidate("ns/big-low", 3, 16_000, 10.0)]

    def fits(evicted: frozenset[str]) -> bool:
        return any(key.startswith("ns/big") for key in evicted)

    def refuses(evicted: frozenset[str]) -> bool:
        return not fits(evicted)

    pool = [*ones, *big]
    assert choose_victims(pool, fits, rank=FEWEST_GPUS, refuses=refuses) is None  # no floor
    found = choose_victims(pool, fits, rank=FEWEST_GPUS, refuses=refuses, gpu_floor=16_000)
    assert found is not None and found.keys == {"ns/big-low"} and found.checks == 2
