"""The replay sets the garbage collector as the Kubernetes runner does (young collections
every GC_YOUNG_THRESHOLD allocations, what exists frozen) and restores it afterwards."""

from __future__ import annotations

import gc
import weakref

from policies.profile import build_profile
from scheduler.sim.openb import OpenbPod, load_nodes
from scheduler.sim.replay import (
    GC_YOUNG_THRESHOLD,
    PROGRESS_EVERY,
    collector_tuned,
    replay_openb,
)

NODES = load_nodes("sn,cpu_milli,memory_mib,gpu,model\nnode-a,96000,393216,8,G2\n")
PODS = [OpenbPod(f"p{index}", 1000, 1024, 1, 250) for index in range(PROGRESS_EVERY)]


def collector() -> tuple[int, int]:
    return gc.get_threshold()[0], gc.get_freeze_count()


def test_the_collector_is_tuned_during_the_replay_and_restored_after() -> None:
    before = collector()
    seen: list[tuple[int, int]] = []
    replay_openb(NODES, PODS, build_profile("binpack"), lambda done, n: seen.append(collector()))
    threshold, frozen = seen[0]
    assert threshold == max(before[0], GC_YOUNG_THRESHOLD)
    assert frozen > 0
    assert collector() == before


def test_objects_the_caller_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        replay_openb(NODES, PODS, build_profile("binpack"))
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()


class _Cycle:
    """An object in a reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_cycles_made_during_the_replay_are_freed_when_it_ends() -> None:
    # Automatic collection off, so that only collector_tuned's own collection on its
    # way out can free the cycle.
    gc.disable()
    try:
        with collector_tuned():
            made = weakref.ref(_Cycle())
            assert made() is not None
        assert made() is None
    finally:
        gc.enable()
