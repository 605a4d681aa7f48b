"""The starvation guard against a tenant who games it (docs/security.md, "Tenant:
quotas, reclaim and the starvation guard"): a gang deleted and recreated under the same
name is a new gang whose wait starts over. It neither keeps the old one's clock nor
its reservation, and it is not left out of the guard for good either."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType
from scheduler.gangs.queue import ClusterChange
from tests.cache.test_quota import quota_obj
from tests.factories import pod_obj
from tests.scheduler.test_starvation import core_with, run
from tests.signed import signed

ADDED, DELETED = EventType.ADDED, EventType.DELETED
GUARD = 100.0
KEY = "default/big"


def big(incarnation: int) -> list[dict[str, Any]]:
    """A gang of one 8-GPU pod; each incarnation has pods of new uids."""
    return [pod_obj("big-0", gang="big", min_member=1, gpus=8, uid=f"big-0-{incarnation}")]


def blocked_core() -> Any:
    """One node of 8 GPUs, 4 of them held by a running gang of ours: `big` never fits
    until it finishes, so it starves after GUARD seconds."""
    core = core_with(1, GUARD)
    for pod in [pod_obj("run-0", gang="run", min_member=1, gpus=4)]:
        core.apply_pod(ADDED, pod, 0.0)
    run(core, 0.0)
    return core


def submit(core: Any, incarnation: int, now: float) -> None:
    for pod in big(incarnation):
        core.apply_pod(ADDED, pod, now)
    run(core, now)


def delete(core: Any, incarnation: int, now: float) -> None:
    for pod in big(incarnation):
        core.apply_pod(DELETED, pod, now)
    run(core, now)


def reserved(core: Any, now: float) -> bool:
    run(core, now)
    return KEY in core.starvation_reservations()


def test_the_plain_case_is_reserved_after_the_guard() -> None:
    core = blocked_core()
    submit(core, 1, 1.0)
    assert not reserved(core, 50.0)
    assert reserved(core, 102.0)


def test_a_gang_recreated_after_its_old_due_time_still_starves_in_time() -> None:
    core = blocked_core()
    submit(core, 1, 1.0)
    delete(core, 1, 10.0)
    assert not reserved(core, 150.0)  # the first one's due time passes while it is gone
    submit(core, 2, 200.0)
    assert not reserved(core, 250.0)
    assert reserved(core, 302.0), "the recreated gang was left out of the guard for good"


def test_a_gang_recreated_before_its_due_time_does_not_keep_the_old_clock() -> None:
    core = blocked_core()
    submit(core, 1, 1.0)
    delete(core, 1, 10.0)
    submit(core, 2, 60.0)
    assert not reserved(core, 120.0), "the recreated gang kept the first one's wait"
    assert reserved(core, 162.0)


def test_a_reserved_gang_recreated_does_not_keep_the_reservation() -> None:
    core = blocked_core()
    submit(core, 1, 1.0)
    assert reserved(core, 102.0)
    delete(core, 1, 110.0)
    submit(core, 2, 111.0)
    assert not reserved(core, 150.0), "the recreated gang inherited the reservation"
    assert reserved(core, 212.0)


def test_a_starving_gang_recreated_before_its_reservation_starts_over() -> None:
    core = blocked_core()
    submit(core, 1, 1.0)
    delete(core, 1, 90.0)
    submit(core, 2, 95.0)
    assert not reserved(core, 150.0)
    assert reserved(core, 196.0)


def test_gangs_that_fail_once_and_go_leave_nothing_behind() -> None:
    """A tenant creating many short-lived gangs of new names must not grow the guard's
    memory without bound."""
    core = blocked_core()
    for i in range(50):
        name = f"burst{i}"
        pod = pod_obj(f"{name}-0", gang=name, min_member=1, gpus=8)
        core.apply_pod(ADDED, pod, float(i))
        run(core, float(i))
        core.apply_pod(DELETED, pod, float(i) + 0.5)
    run(core, 500.0)
    guard = core.starvation
    remembered = set(guard.remembered())
    assert remembered <= {KEY}, remembered


def test_a_gang_that_never_fits_is_not_searched_for_a_reservation_on_every_retry() -> None:
    """A gang that would not fit even on a drained cluster (too big, an impossible
    selector) gets no reservation; the search that found so (about 2 log2(nodes)
    planning passes) is not repeated on each of its retries, or a tenant's impossible
    gangs would multiply the scheduler's work by that much."""
    core = core_with(4, GUARD)
    for pod in [pod_obj("huge-0", gang="huge", min_member=1, gpus=16)]:
        core.apply_pod(ADDED, pod, 0.0)
    searches = 0
    search = core.starvation._soonest

    def counted(*args: Any) -> Any:
        nonlocal searches
        searches += 1
        return search(*args)

    core.starvation._soonest = counted  # type: ignore[method-assign]
    for second in range(1, 400):
        core.queue.cluster_changed(float(second), ClusterChange.NODE_ADDED)
        assert not reserved(core, float(second))
    # One search per guard period at most (400 s, a guard of 100 s).
    assert searches <= 4, searches


def test_a_reservation_for_a_borrowing_gang_does_not_hold_back_a_guaranteed_one() -> None:
    """A guarantee beats priority (docs/quotas.md), and so a reservation: a tenant whose
    gang borrows and waited past the guard must not keep another team from the `min` it
    is guaranteed. (The guaranteed team would otherwise wait for the borrower to run,
    then reclaim from it: the borrower's run is wasted and the guard starts over.)"""
    core = core_with(2, GUARD)  # two nodes of 8 GPUs
    for namespace, least in (("team", 16), ("borrower", 0)):
        quota = quota_obj(namespace, {"nvidia.com/gpu": 16}, {"nvidia.com/gpu": least})
        core.apply_elasticquota(ADDED, quota, 0.0)
    # Work of a namespace outside the quotas holds 4 GPUs on each node (bound by the
    # scheduler: it will leave).
    for i in range(2):
        pod = pod_obj(
            f"other-{i}",
            namespace="other",
            gang=f"other{i}",
            min_member=1,
            gpus=4,
            node_name=f"n{i}",
            phase="Running",
        )
        core.apply_pod(ADDED, signed(pod), 0.0)
    run(core, 0.0)
    # The borrower's 8-GPU gang does not fit until one node drains: it starves.
    borrow = pod_obj("b-0", namespace="borrower", gang="b", min_member=1, gpus=8)
    core.apply_pod(ADDED, borrow, 1.0)
    run(core, 1.0)
    assert reserved_for(core, "borrower/b")
    # The team, within its min, asks for 8 GPUs: 4 free on each node.
    for i in range(2):
        pod = pod_obj(f"t-{i}", namespace="team", gang="t", min_member=2, gpus=4)
        core.apply_pod(ADDED, pod, 110.0)
    run(core, 110.0)
    placed = [p.name for p in core.cache.pods() if p.namespace == "team" and p.node_name]
    assert sorted(placed) == ["t-0", "t-1"], placed


def reserved_for(core: Any, key: str) -> bool:
    run(core, 102.0)
    return key in core.starvation_reservations()


def test_a_namespace_that_gives_up_its_reservation_does_not_get_the_next_one_first() -> None:
    """A tenant that keeps several large gangs waiting, and deletes the reserved one
    before it fits, must not hand the reservation to its next gang ahead of other
    namespaces' starving gangs: nodes would drain for it without end. Among starving
    gangs of one priority, namespaces take turns."""
    core = blocked_core()
    for namespace, name, created in (
        ("t", "t1", "00:01"),
        ("t", "t2", "00:02"),
        ("u", "u1", "00:03"),
    ):
        pod = pod_obj(
            f"{name}-0",
            namespace=namespace,
            gang=name,
            min_member=1,
            gpus=8,
            created=f"2026-01-01T00:{created}:00Z",
        )
        core.apply_pod(ADDED, pod, 1.0)
    run(core, 1.0)
    run(core, 102.0)
    assert set(core.starvation_reservations()) == {"t/t1"}
    gone = pod_obj("t1-0", namespace="t", gang="t1", min_member=1, gpus=8)
    core.apply_pod(DELETED, gone, 110.0)
    run(core, 111.0)
    assert set(core.starvation_reservations()) == {"u/u1"}, core.starvation_reservations()
