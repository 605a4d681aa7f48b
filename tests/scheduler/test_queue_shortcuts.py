"""GangQueue.set_borrowing's shortcut (a gang that neither borrowed nor borrows keeps its
place when only its namespace is set) against the slow path: leaving the active index
and entering it again on every change."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.gangs.queue import ClusterChange, GangQueue

KEYS = [f"ns{index % 3}/g{index}" for index in range(6)]


class ReenteringQueue(GangQueue):
    def set_borrowing(self, key: str, borrowing: bool, namespace: str = "") -> None:
        entry = self._entries.get(key)
        if entry is None or (entry.borrowing, entry.namespace) == (borrowing, namespace):
            return
        if entry.state == "active":
            self._leave(entry)
            entry.borrowing, entry.namespace = borrowing, namespace
            self._enter(entry)
        else:
            entry.borrowing, entry.namespace = borrowing, namespace


steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(KEYS), st.integers(0, 2), st.integers(0, 3)),
        st.tuples(
            st.just("borrow"),
            st.sampled_from(KEYS),
            st.booleans(),
            st.sampled_from(["", "ns0", "ns1", "ns2"]),
        ),
        st.tuples(st.just("share"), st.sampled_from(["ns0", "ns1"]), st.floats(0, 2)),
        st.tuples(st.just("pop")),
        st.tuples(st.just("failed"), st.sampled_from(KEYS)),
        st.tuples(st.just("changed")),
        st.tuples(st.just("remove"), st.sampled_from(KEYS)),
    ),
    max_size=40,
)


def run(queue: GangQueue, script: list[tuple[Any, ...]]) -> list[object]:
    seen: list[object] = []
    for now, step in enumerate(script):
        kind = step[0]
        if kind == "add":
            queue.add_or_update(step[1], step[2], float(step[3]), float(now))
        elif kind == "borrow":
            queue.set_borrowing(step[1], step[2], step[3])
        elif kind == "share":
            queue.set_share(step[1], step[2])
        elif kind == "pop":
            seen.append(queue.pop(float(now)))
        elif kind == "failed":
            queue.failed(step[1], float(now), "no room")
        elif kind == "changed":
            queue.cluster_changed(float(now), ClusterChange.NODE_ADDED)
        else:
            queue.remove(step[1])
        seen.append(queue.snapshot())
    return seen


@settings(max_examples=300, deadline=None)
@given(script=steps)
def test_the_queue_orders_as_when_every_change_reenters(script: list[tuple[Any, ...]]) -> None:
    assert run(GangQueue(), script) == run(ReenteringQueue(), script)
