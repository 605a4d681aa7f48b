"""Scheduling cores for the tests that drive one directly: made on identical GPU nodes,
and run until nothing is due, every plan bound at once (as the simulator does)."""

from __future__ import annotations

from cache.cluster import EventType
from policies.profile import build_profile
from scheduler.cycle.core import Attempt, SchedulingCore
from scheduler.planner.result import Plan
from tests.factories import node_obj


def core_on_nodes(count: int, gpus: int = 8) -> SchedulingCore:
    """A core with the default profile that has seen nodes n0... of `gpus` GPUs each at 0."""
    core = SchedulingCore(build_profile())
    for i in range(count):
        core.apply_node(EventType.ADDED, node_obj(f"n{i}", gpus=gpus), 0.0)
    return core


def run_binding(core: SchedulingCore, now: float) -> list[Attempt]:
    """Every attempt due at `now`, each plan's placements bound at once; then refreshed."""
    attempts = []
    while (attempt := core.schedule_next(now)) is not None:
        attempts.append(attempt)
        if isinstance(attempt.result, Plan):
            for placement in attempt.result.placements:
                core.bound(placement)
    core.refresh(now)
    return attempts
