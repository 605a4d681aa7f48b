"""Fill fragmentation: waste after filling a node with each expected shape."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.interface import GangContext
from policies.scores.fill_fragmentation import FillFragmentation, _groups_for, fill_fragmentation
from policies.scores.fragmentation import TargetWorkload, WorkloadShape
from tests.factories import make_node, make_pod

SHARE_810 = WorkloadShape(4000, 810, 1)
TWO_WHOLE = WorkloadShape(8000, 1000, 2)
CPU_ONLY = WorkloadShape(16000)


def waste(free: list[int], cpu: int, shares: dict[WorkloadShape, float], model: str = "") -> float:
    return fill_fragmentation(tuple(free), cpu, *_groups_for(TargetWorkload(shares), model))


def test_remainders_after_as_many_copies_as_fit_are_waste() -> None:
    # 8 copies of an 810 share fit: 8 x 190 left over.
    assert waste([1000] * 8, 64000, {SHARE_810: 1.0}) == 8000 - 8 * 810
    # A device with 1,620 room does not exist; two 900-free devices take one copy each.
    assert waste([900, 900, 500], 64000, {SHARE_810: 1.0}) == 2300 - 2 * 810


def test_free_cpu_caps_the_copies() -> None:
    # GPUs could take 8 copies, 8 cores only 2.
    assert waste([1000] * 8, 8000, {SHARE_810: 1.0}) == 8000 - 2 * 810
    # Not even one copy: everything is waste.
    assert waste([1000] * 8, 3000, {SHARE_810: 1.0}) == 8000


def test_whole_gpu_shapes_count_sets_of_free_devices() -> None:
    assert waste([1000, 1000, 1000, 300], 64000, {TWO_WHOLE: 1.0}) == 3300 - 2000
    assert waste([1000, 600, 600], 64000, {TWO_WHOLE: 1.0}) == 2200


def test_shapes_that_cannot_use_the_node_see_all_idle() -> None:
    pinned = WorkloadShape(4000, 810, 1, frozenset({"A100"}))
    assert waste([1000, 500], 64000, {pinned: 1.0}, model="T4") == 1500
    assert waste([1000, 500], 64000, {CPU_ONLY: 1.0}) == 1500
    # Shares weigh the shapes.
    assert waste([1000] * 2, 64000, {CPU_ONLY: 0.5, SHARE_810: 0.5}) == 0.5 * 2000 + 0.5 * 380


def test_score_prefers_the_placement_that_wastes_less() -> None:
    workload = TargetWorkload({SHARE_810: 0.5, WorkloadShape(4000, 500, 1): 0.5})
    score = FillFragmentation(workload)
    pod = make_pod("p", cpu="4", vgpu=810)
    hole = make_node("hole", gpus=2)
    hole.gpu_free = [810, 1000]
    # Filling the exact 810 hole keeps a whole GPU for two 500s; a fresh GPU would not.
    exact = score.score(pod, hole, ((0, 810),), GangContext())
    fresh = score.score(pod, hole, ((1, 810),), GangContext())
    assert exact > fresh
    assert score.memoizable


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 1000), min_size=1, max_size=8),
    st.integers(0, 64000),
    st.lists(
        st.tuples(
            st.integers(0, 16000),
            st.sampled_from([100, 250, 470, 810, 1000]),
            st.integers(1, 4),
            st.floats(0.01, 1.0),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_waste_is_between_zero_and_all_idle(
    free: list[int], cpu: int, shapes: list[tuple[int, int, int, float]]
) -> None:
    shares = {WorkloadShape(c, m, k if m == 1000 else 1): w for c, m, k, w in shapes}
    value = waste(free, cpu, shares)
    assert -1e-6 <= value <= sum(free) + 1e-6


def _waste_as_written(free: list[int], cpu: int, shares: dict[WorkloadShape, float]) -> float:
    """The module docstring's formula, term by term in the workload's shape order (the
    order the fast version sums in, so the two agree to the last bit)."""
    total, groups = _groups_for(TargetWorkload(shares), "")
    idle = sum(free)
    if not idle:
        return 0.0
    used = 0.0
    for milli, count, entries in groups:
        if milli >= 1000:
            gpu_copies = sum(1 for room in free if room >= 1000) // count
        else:
            gpu_copies = sum(room // milli for room in free) // count
        for shape_cpu, share in entries:
            if gpu_copies and shape_cpu <= cpu:
                copies = min(gpu_copies, cpu // shape_cpu) if shape_cpu else gpu_copies
                used += share * copies * milli * count
    return total * idle - used


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0, 0, 100, 250, 500, 700, 1000]), min_size=1, max_size=8),
    st.integers(0, 96000),
    st.lists(
        st.tuples(
            st.sampled_from([0, 2000, 8000, 32000]),
            st.sampled_from([100, 250, 470, 810, 1000]),
            st.integers(1, 8),
            st.floats(0.01, 1.0),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_the_fast_loop_gives_the_formula_bit_for_bit(
    free: list[int], cpu: int, shapes: list[tuple[int, int, int, float]]
) -> None:
    # Placements of a replay follow the tie-break to the last bit: a faster loop must
    # not reorder the sum.
    shares = {WorkloadShape(c, m, k if m == 1000 else 1): w for c, m, k, w in shapes}
    assert waste(free, cpu, shares) == _waste_as_written(free, cpu, shares)


def test_the_kept_gpu_copies_serve_every_free_cpu_amount() -> None:
    # The score keeps the GPU side per free-milli tuple: nodes with the same free milli
    # and different free CPU must still get their own CPU caps.
    shares = {SHARE_810: 1.0, TWO_WHOLE: 2.0, WorkloadShape(2000, 250, 1): 1.0}
    score = FillFragmentation(TargetWorkload(shares))
    free = (1000, 1000, 1000, 500)
    for cpu in (64000, 4000, 2000, 0, 8000):
        assert score._value(free, cpu, "") == waste(list(free), cpu, shares)
