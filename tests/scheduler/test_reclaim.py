"""Reclaim of borrowed quota through the core (scheduler/sharing/reclaim.py, issue 12): a gang
within its namespace's min evicts whole gangs of namespaces borrowing beyond theirs,
fewest GPUs first, never taking a namespace below its own min, whatever the
priorities; and the same path (a `Preemption`, held room) as priority preemption."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import EventType, Reservation
from cache.quota import GPU, usage_of
from cache.resources import total_of
from policies.guarantees import may_take
from scheduler.cycle.core import Attempt, SchedulingCore
from scheduler.planner.result import Plan, Unschedulable
from scheduler.sharing.preemption import PRIORITY, RECLAIM, Preemption, VictimGang
from scheduler.sharing.reclaim import holding, taker
from tests.factories import gang_pods, make_pod, pod_obj
from tests.quota_objects import gpu_quota
from tests.scheduler.cores import core_on_nodes
from tests.scheduler.cores import run_binding as run
from tests.signed import TEST_KEY, signed

ADDED = EventType.ADDED
MILLI = 1000


def gang(
    namespace: str,
    name: str,
    size: int,
    gpus: int,
    priority: int = 0,
    nodes: list[str] | None = None,
) -> list[dict[str, Any]]:
    pods = gang_pods(
        name,
        size,
        nodes=nodes or (),
        namespace=namespace,
        gpus=gpus,
        priority=priority,
        phase="Running" if nodes else "Pending",
    )
    # Running gangs were bound (signed) by the scheduler: only such gangs are victims.
    return [signed(pod) for pod in pods] if nodes else pods


def core_with(
    nodes: int, quotas: dict[str, tuple[int, int]], pods: list[dict[str, Any]]
) -> SchedulingCore:
    """`quotas`: namespace -> (min, max) GPUs."""
    core = core_on_nodes(nodes)
    core.cache.assignment_key = TEST_KEY  # the running gangs were bound (signed) with it
    core.preempter.enabled = True
    for namespace, (low, high) in quotas.items():
        core.apply_elasticquota(ADDED, gpu_quota(namespace, high, low), 0.0)
    for pod in pods:
        core.apply_pod(ADDED, pod, 0.0)
    return core


def decisions(attempts: list[Attempt]) -> list[Preemption]:
    return [a.preemption for a in attempts if a.preemption is not None]


def evict(core: SchedulingCore, decision: Preemption, now: float) -> None:
    """What the adapter and the victims' controllers do: every victim pod goes, and
    comes back pending (same gang, new uid)."""
    for victim in decision.victims:
        for pod in victim.pods:
            gone = {"metadata": {"uid": pod.uid, "namespace": pod.namespace, "name": pod.name}}
            core.apply_pod(EventType.DELETED, gone, now)
            again = pod_obj(
                pod.name,
                namespace=pod.namespace,
                gang=pod.gang_name,
                min_member=len(victim.pods),
                gpus=pod.gpu.count,
                priority=pod.priority,
                uid=pod.uid + "x",
            )
            core.apply_pod(ADDED, again, now)


def used_gpus(core: SchedulingCore, namespace: str) -> int:
    return core.cache.quotas.ledger.used(namespace).get(GPU, 0) // MILLI


def test_a_lender_under_its_min_takes_back_a_borrowers_gang_whatever_the_priorities() -> None:
    pods = [
        *gang("b", "own", 1, 8, priority=100, nodes=["n0"]),
        *gang("b", "extra", 1, 8, priority=100, nodes=["n1"]),  # beyond b's min of 8
        *gang("a", "job", 1, 8, priority=0),
    ]
    core = core_with(2, {"a": (8, 16), "b": (8, 16)}, pods)
    [attempt] = run(core, 1.0)
    assert isinstance(attempt.result, Unschedulable)
    decision = attempt.preemption
    assert decision is not None and decision.reason == RECLAIM
    assert len(decision.victims) == 1
    assert used_gpus(core, "b") - 8 >= 8  # b keeps its min
    assert "reclaims the min guaranteed to quota a" in decision.message
    for placement in decision.placements:
        assert core.cache.reservation(placement.pod_uid) == Reservation.NOMINATED
    evict(core, decision, 2.0)
    placed = [a for a in run(core, 3.0) if isinstance(a.result, Plan)]
    assert [a.gang.key for a in placed] == ["a/job"]  # the recreated victim borrows: waits
    assert used_gpus(core, "a") == 8 and used_gpus(core, "b") == 8


def test_the_fewest_gpus_then_the_lowest_priority_are_taken_back() -> None:
    pods = [
        *gang("b", "big", 1, 8, priority=0, nodes=["n1"]),
        *gang("b", "small-high", 1, 4, priority=9, nodes=["n0"]),
        *gang("b", "small-low", 1, 4, priority=3, nodes=["n0"]),
        *gang("b", "guaranteed", 1, 8, priority=0, nodes=["n2"]),
        *gang("a", "job", 1, 4),
    ]
    core = core_with(3, {"a": (8, 8), "b": (8, 24)}, pods)
    [decision] = decisions(run(core, 1.0))
    assert decision.reason == RECLAIM
    assert [v.key for v in decision.victims] == ["b/small-low"]
    assert {p.node for p in decision.placements} == {"n0"}


def test_no_namespace_is_taken_below_its_min_not_even_for_a_higher_priority() -> None:
    # b holds 12 (min 8): only 4 of it is borrowed, and a needs both nodes.
    pods = [
        *gang("b", "x", 1, 8, priority=0, nodes=["n0"]),
        *gang("b", "y", 1, 4, priority=0, nodes=["n1"]),
        *gang("a", "job", 2, 8, priority=100),
    ]
    core = core_with(2, {"a": (16, 16), "b": (8, 16)}, pods)
    attempts = run(core, 1.0)
    assert decisions(attempts) == []
    assert all(core.cache.reservation(p["metadata"]["uid"]) is None for p in pods)


def test_a_gang_that_would_exceed_its_own_min_does_not_reclaim() -> None:
    pods = [
        *gang("b", "extra", 1, 8, priority=5, nodes=["n0"]),
        *gang("a", "job", 1, 8, priority=0),
    ]
    core = core_with(1, {"a": (4, 16), "b": (0, 16)}, pods)
    assert decisions(run(core, 1.0)) == []


def test_namespaces_without_a_quota_lend_nothing_and_are_not_reclaimed_from() -> None:
    pods = [
        *gang("free", "x", 1, 8, priority=5, nodes=["n0"]),
        *gang("a", "job", 1, 8, priority=0),
    ]
    core = core_with(1, {"a": (8, 8)}, pods)
    assert decisions(run(core, 1.0)) == []


def test_reclaim_can_be_turned_off_and_priority_preemption_still_respects_min() -> None:
    pods = [
        *gang("b", "own", 1, 8, priority=0, nodes=["n0"]),
        *gang("b", "extra", 1, 8, priority=0, nodes=["n1"]),
        *gang("a", "job", 1, 8, priority=0),
    ]
    core = core_with(2, {"a": (8, 16), "b": (8, 16)}, pods)
    core.preempter.reclaim = False
    assert decisions(run(core, 1.0)) == []
    # A higher priority without reclaim: priority preemption, the borrowed gang only.
    core = core_with(2, {"a": (8, 16), "b": (8, 16)}, pods[:2])
    core.preempter.reclaim = False
    for pod in gang("a", "urgent", 2, 8, priority=50):  # needs b's guaranteed node too
        core.apply_pod(ADDED, pod, 0.0)
    assert decisions(run(core, 1.0)) == []
    for pod in gang("a", "one", 1, 8, priority=50):
        core.apply_pod(ADDED, pod, 0.0)
    [decision] = decisions(run(core, 2.0))
    assert decision.reason == PRIORITY and len(decision.victims) == 1


def test_a_gang_never_evicts_the_gang_that_reclaimed_from_it() -> None:
    # a reclaims from b; later a borrows with another gang (from c's idle min). b's
    # evicted gang ranks above both of a's gangs, and a's borrowed part may be taken:
    # the gang that reclaimed from it may not.
    pods = [
        *gang("b", "own", 1, 8, priority=100, nodes=["n0"]),
        *gang("b", "extra", 1, 8, priority=100, nodes=["n1"]),
        *gang("x", "filler", 1, 8, priority=1000, nodes=["n2"]),
        *gang("a", "job", 1, 8, priority=0),
    ]
    # b's max below its usage: its evicted gang waits, and a may borrow n2.
    core = core_with(3, {"a": (8, 24), "b": (8, 8), "c": (16, 16)}, pods)
    [decision] = decisions(run(core, 1.0))
    victim = decision.victims[0].key
    evict(core, decision, 2.0)
    run(core, 3.0)
    assert used_gpus(core, "a") == 8
    core.apply_pod(EventType.DELETED, pod_obj("filler-0", namespace="x"), 4.0)
    for pod in gang("a", "borrow", 1, 8, priority=0):
        core.apply_pod(ADDED, pod, 4.0)
    placed = [a.gang.key for a in run(core, 70.0) if isinstance(a.result, Plan)]
    assert "a/borrow" in placed and used_gpus(core, "a") == 16
    assert set(core.preempter.candidates(core.gangs[victim], 80.0)) == {"a/borrow"}


# --- properties ---------------------------------------------------------------------------
@st.composite
def reclaim_scenarios(draw: st.DrawFn) -> tuple[int, dict[str, tuple[int, int]], list[Any], int]:
    """Whole-node pods (8 GPUs each), so fitting is counting free nodes: two borrowing
    namespaces b0 and b1 fill some nodes, and lender a asks for `size` nodes."""
    nodes = draw(st.integers(2, 6))
    quotas = {"a": (8 * nodes, 8 * nodes)}
    running: list[tuple[str, int, int]] = []  # (namespace, pods, priority)
    free = nodes
    for namespace in ("b0", "b1"):
        quotas[namespace] = (8 * draw(st.integers(0, nodes)), 8 * nodes)
        for _ in range(draw(st.integers(0, 3))):
            pods = draw(st.integers(1, 2))
            if pods <= free:
                running.append((namespace, pods, draw(st.integers(0, 5))))
                free -= pods
    size = draw(st.integers(1, nodes))
    return nodes, quotas, running, size


@settings(max_examples=120, deadline=None)
@given(reclaim_scenarios())
def test_a_lender_with_a_fitting_gang_gets_it_placed_after_reclaim(
    scenario: tuple[int, dict[str, tuple[int, int]], list[tuple[str, int, int]], int],
) -> None:
    """Whenever some set of whole borrowing gangs, leaving each namespace its min, would
    free enough nodes, reclaim evicts such a set (and the fewest GPUs), and the lender's
    gang is placed once they are gone; otherwise nothing is evicted."""
    nodes, quotas, running, size = scenario
    pods: list[dict[str, Any]] = []
    spec: dict[str, tuple[str, int]] = {}
    next_node = itertools.count()
    for index, (namespace, count, priority) in enumerate(running):
        name = f"g{index}"
        spec[f"{namespace}/{name}"] = (namespace, count)
        pods += gang(
            namespace, name, count, 8, priority, [f"n{next(next_node)}" for _ in range(count)]
        )
    used = {ns: sum(8 * c for n, c in spec.values() if n == ns) for ns in ("b0", "b1")}
    free = nodes - sum(c for _, c in spec.values())
    if size <= free:
        return  # it fits as things are: nothing to reclaim
    core = core_with(nodes, quotas, [*pods, *gang("a", "job", size, 8, priority=0)])
    best: int | None = None  # the fewest nodes a valid victim set frees
    keys = list(spec)
    for chosen in itertools.chain.from_iterable(
        itertools.combinations(keys, k) for k in range(1, len(keys) + 1)
    ):
        taken = {ns: sum(8 * spec[k][1] for k in chosen if spec[k][0] == ns) for ns in used}
        if any(used[ns] - taken[ns] < quotas[ns][0] for ns in used if taken[ns]):
            continue
        freed = sum(spec[k][1] for k in chosen)
        if free + freed >= size and (best is None or freed < best):
            best = freed
    made = decisions(run(core, 1.0))
    if best is None:
        assert made == []
        return
    [decision] = made
    assert decision.reason == RECLAIM
    assert sum(len(v.pods) for v in decision.victims) == best  # the fewest GPUs
    for victim in decision.victims:  # whole gangs
        assert {p.name for p in victim.pods} == {
            f"{victim.key.split('/')[1]}-{i}" for i in range(spec[victim.key][1])
        }
    evict(core, decision, 2.0)
    placed = [a.gang.key for a in run(core, 3.0) if isinstance(a.result, Plan)]
    assert "a/job" in placed
    for namespace in used:  # nobody dropped below its min
        assert used_gpus(core, namespace) >= min(quotas[namespace][0], used[namespace])


arrivals = st.lists(
    st.tuples(
        st.sampled_from(["t0", "t1", "t2"]),
        st.integers(1, 2),
        st.sampled_from([4, 8]),
        st.integers(0, 3),
    ),
    min_size=3,
    max_size=10,
)


@settings(max_examples=80, deadline=None)
@given(
    # Guarantees that add up to the cluster (32 GPUs), so that borrowing can fill it.
    mins=st.permutations([16, 8, 8]) | st.permutations([16, 16, 0]),
    maxes=st.tuples(*(st.sampled_from([24, 32]) for _ in range(3))),
    timeline=arrivals,
)
def test_replayed_timelines_with_reclaim_and_priority_preemption(
    mins: list[int], maxes: tuple[int, int, int], timeline: list[Any]
) -> None:
    """Teams' gangs arrive one after another on 4 nodes of 8 GPUs; every decision is
    carried out (victims deleted and recreated pending). Properties after every step: no
    quota over its max; no partial gang; victims whole gangs; a preemptor placed once its
    victims are gone; no namespace taken below its min by another's gang; and no gang
    evicts one that evicted it (no A-evicts-B-evicts-A)."""
    teams = ("t0", "t1", "t2")
    quotas = {t: (min(lo, hi), hi) for t, lo, hi in zip(teams, mins, maxes, strict=True)}
    core = core_with(4, quotas, [])
    sizes: dict[str, int] = {}
    evicted_by: dict[str, set[str]] = {}
    now = 1.0
    for step, (team, size, gpus, priority) in enumerate(timeline):
        name = f"j{step}"
        sizes[f"{team}/{name}"] = size
        for pod in gang(team, name, size, gpus, priority):
            core.apply_pod(ADDED, pod, now)
        for _ in range(3):
            now += 1.0
            attempts = run(core, now)
            check_invariants(core, quotas, sizes)
            for decision in decisions(attempts):
                before = {t: used_gpus(core, t) for t in teams}
                for victim in decision.victims:
                    live = {
                        p.uid
                        for p in core.cache.pods()
                        if p.gang_key == victim.key and p.consumes_resources
                    }
                    assert {p.uid for p in victim.pods} == live  # whole gangs
                    assert decision.preemptor not in evicted_by.get(victim.key, set())
                    evicted_by.setdefault(decision.preemptor, set()).add(victim.key)
                preemptor_ns = decision.preemptor.split("/")[0]
                evict(core, decision, now)
                for t in teams:
                    took = before[t] - used_gpus(core, t)
                    if t != preemptor_ns and took:
                        assert used_gpus(core, t) >= quotas[t][0]
                now += 1.0
                placed = {a.gang.key for a in run(core, now) if isinstance(a.result, Plan)}
                assert decision.preemptor in placed, "victims gone, yet the preemptor waits"
                check_invariants(core, quotas, sizes)


def check_invariants(
    core: SchedulingCore, quotas: dict[str, tuple[int, int]], sizes: dict[str, int]
) -> None:
    for team, (_, high) in quotas.items():
        assert used_gpus(core, team) <= high
    bound: dict[str, int] = {}
    for pod in core.cache.pods():
        if pod.node_name and pod.consumes_resources:
            bound[pod.gang_key] = bound.get(pod.gang_key, 0) + 1
    for key, count in bound.items():
        assert count >= sizes[key], f"gang {key} partial: {count} of {sizes[key]}"


def test_reclaim_finds_the_one_gang_that_frees_a_node_among_many_small_ones() -> None:
    """72 one-GPU gangs borrow nine nodes, one 8-GPU gang of lower priority a tenth; a
    whole-node gang reclaims. Sets of one-GPU gangs have fewer GPUs, but none frees
    a node, and the bound refuses them without planning: they no longer spend the
    search's budget (256 passes), and the search starts at 8 GPUs freed, so the big
    gang is found (before, the search gave up and nothing was reclaimed)."""
    pods = [
        *(
            pod
            for i in range(72)
            for pod in gang("b", f"one-{i:02d}", 1, 1, priority=9, nodes=[f"n{i // 8}"])
        ),
        *gang("b", "big", 1, 8, priority=5, nodes=["n9"]),
        *gang("a", "job", 1, 8, priority=0),
    ]
    core = core_with(10, {"a": (8, 8), "b": (0, 80)}, pods)
    [decision] = decisions(run(core, 1.0))
    assert decision.reason == RECLAIM
    assert [v.key for v in decision.victims] == ["b/big"]
    assert {p.node for p in decision.placements} == {"n9"}


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 8), st.sampled_from(["0", "500m", "4"]), st.sampled_from(["0", "1Gi"])
        ),
        min_size=1,
        max_size=4,
    )
)
def test_a_gang_is_weighed_as_the_sum_of_its_members_quota_usage(
    members: list[tuple[int, str, str]],
) -> None:
    """`holding` adds up in one pass what `usage_of` counts per member."""
    pods = [
        make_pod(f"p{i}", namespace="b", gpus=gpus, cpu=cpu, memory=memory)
        for i, (gpus, cpu, memory) in enumerate(members)
    ]
    weighed = holding("b/g", pods)
    assert weighed.namespace == "b"
    assert weighed.usage == total_of(usage_of(pod.requests, pod.gpu) for pod in pods)
    assert VictimGang("b/g", 0, tuple(pods)).holding == weighed  # weighed in its one pass


@settings(max_examples=60, deadline=None)
@given(
    mins=st.tuples(st.integers(0, 24), st.integers(0, 24)),
    running=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "free"]), st.integers(0, 8)), max_size=6
    ),
    asked=st.sets(st.sampled_from([GPU, "cpu", "memory"])),
)
def test_the_taker_decides_as_may_take_for_every_gang(
    mins: tuple[int, int], running: list[tuple[str, int]], asked: set[str]
) -> None:
    """`taker` reads each namespace's borrowing once; its answers are `may_take`'s."""
    pods = [
        pod
        for i, (namespace, gpus) in enumerate(running)
        for pod in gang(namespace, f"g{i}", 1, gpus, nodes=[f"n{i}"])
    ]
    core = core_with(6, {"a": (mins[0], 48), "b": (mins[1], 48), "c": (8, 48)}, pods)
    book = core.cache.quotas
    takes = taker(book, "a", asked)
    for i, (namespace, _) in enumerate(running):
        members = [p for p in core.cache.pods() if p.gang_key == f"{namespace}/g{i}"]
        weighed = holding(f"{namespace}/g{i}", members)
        assert takes(weighed) == may_take(book, "a", asked, weighed)


def test_a_gang_weighed_by_the_last_search_is_reused_until_a_member_changes() -> None:
    pods = [
        *gang("b", "x", 2, 8, priority=1, nodes=["n0", "n1"]),
        *gang("b", "y", 1, 8, priority=1, nodes=["n2"]),
        *gang("a", "job", 1, 8, priority=5),
    ]
    core = core_with(3, {}, pods)
    core.preempter.enabled = False  # no decision: every gang stays a candidate
    run(core, 1.0)
    job = core.gangs["a/job"]
    first = core.preempter.candidates(job, 2.0)
    again = core.preempter.candidates(job, 3.0)
    assert set(first) == {"b/x", "b/y"} and all(again[k] is first[k] for k in first)
    # A member's new record (its priority now above the job's): weighed anew.
    changed = dict(pods[1], metadata={**pods[1]["metadata"], "resourceVersion": "2"})
    changed["spec"] = {**pods[1]["spec"], "priority": 9}
    core.apply_pod(EventType.MODIFIED, changed, 4.0)
    later = core.preempter.candidates(job, 5.0)
    assert set(later) == {"b/y"} and later["b/y"] is first["b/y"]
