"""Borrowing beyond min with a weighted fair share (policies/fair_share.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cache.quota import GPU, QuotaBook, quota_from_api
from policies.fair_share import BorrowRoom, borrow_room, borrowing, refuse_borrowing
from tests.cache.test_quota import quota_obj


def book_with(quotas: dict[str, tuple[int, float]], used: dict[str, int]) -> QuotaBook:
    """Quotas by namespace (GPU min, weight) with max 100 GPUs, and GPU usage."""
    book = QuotaBook()
    for namespace, (floor, weight) in quotas.items():
        obj = quota_obj(namespace, {"nvidia.com/gpu": 100}, {"nvidia.com/gpu": floor})
        obj["metadata"]["annotations"] = {"gang-scheduler.io/quota-weight": str(weight)}
        book.apply("ADDED", obj)
    for namespace, gpus in used.items():
        book.ledger.charge(f"pod-{namespace}", namespace, {GPU: gpus * 1000})
    return book


def test_within_min_nothing_is_borrowed() -> None:
    book = book_with({"a": (4, 1), "b": (4, 1)}, {"a": 2, "b": 4})
    assert not borrowing(book, "a", {GPU: 2000})
    assert refuse_borrowing(book, "a", {GPU: 2000}) is None
    assert borrowing(book, "a", {GPU: 3000})


def test_borrowing_takes_only_what_other_quotas_leave_idle() -> None:
    book = book_with({"a": (4, 1), "b": (4, 1)}, {"a": 4, "b": 2})
    refusal = refuse_borrowing(book, "a", {GPU: 4000})
    assert refusal is not None and not refusal.fair
    assert refusal.describe() == (
        "would borrow 4 nvidia.com/gpu beyond min, only 2 idle in other quotas"
    )
    assert refuse_borrowing(book, "a", {GPU: 2000}) is None


def test_idle_capacity_is_divided_by_weight_between_borrowers() -> None:
    # c leaves 8 idle; b already borrows 1; a at its min asks 6 more.
    quotas = {"a": (4, 1.0), "b": (4, 1.0), "c": (8, 1.0)}
    book = book_with(quotas, {"a": 4, "b": 5})
    refusal = refuse_borrowing(book, "a", {GPU: 6000})
    assert refusal is not None and refusal.fair
    assert refusal.describe() == (
        "would borrow 6 nvidia.com/gpu beyond min, above its fair share 4 of 8 idle in other quotas"
    )
    assert refuse_borrowing(book, "a", {GPU: 4000}) is None
    # Weight 3 against b's 1: three quarters of the pool.
    heavier = book_with({**quotas, "a": (4, 3.0)}, {"a": 4, "b": 5})
    assert refuse_borrowing(heavier, "a", {GPU: 6000}) is None
    # Alone, a borrower may take the whole pool.
    alone = book_with(quotas, {"a": 4, "b": 4})
    assert refuse_borrowing(alone, "a", {GPU: 8000}) is None


def test_the_weight_annotation_is_read_and_a_bad_one_is_a_problem() -> None:
    obj = quota_obj("a", {"cpu": 1})
    obj["metadata"]["annotations"] = {"gang-scheduler.io/quota-weight": "2.5"}
    assert quota_from_api(obj).weight == 2.5
    for bad in ("0", "-1", "nan", "x", "1e9"):
        obj["metadata"]["annotations"] = {"gang-scheduler.io/quota-weight": bad}
        read = quota_from_api(obj)
        assert read.weight == 1.0 and read.problems


@given(
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 12)), min_size=1, max_size=4),
    st.integers(1, 10),
)
def test_what_is_allowed_never_takes_all_quotas_past_the_sum_of_their_mins(
    quotas: list[tuple[int, int]], ask: int
) -> None:
    names = [f"n{i}" for i in range(len(quotas))]
    book = book_with(
        {n: (floor, 1.0) for n, (floor, _) in zip(names, quotas, strict=True)},
        {n: used for n, (_, used) in zip(names, quotas, strict=True)},
    )
    total_min = sum(floor for floor, _ in quotas)
    total_used = sum(used for _, used in quotas)
    first_min, first_used = quotas[0]
    if (
        borrowing(book, names[0], {GPU: ask * 1000})
        and refuse_borrowing(book, names[0], {GPU: ask * 1000}) is None
    ):
        # What the asker holds beyond its min after the ask is someone's idle guarantee.
        assert total_used + ask <= total_min
    if first_used + ask <= first_min:
        assert refuse_borrowing(book, names[0], {GPU: ask * 1000}) is None


def test_borrow_room_is_the_most_refuse_borrowing_lets_a_namespace_hold_beyond_min() -> None:
    # c leaves 8 idle; b already borrows 1: a's share is half the pool, net is 7.
    book = book_with({"a": (4, 1.0), "b": (4, 1.0), "c": (8, 1.0)}, {"a": 4, "b": 5})
    room = borrow_room(book, "a")
    assert room == {GPU: BorrowRoom(pool=8000, net=7000, share=4000)}  # milli
    assert room[GPU].limit == 4000
    assert borrow_room(book, "elsewhere") == {}  # no quota: nothing to judge


@given(
    mins=st.lists(st.integers(0, 8), min_size=2, max_size=4),
    used=st.lists(st.integers(0, 12), min_size=4, max_size=4),
    weights=st.lists(st.sampled_from([0.5, 1.0, 3.0]), min_size=4, max_size=4),
)
def test_borrow_room_limit_matches_refusals(
    mins: list[int], used: list[int], weights: list[float]
) -> None:
    names = [f"ns{i}" for i in range(len(mins))]
    book = book_with(
        {n: (floor, w) for n, floor, w in zip(names, mins, weights, strict=False)},
        dict(zip(names, used, strict=False)),
    )
    first = names[0]
    room = borrow_room(book, first).get(GPU)
    if room is None:
        return
    for extra in range(1, 6):
        beyond = max(0, used[0] + extra - mins[0])
        allowed = refuse_borrowing(book, first, {GPU: extra * 1000}) is None
        assert allowed == (beyond == 0 or beyond * 1000 <= room.limit), (extra, room)
