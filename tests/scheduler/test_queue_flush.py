"""The unschedulable flush never puts hopeless work ahead of new work (scheduler/gangs/
queue.py): gangs back from the flush alone wait behind every other active gang, however
many and however old they are. Counted in attempts (pops), on the queue's own clock."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import EventType
from scheduler.gangs.queue import ClusterChange, GangQueue
from scheduler.planner.result import Plan
from tests.factories import pod_obj
from tests.scheduler.cores import core_on_nodes
from tests.scheduler.cores import run_binding as run

WAIT = 300.0  # maxUnschedulableSeconds, the default


def hopeless_queue(count: int) -> GangQueue:
    """`count` old gangs, each tried once at t=0 and failed."""
    queue = GangQueue(max_unschedulable_seconds=WAIT)
    for i in range(count):
        queue.add_or_update(f"old/{i:05d}", 0, float(i), now=0.0)
    for _ in range(count):
        key = queue.pop(0.0)
        assert key is not None
        queue.failed(key, 0.0, "0/12 nodes are available")
    return queue


def test_a_new_gang_is_attempted_before_three_thousand_flushed_ones() -> None:
    queue = hopeless_queue(3000)
    queue.add_or_update("new/fits", 0, 10_000.0, now=WAIT)  # created after all of them
    attempts = []
    while (key := queue.pop(WAIT)) is not None:
        attempts.append(key)
        if key != "new/fits":
            queue.failed(key, WAIT, "0/12 nodes are available")
    assert attempts[0] == "new/fits", f"attempted after {attempts.index('new/fits')} others"
    assert sorted(attempts[1:]) == [f"old/{i:05d}" for i in range(3000)]  # all still tried


def test_new_gangs_arriving_while_the_flushed_ones_are_tried_go_first_too() -> None:
    queue = hopeless_queue(10)
    assert queue.pop(WAIT) == "old/00000"  # nothing else active: flushed work is tried
    queue.failed("old/00000", WAIT, "no room")
    queue.add_or_update("new/a", 0, 99.0, now=WAIT)
    queue.add_or_update("new/b", 5, 98.0, now=WAIT)
    assert [queue.pop(WAIT), queue.pop(WAIT)] == ["new/b", "new/a"]
    assert queue.pop(WAIT) == "old/00001"


def test_a_change_that_could_help_puts_a_flushed_gang_back_in_its_order() -> None:
    queue = hopeless_queue(3)
    queue.add_or_update("new/x", 0, 50.0, now=WAIT)
    queue.flush(WAIT)
    helped = queue.cluster_changed(
        WAIT, ClusterChange.POD_DELETED, could_help=lambda key: key == "old/00002"
    )
    assert helped == 1
    assert [queue.pop(WAIT) for _ in range(2)] == ["old/00002", "new/x"]
    assert queue.pop(WAIT) == "old/00000"


def test_a_flushed_gang_still_backing_off_comes_back_behind_new_work() -> None:
    queue = GangQueue(
        initial_backoff_seconds=100, max_backoff_seconds=100, max_unschedulable_seconds=30
    )
    queue.add_or_update("old/a", 0, 1.0, now=0)
    assert queue.pop(0) == "old/a"
    queue.failed("old/a", 0, "no room")
    queue.flush(30)
    assert queue.state("old/a") == "backoff"
    queue.add_or_update("new/b", 0, 50.0, now=100)
    assert [queue.pop(100), queue.pop(100)] == ["new/b", "old/a"]


def test_through_the_core_a_fitting_gang_is_planned_before_the_flushed_impossible_ones() -> None:
    """Thirty gangs asking for more GPUs than any node has, created long before; past
    the flush a new gang that fits is the first attempt."""
    core = core_on_nodes(2)
    for i in range(30):
        pod = pod_obj(
            f"huge{i}-0",
            gang=f"huge{i}",
            min_member=1,
            gpus=16,
            created=f"2025-01-01T00:{i:02d}:00Z",
        )
        core.apply_pod(EventType.ADDED, pod, 0.0)
    assert len(run(core, 0.0)) == 30
    fits = pod_obj("fits-0", gang="fits", min_member=1, gpus=1, created="2026-06-01T00:00:00Z")
    core.apply_pod(EventType.ADDED, fits, WAIT)
    attempts = run(core, WAIT)
    assert attempts[0].gang.key == "default/fits" and isinstance(attempts[0].result, Plan)
    assert len(attempts) == 31  # the flushed ones are still tried, after it


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["new", "pop", "change", "advance"]),
            st.integers(0, 3),
        ),
        max_size=80,
    )
)
def test_no_flushed_gang_is_popped_while_another_gang_is_active(
    steps: list[tuple[str, int]],
) -> None:
    """Whatever the order of arrivals, failures, changes and flushes: a pop returns a
    gang the flush alone brought back only when no other gang is active."""
    queue = GangQueue(max_unschedulable_seconds=20)
    now, made = 0.0, 0
    for action, value in steps:
        if action == "new":
            queue.add_or_update(f"g{made}", value, float(-made), now)
            made += 1
        elif action == "change":
            helps = value == 0
            queue.cluster_changed(now, ClusterChange.NODE_ADDED, could_help=lambda _, h=helps: h)
        elif action == "advance":
            now += 10.0 * value
        else:
            queue.flush(now)
            statuses = queue.snapshot()
            flushed = {k for *_, k in queue._flushed}
            others = [s.key for s in statuses if s.state == "active" and s.key not in flushed]
            key = queue.pop(now)
            if key is not None and key in flushed:
                assert not others, f"{key} popped before {others}"
            if key is not None:
                queue.failed(key, now, "no room")
