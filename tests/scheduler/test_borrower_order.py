"""Borrowing gangs ordered by their namespace's dominant share (docs/quotas.md,
"Borrowers ordered by dominant share"): the queue's index (scheduler/gangs/queue.py), the
share (policies/fair_share.py) and, through the core, idle capacity divided by share
over time rather than by arrival."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.sharing.quotas as quotas_module
from cache.cluster import EventType
from cache.quota import GPU, WEIGHT_ANNOTATION, QuotaBook
from policies.fair_share import beyond_min, dominant_share
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.queue import GangQueue
from scheduler.planner.result import Plan
from tests.cache.test_quota import quota_obj
from tests.factories import node_obj, pod_obj

ADDED, DELETED = EventType.ADDED, EventType.DELETED


# --- the queue ------------------------------------------------------------------------


def test_borrowers_of_one_priority_pop_by_their_namespace_share_then_age() -> None:
    queue = GangQueue()
    for key, created in [("a/1", 1), ("a/2", 2), ("b/1", 3), ("b/2", 4), ("g/1", 5)]:
        queue.add_or_update(key, 0, created, 0)
        namespace = key.split("/")[0]
        queue.set_borrowing(key, namespace != "g", namespace)
    queue.set_share("a", 0.5)
    queue.set_share("b", 0.25)
    order = [queue.pop(0) for _ in range(3)]
    assert order == ["g/1", "b/1", "b/2"]  # within its min first; then the smaller share
    queue.set_share("b", 0.75)  # b's gangs bound meanwhile: a is now behind less
    queue.add_or_update("b/3", 0, 0, 0)
    queue.set_borrowing("b/3", True, "b")
    assert [queue.pop(0) for _ in range(3)] == ["a/1", "a/2", "b/3"]


def test_priority_comes_before_share() -> None:
    queue = GangQueue()
    queue.add_or_update("a/high", 10, 5, 0)
    queue.add_or_update("b/low", 0, 1, 0)
    queue.set_borrowing("a/high", True, "a")
    queue.set_borrowing("b/low", True, "b")
    queue.set_share("a", 0.9)
    assert [queue.pop(0), queue.pop(0)] == ["a/high", "b/low"]


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.integers(0, 7),  # gang
            st.integers(0, 2),  # priority
            st.integers(0, 5),  # created
            st.booleans(),  # borrowing
        ),
        st.tuples(st.just("share"), st.integers(0, 2), st.integers(0, 3)),
        st.tuples(st.just("remove"), st.integers(0, 7)),
        st.tuples(st.just("pop"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_the_borrower_index_pops_what_a_full_sort_would(ops: list[tuple[Any, ...]]) -> None:
    """Model check: however gangs come, go, change and shares move, the queue pops the
    gang a sort of every active gang by (borrowing, -priority, share, created, key)
    names, and /debug's snapshot lists them in that order."""
    queue = GangQueue()
    gangs: dict[str, tuple[int, float, bool, str]] = {}  # priority, created, borrowing, ns
    shares: dict[str, float] = {}

    def expected() -> list[str]:
        return [
            key
            for *_, key in sorted(
                (borrow, -prio, shares.get(ns, 0.0) if borrow else 0.0, created, key)
                for key, (prio, created, borrow, ns) in gangs.items()
            )
        ]

    for op in ops:
        if op[0] == "add":
            _, gang, priority, created, borrow = op
            key = f"ns{gang % 3}/g{gang}"
            namespace = key.split("/")[0]
            queue.add_or_update(key, priority, float(created), 0)
            queue.set_borrowing(key, borrow, namespace)
            gangs[key] = (priority, float(created), borrow, namespace)
        elif op[0] == "share":
            _, ns, share = op
            shares[f"ns{ns}"] = share / 4
            queue.set_share(f"ns{ns}", share / 4)
        elif op[0] == "remove":
            key = f"ns{op[1] % 3}/g{op[1]}"
            queue.remove(key)
            gangs.pop(key, None)
        else:
            want = expected()
            got = queue.pop(0)
            assert got == (want[0] if want else None)
            if got is not None:
                queue.done(got)
                del gangs[got]
        assert [s.key for s in queue.snapshot()] == expected()


# --- the share --------------------------------------------------------------------------


def test_the_dominant_share_is_the_largest_borrowed_fraction_of_all_mins_per_weight() -> None:
    book = QuotaBook()
    book.apply("ADDED", quota_obj("lender", min_={"nvidia.com/gpu": 8, "cpu": "32"}))
    borrower = quota_obj("a", min_={"nvidia.com/gpu": 0, "cpu": "0"})
    borrower["metadata"]["annotations"] = {WEIGHT_ANNOTATION: "2"}
    book.apply("ADDED", borrower)
    book.ledger.charge("p", "a", {GPU: 2000, "cpu": 16000})  # 2 of 8 GPUs, 16 of 32 cpu
    assert dominant_share(book, "a") == 0.5 / 2  # cpu dominates; weight 2
    assert dominant_share(book, "lender") == 0.0  # within its min
    assert dominant_share(book, "nobody") == 0.0


# --- through the core: idle capacity divided by share over time ----------------------------

POOL_GPUS = 16  # the lender's min, idle: all that may be borrowed


def _quota(namespace: str, min_gpus: int, weight: int) -> dict[str, Any]:
    obj = quota_obj(namespace, min_={"nvidia.com/gpu": min_gpus})
    obj["metadata"]["annotations"] = {WEIGHT_ANNOTATION: str(weight)}
    return obj


def _settle(core: SchedulingCore, now: float) -> None:
    while (attempt := core.schedule_next(now)) is not None:
        if isinstance(attempt.result, Plan):
            for placement in attempt.result.placements:
                core.bound(placement)


def _borrowed(core: SchedulingCore, namespace: str) -> int:
    quota = core.cache.quotas.governing(namespace)
    assert quota is not None
    return beyond_min(quota, core.cache.quotas.ledger.used(namespace)).get(GPU, 0) // 1000


# Arrivals in runs of one namespace (gangs of one size): a queue served by age alone
# hands the pool to whoever's run came first.
runs = st.lists(
    st.tuples(st.sampled_from("ab"), st.integers(1, 6), st.integers(1, 4)), min_size=2, max_size=6
)


@settings(max_examples=80, deadline=None)
@given(
    runs=runs,
    finishes=st.lists(st.integers(0, 1000), max_size=16),
    weights=st.sampled_from([(1, 1), (2, 1)]),
)
def test_two_borrowers_share_the_pool_by_weight_whatever_the_arrival_order(
    runs: list[tuple[str, int, int]], finishes: list[int], weights: tuple[int, int]
) -> None:
    """Namespaces a and b (min 0, weights 1:1 or 2:1) borrow a lender's idle min of 16
    GPUs with gangs of 1 to 4 one-GPU members, queued in a random order (every gang
    waiting from the start, so arrival order alone would hand the pool to whoever came
    first); running gangs finish one at a time. Whenever both still have gangs waiting
    and the scheduler has placed what it can, their borrowed GPUs per weight differ by
    at most the largest gang per the smallest weight."""
    arrivals = [(namespace, size) for namespace, count, size in runs for _ in range(count)]
    core = SchedulingCore(build_profile())
    for i in range(4):
        core.apply_node(ADDED, node_obj(f"n{i}", gpus=8), 0)
    core.apply_elasticquota(ADDED, _quota("lender", POOL_GPUS, 1), 0)
    core.apply_elasticquota(ADDED, _quota("a", 0, weights[0]), 0)
    core.apply_elasticquota(ADDED, _quota("b", 0, weights[1]), 0)
    pods: dict[str, list[dict[str, Any]]] = {}
    for i, (namespace, size) in enumerate(arrivals):
        gang = f"g{i}"
        pods[f"{namespace}/{gang}"] = [
            pod_obj(
                f"{gang}-{m}",
                namespace=namespace,
                gang=gang,
                min_member=size,
                gpus=1,
                created=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
            )
            for m in range(size)
        ]
        for pod in pods[f"{namespace}/{gang}"]:
            core.apply_pod(ADDED, pod, 0)
    bound = max(size for _, size in arrivals) / min(weights)
    weight = dict(zip("ab", weights, strict=True))

    def check() -> None:
        waiting = {key.split("/")[0] for key, gang in core.gangs.items() if gang.pending}
        if waiting >= {"a", "b"}:
            per_weight = [_borrowed(core, ns) / weight[ns] for ns in "ab"]
            assert abs(per_weight[0] - per_weight[1]) <= bound, per_weight

    now = 0.0
    _settle(core, now)
    check()
    for pick in finishes:
        running = sorted(key for key, gang in core.gangs.items() if gang.bound and not gang.pending)
        if not running:
            break
        key = running[pick % len(running)]
        now += 1000.0  # past any backoff
        for pod in pods.pop(key):
            core.apply_pod(DELETED, pod, now)
        _settle(core, now)
        check()


# --- the cost: what a cycle does not redo ----------------------------------------------------


def test_a_cycle_recomputes_the_shares_of_the_namespaces_that_changed_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """200 borrowing gangs of one namespace and 20 other namespaces with a quota: a
    cycle that places one gang recomputes one share, and moving that namespace in the
    queue re-inserts one group, not its 200 gangs."""
    computed: list[str] = []
    original = quotas_module.dominant_share

    def counting(book: QuotaBook, namespace: str) -> float:
        computed.append(namespace)
        return original(book, namespace)

    monkeypatch.setattr(quotas_module, "dominant_share", counting)
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n0", gpus=8), 0)
    core.apply_elasticquota(ADDED, _quota("lender", 8, 1), 0)
    for i in range(20):
        core.apply_elasticquota(ADDED, _quota(f"team-{i}", 0, 1), 0)
        running = pod_obj("r", namespace=f"team-{i}", cpu="1", node_name="n0", phase="Running")
        core.apply_pod(ADDED, running, 0)
    for i in range(200):
        core.apply_pod(ADDED, pod_obj(f"g{i}", namespace="team-0", gpus=1), 0)
    core.schedule_next(0)  # the first cycle: every namespace in use gets its share
    computed.clear()
    moved: list[object] = []
    heads = GangQueue._head
    monkeypatch.setattr(GangQueue, "_head", lambda self, g: moved.append(g) or heads(self, g))
    attempt = core.schedule_next(0)  # team-0's first gang was assumed: its share moved
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert attempt.gang.namespace == "team-0" and core.queue.share("team-0") > 0
    assert computed == ["team-0"]
    # One group out and back in at set_share; the popped head out, the next one in.
    assert len(moved) == 4, moved
