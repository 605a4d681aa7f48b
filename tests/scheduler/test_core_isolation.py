"""One hostile object never stops the scheduling core: what cannot be read or planned
becomes a problem for that object (or gang), and everything else keeps being scheduled.
The first tests are the crash reports of issue 10, reproduced as they were found."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType
from cache.gpu import COUNT_LABEL
from policies.profile import build_profile
from policies.scores.fragmentation import OnlineWorkload
from scheduler.core import SchedulingCore
from scheduler.planner import Plan, Unschedulable
from tests.factories import node_obj, pod_obj

ADDED, MODIFIED, DELETED = EventType.ADDED, EventType.MODIFIED, EventType.DELETED


def good_gang(name: str, size: int, gpus: int = 1) -> list[dict[str, Any]]:
    return [pod_obj(f"{name}-{i}", gang=name, min_member=size, gpus=gpus) for i in range(size)]


def run_until_idle(core: SchedulingCore, now: float = 1.0) -> dict[str, Plan | Unschedulable]:
    """Plan every due gang (binds confirmed at once, as the simulator does)."""
    results: dict[str, Plan | Unschedulable] = {}
    while (attempt := core.schedule_next(now)) is not None:
        results[attempt.gang.key] = attempt.result
        if isinstance(attempt.result, Plan):
            for placement in attempt.result.placements:
                core.bound(placement)
    return results


def bound_names(core: SchedulingCore) -> set[str]:
    return {pod.name for pod in core.cache.pods() if pod.node_name}


def pod_problems(core: SchedulingCore, name: str) -> list[str]:
    core.refresh(2.0)
    return [p.message for p in core.problems if p.key == f"default/{name}"]


# --- the crash reports ---------------------------------------------------------------------


def test_a_min_member_of_five_thousand_digits_is_a_problem_not_a_crash() -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=4), 0)
    # 8 GPUs: it never fits, so it stays pending and keeps its problem.
    core.apply_pod(ADDED, pod_obj("huge-0", gang="huge", min_member="9" * 5000, gpus=8), 0)
    for pod in good_gang("good", 2):
        core.apply_pod(ADDED, pod, 0)
    results = run_until_idle(core)
    assert isinstance(results["default/good"], Plan)
    assert {"good-0", "good-1"} <= bound_names(core)
    assert any("not a positive whole number" in m for m in pod_problems(core, "huge-0"))


def test_a_negative_vgpu_request_is_refused_and_does_not_reach_the_workload_observer() -> None:
    profile = build_profile()
    assert isinstance(profile.workload, OnlineWorkload)
    core = SchedulingCore(profile)
    core.apply_node(ADDED, node_obj("n", gpus=2), 0)
    core.apply_pod(ADDED, pod_obj("negative", vgpu=-300), 0)
    core.apply_pod(ADDED, pod_obj("fine", vgpu=300), 0)
    run_until_idle(core)
    assert bound_names(core) == {"fine"}
    assert any("must not be negative" in m for m in pod_problems(core, "negative"))


def test_a_million_gpu_count_label_builds_no_million_devices() -> None:
    core = SchedulingCore(build_profile())
    huge = node_obj("huge", gpus=1)
    huge["metadata"]["labels"][COUNT_LABEL] = str(10**6)  # GPU feature discovery's label
    core.apply_node(ADDED, huge, 0)
    node = core.cache.node("huge")
    assert node is not None and len(node.devices) <= 256
    assert any(COUNT_LABEL in problem for problem in node.problems)
