"""The gang queue: order, backoff, unschedulable waiting, cluster changes, no spin."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.gangs.queue import ClusterChange, GangQueue


def failed_once(queue: GangQueue, key: str, now: float, reason: str = "no room") -> None:
    assert queue.pop(now) == key
    queue.failed(key, now, reason)


def drain(queue: GangQueue, now: float) -> list[str]:
    popped = []
    while (key := queue.pop(now)) is not None:
        popped.append(key)
    return popped


# --- order ----------------------------------------------------------------------------


def test_higher_priority_first_then_older_then_key() -> None:
    queue = GangQueue()
    queue.add_or_update("ns/young-low", priority=0, created=20.0, now=0)
    queue.add_or_update("ns/old-low", priority=0, created=10.0, now=0)
    queue.add_or_update("ns/young-high", priority=100, created=30.0, now=0)
    queue.add_or_update("ns/b-tie", priority=0, created=10.0, now=0)
    assert drain(queue, now=0) == ["ns/young-high", "ns/b-tie", "ns/old-low", "ns/young-low"]


def test_update_reorders_an_active_gang() -> None:
    queue = GangQueue()
    queue.add_or_update("a", 0, 1.0, now=0)
    queue.add_or_update("b", 0, 2.0, now=0)
    queue.add_or_update("b", 10, 2.0, now=1)
    assert drain(queue, now=1) == ["b", "a"]


def test_update_keeps_state_and_attempts() -> None:
    queue = GangQueue()
    queue.add_or_update("a", 0, 1.0, now=0)
    failed_once(queue, "a", now=0)
    queue.add_or_update("a", 5, 0.5, now=1)
    assert queue.state("a") == "unschedulable"
    assert queue.attempts("a") == 1
    (status,) = queue.snapshot()
    assert (status.priority, status.created) == (5, 0.5)


def test_pop_marks_in_flight_and_done_forgets() -> None:
    queue = GangQueue()
    queue.add_or_update("a", 0, 1.0, now=0)
    assert queue.pop(0) == "a"
    assert queue.state("a") == "in_flight"
    assert "a" in queue and len(queue) == 1
    assert queue.pop(0) is None  # in flight is not handed out twice
    queue.done("a")
    assert "a" not in queue and len(queue) == 0
    assert queue.state("a") is None and queue.attempts("a") == 0


def test_done_resets_attempts() -> None:
    queue = GangQueue()
    queue.add_or_update("a", 0, 1.0, now=0)
    failed_once(queue, "a", now=0)
    queue.cluster_changed(1, ClusterChange.NODE_ADDED)
    assert queue.pop(5) == "a"
    queue.done("a")
    queue.add_or_update("a", 0, 1.0, now=6)
    assert queue.attempts("a") == 0 and queue.state("a") == "active"


def test_remove_from_every_state() -> None:
    queue = GangQueue()
    for key in "abcd":
        queue.add_or_update(key, 0, ord(key), now=0)
    failed_once(queue, "a", now=0)  # unschedulable
    failed_once(queue, "b", now=0)
    queue.cluster_changed(0, ClusterChange.GANG_CHANGED, "b")  # backoff
    assert queue.pop(0) == "c"  # in flight; d stays active
    for key in "abcd":
        queue.remove(key)
    assert len(queue) == 0
    assert queue.pop(1000) is None
    assert queue.next_wakeup(1000) is None
    queue.failed("c", 1, "late answer for a removed gang")  # ignored
    queue.done("c")
    assert "c" not in queue


# --- backoff --------------------------------------------------------------------------


def test_backoff_doubles_and_is_capped() -> None:
    queue = GangQueue()
    assert [queue.backoff_seconds(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert queue.backoff_seconds(10**6) == 60  # no overflow however many attempts


def test_configured_backoff() -> None:
    queue = GangQueue(initial_backoff_seconds=0.5, max_backoff_seconds=3)
    assert [queue.backoff_seconds(n) for n in range(1, 5)] == [0.5, 1, 2, 3]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_backoff_seconds": 0},
        {"initial_backoff_seconds": 5, "max_backoff_seconds": 1},
        {"max_unschedulable_seconds": 0},
    ],
)
def test_invalid_configuration_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        GangQueue(**kwargs)


def test_failure_records_attempts_reason_and_retry_time() -> None:
    queue = GangQueue()
    queue.add_or_update("a", 0, 1.0, now=0)
    now = 0.0
    assert queue.pop(now) == "a"
    for attempt in range(1, 9):
        queue.failed("a", now, reason=f"try {attempt}")
        assert queue.state("a") == "unschedulable"
        assert queue.attempts("a") == attempt
        assert queue.last_reason("a") == f"try {attempt}"
        (status,) = queue.snapshot()
        assert status.retry_at == now + min(2 ** (attempt - 1), 60)
        assert status.unschedulable_since == now
        # a change that could help: retried when the backoff expires, not before
        queue.cluster_changed(now, ClusterChange.POD_DELETED)
        assert queue.state("a") == "backoff"
        assert queue.pop(status.retry_at - 0.001) is None
        assert queue.next_wakeup(now) == status.retry_at
        now = status.retry_at
        assert queue.pop(now) == "a"


def test_cluster_change_moves_unschedulable_to_backoff_not_active() -> None:
    queue = GangQueue()
    queue.add_or_update("a", 0, 1.0, now=0)
    queue.add_or_update("b", 0, 2.0, now=0)
    failed_once(queue, "a", now=10)
    failed_once(queue, "b", now=10)
    assert queue.cluster_changed(10.2, ClusterChange.NODE_ADDED) == 2
    assert queue.state("a") == "backoff" and queue.state("b") == "backoff"
    assert queue.pop(10.5) is None
    assert drain(queue, 11) == ["a", "b"]


def test_gang_changed_moves_only_that_gang() -> None:
    queue = GangQueue()
    queue.add_or_update("a", 0, 1.0, now=0)
    queue.add_or_update("b", 0, 2.0, now=0)
    failed_once(queue, "a", now=0)
    failed_once(queue, "b", now=0)
    assert queue.cluster_changed(0, ClusterChange.GANG_CHANGED, "b") == 1
    assert queue.state("a") == "unschedulable"
    assert queue.state("b") == "backoff"
    assert queue.cluster_changed(0, ClusterChange.GANG_CHANGED, "unknown") == 0
    with pytest.raises(ValueError):
        queue.cluster_changed(0, ClusterChange.GANG_CHANGED)


def test_cluster_change_does_not_touch_active_or_backoff() -> None:
    queue = GangQueue()
    queue.add_or_update("a", 0, 1.0, now=0)
    assert queue.cluster_changed(0, ClusterChange.NODE_UPDATED) == 0
    assert queue.state("a") == "active"


def test_change_while_in_flight_is_not_lost() -> None:
    queue = GangQueue()
    queue.add_or_update("a", 0, 1.0, now=0)
    assert queue.pop(0) == "a"
    queue.cluster_changed(0.1, ClusterChange.NODE_ADDED)  # arrives during placement
    queue.failed("a", 0.2, "no room")
    # the failed attempt may not have seen the new node: retry after the backoff
    assert queue.state("a") == "backoff"
    assert queue.pop(1.2) == "a"
    queue.failed("a", 1.3, "no room")  # the flag was used up: now it waits
    assert queue.state("a") == "unschedulable"


def test_add_or_update_of_in_flight_gang_keeps_it_in_flight() -> None:
    queue = GangQueue()
    queue.add_or_update("a", 0, 1.0, now=0)
    assert queue.pop(0) == "a"
    queue.add_or_update("a", 7, 1.0, now=0.1)
    assert queue.state("a") == "in_flight"
    assert queue.pop(0.1) is None


# --- unschedulable timeout ------------------------------------------------------------


def test_flush_after_max_unschedulable() -> None:
    queue = GangQueue(max_unschedulable_seconds=300)
    queue.add_or_update("a", 0, 1.0, now=0)
    failed_once(queue, "a", now=100)
    assert queue.next_wakeup(100) == 400
    queue.flush(399.9)
    assert queue.state("a") == "unschedulable"
    queue.flush(400)
    assert queue.state("a") == "active"
    assert queue.pop(400) == "a"


def test_pop_flushes_by_itself() -> None:
    queue = GangQueue(max_unschedulable_seconds=30)
    queue.add_or_update("a", 0, 1.0, now=0)
    failed_once(queue, "a", now=0)
    assert queue.pop(29) is None
    assert queue.pop(30) == "a"


def test_flush_respects_a_longer_backoff() -> None:
    queue = GangQueue(
        initial_backoff_seconds=100, max_backoff_seconds=100, max_unschedulable_seconds=30
    )
    queue.add_or_update("a", 0, 1.0, now=0)
    failed_once(queue, "a", now=0)
    queue.flush(30)
    assert queue.state("a") == "backoff"
    assert queue.next_wakeup(30) == 100
    assert queue.pop(99) is None
    assert queue.pop(100) == "a"


# --- no spin --------------------------------------------------------------------------


def test_pop_returns_none_while_all_gangs_wait() -> None:
    queue = GangQueue()
    for key in "abc":
        queue.add_or_update(key, 0, 1.0, now=0)
        failed_once(queue, key, now=0)
    for _ in range(1000):
        assert queue.pop(0.5) is None
    assert queue.next_wakeup(0.5) == 300.0
    assert queue.counts() == {"active": 0, "in_flight": 0, "backoff": 0, "unschedulable": 3}


def test_next_wakeup() -> None:
    queue = GangQueue()
    assert queue.next_wakeup(0) is None
    queue.add_or_update("a", 0, 1.0, now=0)
    assert queue.next_wakeup(5) == 5  # something to do now
    assert queue.pop(5) == "a"
    assert queue.next_wakeup(5) is None  # in flight: only its answer wakes the loop
    queue.failed("a", 5, "no room")
    assert queue.next_wakeup(5) == 305
    queue.cluster_changed(6, ClusterChange.NODE_ADDED)
    assert queue.next_wakeup(6) == 6  # its 1 s backoff expires at 6


def test_flapping_cluster_cannot_make_the_loop_spin() -> None:
    """A loop that retries whenever it may, under a change every 10 ms for 10 minutes,
    tries the never-fitting gang only as often as its capped backoff allows."""
    queue = GangQueue()
    queue.add_or_update("big", 0, 1.0, now=0)
    tries = 0
    now = 0.0
    while now < 600:
        key = queue.pop(now)
        if key is not None:
            tries += 1
            queue.failed(key, now, "0/12 nodes are available")
        queue.cluster_changed(now, ClusterChange.NODE_UPDATED)
        wakeup = queue.next_wakeup(now)
        assert wakeup is not None
        now = min(wakeup, now + 0.01) if wakeup > now else now + 0.01
    # tries at 0, 1, 3, 7, 15, 31, 63 s (backoff doubling), then every 60 s up to 543 s
    assert tries == 15


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "pop", "fail", "done", "change", "gang", "flush", "remove"]),
            st.sampled_from(["a", "b", "c", "d"]),
            st.floats(0, 5),
        ),
        max_size=60,
    )
)
def test_random_operations_keep_the_queue_consistent(
    steps: list[tuple[str, str, float]],
) -> None:
    queue = GangQueue(max_unschedulable_seconds=20)
    now = 0.0
    in_flight: set[str] = set()
    for action, key, delta in steps:
        now += delta
        if action == "add":
            queue.add_or_update(key, int(delta), delta, now)
        elif action == "pop":
            popped = queue.pop(now)
            if popped is not None:
                assert popped not in in_flight
                in_flight.add(popped)
        elif action == "fail":
            queue.failed(key, now, "no room")
            in_flight.discard(key)
        elif action == "done":
            queue.done(key)
            in_flight.discard(key)
        elif action == "change":
            queue.cluster_changed(now, ClusterChange.NODE_ADDED)
        elif action == "gang":
            queue.cluster_changed(now, ClusterChange.GANG_CHANGED, key)
        elif action == "flush":
            queue.flush(now)
        else:
            queue.remove(key)
            in_flight.discard(key)
        statuses = queue.snapshot()
        assert len(statuses) == len(queue) == len({s.key for s in statuses})
        assert {s.key for s in statuses if s.state == "in_flight"} == in_flight
        assert sum(queue.counts().values()) == len(queue)
        wakeup = queue.next_wakeup(now)
        waiting = [s for s in statuses if s.state in ("active", "backoff", "unschedulable")]
        assert (wakeup is None) == (not waiting)
        for status in statuses:
            if status.state == "backoff":
                assert status.retry_at is not None and wakeup is not None
                assert wakeup <= max(now, status.retry_at)
            if status.state == "unschedulable":
                assert status.unschedulable_since is not None and wakeup is not None
                assert wakeup <= max(now, status.unschedulable_since + 20)


def test_snapshot_lists_every_state_in_order() -> None:
    queue = GangQueue()
    for key, created in [("a", 0.0), ("b", 1.0), ("c", 2.0), ("d", 3.0)]:
        queue.add_or_update(key, 0, created, now=0)
    failed_once(queue, "a", now=0)
    failed_once(queue, "b", now=0)
    queue.cluster_changed(0, ClusterChange.GANG_CHANGED, "a")
    assert queue.pop(0) == "c"
    statuses = queue.snapshot()
    assert [(s.key, s.state) for s in statuses] == [
        ("c", "in_flight"),
        ("d", "active"),
        ("a", "backoff"),
        ("b", "unschedulable"),
    ]
    assert statuses[3].last_reason == "no room" and statuses[3].attempts == 1
    assert statuses[2].retry_at == 1.0
    assert queue.last_reason("d") is None


def test_a_gang_is_due_exactly_when_next_wakeup_says() -> None:
    """`since + wait` and `now - wait` round differently for these numbers; the flush
    must use the same sum next_wakeup reports, or a loop sleeping until then spins."""
    queue = GangQueue()
    queue.add_or_update("sim/x", 0, 0.0, 0.0)
    assert queue.pop(16000.0) == "sim/x"
    queue.failed("sim/x", 16286.454, "no room")
    wakeup = queue.next_wakeup(16286.454)
    assert wakeup == 16286.454 + queue.max_unschedulable_seconds
    assert queue.pop(wakeup) == "sim/x"
