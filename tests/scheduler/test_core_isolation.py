"""One hostile object never stops the scheduling core: what cannot be read or planned
becomes a problem for that object (or gang), and everything else keeps being scheduled.
The first tests are the crash reports of issue 10, reproduced as they were found."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import cache.cluster
import scheduler.gangs.gang
from cache.cluster import ClusterCache, EventType
from cache.gpu import COUNT_LABEL
from policies.profile import build_profile
from policies.scores.fragmentation import OnlineWorkload, shape_of
from policies.scores.share_completion import LearnedShareCompletion
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.queue import ClusterChange
from scheduler.planner.result import Plan, Unschedulable
from tests.factories import make_pod, node_obj, pod_obj, podgroup_obj

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


# --- isolation: an exception stays with its object -----------------------------------------


class Boom(RuntimeError):
    """An unexpected failure (a bug), raised by the tests where they inject it."""


def raising_for(name: str, real: Any, error: BaseException | None = None) -> Any:
    """`real`, except that it raises for the object called `name`."""

    def fake(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if obj.get("metadata", {}).get("name") == name:
            raise error if error is not None else Boom(f"cannot read {name}")
        return real(obj, *args, **kwargs)

    return fake


def test_a_pod_that_raises_while_read_is_told_and_the_rest_is_scheduled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        cache.cluster, "pod_from_api", raising_for("bad", cache.cluster.pod_from_api)
    )
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=2), 0)
    core.apply_pod(ADDED, pod_obj("bad", gpus=1), 0)
    for pod in good_gang("good", 2):
        core.apply_pod(ADDED, pod, 0)
    run_until_idle(core)
    assert bound_names(core) == {"good-0", "good-1"}
    assert core.cache.pod("uid-default-bad") is None  # nothing half-applied
    (message,) = pod_problems(core, "bad")
    assert "internal error while reading the pod: Boom: cannot read bad" in message
    # The same failure again is logged once; a readable update clears it.
    core.apply_pod(MODIFIED, pod_obj("bad", gpus=1, resource_version="2"), 0)
    assert len(core.failures) == 1
    monkeypatch.undo()
    core.apply_pod(MODIFIED, pod_obj("bad", gpus=1, resource_version="3"), 0)
    assert len(core.failures) == 0 and pod_problems(core, "bad") == []


def test_a_bound_pod_whose_update_cannot_be_read_keeps_its_charge(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=2), 0)
    core.apply_pod(ADDED, pod_obj("running", gpus=2, node_name="n", phase="Running"), 0)
    monkeypatch.setattr(
        cache.cluster, "pod_from_api", raising_for("running", cache.cluster.pod_from_api)
    )
    core.apply_pod(MODIFIED, pod_obj("running", gpus=2, node_name="n", resource_version="2"), 0)
    node = core.cache.node("n")
    assert node is not None and node.gpu_free == [0, 0]  # still charged: parsing comes first
    core.apply_pod(ADDED, pod_obj("waiting", gpus=1), 0)
    run_until_idle(core)
    assert "waiting" not in bound_names(core)  # no GPU given twice


def test_an_apply_that_fails_midway_leaves_the_cache_as_if_the_pod_never_came(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = ClusterCache._set_charge

    def half_applied(self: ClusterCache, uid: str, charge: Any) -> None:
        real(self, uid, charge)  # the charge lands, then something fails after it
        if uid == "uid-default-bad" and charge is not None:
            raise Boom("after charging")

    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=4), 0)
    core.apply_pod(ADDED, pod_obj("other", gpus=1, node_name="n", phase="Running"), 0)
    monkeypatch.setattr(ClusterCache, "_set_charge", half_applied)
    core.apply_pod(ADDED, pod_obj("bad", gpus=2, node_name="n", phase="Running"), 0)
    monkeypatch.undo()
    reference = SchedulingCore(build_profile())
    reference.apply_node(ADDED, node_obj("n", gpus=4), 0)
    reference.apply_pod(ADDED, pod_obj("other", gpus=1, node_name="n", phase="Running"), 0)
    node, expected = core.cache.node("n"), reference.cache.node("n")
    assert node is not None and expected is not None
    assert (node.gpu_free, node.requested) == (expected.gpu_free, expected.requested)
    assert core.cache.pod("uid-default-bad") is None
    assert core.cache.charged_shares("uid-default-bad") is None


def test_a_node_that_raises_while_read_offers_nothing_until_it_reads_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("bad", gpus=8), 0)
    core.apply_node(ADDED, node_obj("good", gpus=1), 0)
    monkeypatch.setattr(
        cache.cluster, "node_from_api", raising_for("bad", cache.cluster.node_from_api)
    )
    core.apply_node(MODIFIED, node_obj("bad", gpus=8, resource_version="2"), 0)
    for pod in good_gang("g", 2):
        core.apply_pod(ADDED, pod, 0)
    results = run_until_idle(core)
    assert isinstance(results["default/g"], Unschedulable)  # only 1 GPU on the good node
    assert ("Node", "bad") in core.failures.current()
    monkeypatch.undo()
    core.apply_node(MODIFIED, node_obj("bad", gpus=8, resource_version="3"), 0)
    core.queue.cluster_changed(5.0, ClusterChange.NODE_UPDATED)
    results = run_until_idle(core, now=100.0)
    assert isinstance(results["default/g"], Plan)


def test_a_deletion_that_raises_still_removes_the_object(monkeypatch: pytest.MonkeyPatch) -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=1), 0)
    core.apply_pod(ADDED, pod_obj("p", gpus=1, node_name="n", phase="Running", gang="g"), 0)

    def broken(self: ClusterCache, event: Any, obj: Any) -> None:
        raise Boom("deleting")

    with monkeypatch.context() as patch:
        patch.setattr(ClusterCache, "apply_pod", broken)
        core.apply_pod(DELETED, pod_obj("p", gpus=1, node_name="n", gang="g"), 0)
    node = core.cache.node("n")
    assert core.cache.pod("uid-default-p") is None and node is not None
    assert node.gpu_free == [1000]


def test_a_podgroup_that_raises_while_read_is_reported_on_its_gang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        cache.cluster, "podgroup_from_api", raising_for("g", cache.cluster.podgroup_from_api)
    )
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=4), 0)
    core.apply_podgroup(ADDED, podgroup_obj("g", 3), 0)
    for pod in good_gang("g", 2):
        core.apply_pod(ADDED, pod, 0)
    core.refresh(1.0)
    messages = [p.message for p in core.problems if p.kind == "PodGroup"]
    assert any("internal error while reading the podgroup: Boom" in m for m in messages)


def test_a_gang_whose_planning_raises_fails_alone_with_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=4), 0)
    for pod in [*good_gang("cursed", 2), *good_gang("fine", 2)]:
        core.apply_pod(ADDED, pod, 0)
    real = core.planner.plan

    def plan(gang: Any, snapshot: Any) -> Any:
        if gang.key == "default/cursed":
            raise Boom("planner bug")
        return real(gang, snapshot)

    monkeypatch.setattr(core.planner, "plan", plan)
    results = run_until_idle(core)
    failed = results["default/cursed"]
    assert isinstance(failed, Unschedulable)
    assert "internal error while planning: Boom: planner bug" in failed.message
    assert all("internal error while planning" in r for r in failed.reasons.values())
    assert isinstance(results["default/fine"], Plan)
    assert core.queue.state("default/cursed") in ("backoff", "unschedulable")
    assert core.schedule_next(1.5) is None  # not retried in a loop


def test_a_reservation_that_fails_midway_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=4), 0)
    for pod in good_gang("g", 2):
        core.apply_pod(ADDED, pod, 0)
    real = ClusterCache._set_charge
    calls = []

    def second_fails(self: ClusterCache, uid: str, charge: Any) -> None:
        calls.append(uid)
        if len(calls) == 2:
            raise Boom("second member")
        real(self, uid, charge)

    with monkeypatch.context() as patch:
        patch.setattr(ClusterCache, "_set_charge", second_fails)
        attempt = core.schedule_next(1.0)
    assert attempt is not None and isinstance(attempt.result, Unschedulable)
    assert core.cache.assumed() == {}
    node = core.cache.node("n")
    assert node is not None and node.gpu_free == [1000] * 4


def test_a_victim_search_that_raises_fails_that_gang_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=2), 0)
    for pod in [*good_gang("huge", 2, gpus=2), *good_gang("fine", 2)]:
        core.apply_pod(ADDED, pod, 0)

    def consider(*args: Any) -> Any:
        raise Boom("victim search bug")

    monkeypatch.setattr(core.preempter, "consider", consider)
    results = run_until_idle(core)
    assert isinstance(results["default/huge"], Unschedulable)
    assert isinstance(results["default/fine"], Plan)


def test_a_gang_whose_assembly_raises_waits_with_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    real = scheduler.gangs.gang._size_gang

    def size(gang: Any, podgroup: Any, keys: Any) -> None:
        if gang.name == "cursed":
            raise Boom("assembly bug")
        real(gang, podgroup, keys)

    monkeypatch.setattr(scheduler.gangs.gang, "_size_gang", size)
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=4), 0)
    for pod in [*good_gang("cursed", 2), *good_gang("fine", 2)]:
        core.apply_pod(ADDED, pod, 0)
    results = run_until_idle(core)
    assert set(results) == {"default/fine"}
    assert any(
        "internal error while assembling gang default/cursed" in m for _, m in core.waiting()
    )
    assert {p.reason for p in core.problems if p.key == "default/cursed-0"} == {"InternalError"}


@pytest.mark.parametrize("fatal", [MemoryError(), KeyboardInterrupt()])
def test_fatal_errors_are_not_isolated(
    monkeypatch: pytest.MonkeyPatch, fatal: BaseException
) -> None:
    core = SchedulingCore(build_profile())
    for error in (fatal, asyncio.CancelledError()):
        monkeypatch.setattr(
            cache.cluster, "pod_from_api", raising_for("p", cache.cluster.pod_from_api, error)
        )
        with pytest.raises(type(error)):
            core.apply_pod(ADDED, pod_obj("p"), 0)


# --- memory: per-pod state goes with the pod -------------------------------------------------


def test_the_workload_observer_forgets_deleted_pods() -> None:
    profile = build_profile()
    workload = profile.workload
    assert isinstance(workload, OnlineWorkload)
    core = SchedulingCore(profile)
    for i in range(50):
        core.apply_pod(ADDED, pod_obj(f"p{i}", vgpu=100 + i), 0)
    assert workload.tracked == 50
    for i in range(50):
        core.apply_pod(DELETED, pod_obj(f"p{i}"), 0)
    assert workload.tracked == 0 and workload.observed == 50
    # The shapes learned stay (the workload describes every pod seen).
    assert workload.current().shares


def test_fgd_complete_learns_its_share_requests_from_the_pods_the_core_sees() -> None:
    profile = build_profile("fgd-complete")
    learnt = [s for s, _ in profile.node_scores if isinstance(s, LearnedShareCompletion)]
    assert len(learnt) == 1
    core = SchedulingCore(profile)
    core.apply_node(ADDED, node_obj("a", gpus=1), 0)
    core.apply_node(ADDED, node_obj("b", gpus=1), 0)
    core.apply_pod(ADDED, pod_obj("big", vgpu=810), 0)
    run_until_idle(core)
    (holed,) = [pod.node_name for pod in core.cache.pods() if pod.name == "big"]
    # Pods the cluster has seen (only one 160 among them: FGD's 95% coverage drops it).
    for i in range(40):
        core.apply_pod(ADDED, pod_obj(f"seen-{i}", vgpu=810), 0)
        core.apply_pod(DELETED, pod_obj(f"seen-{i}"), 0)
    core.apply_pod(ADDED, pod_obj("small", vgpu=160), 0)
    requests = {request.milli for request in learnt[0].learnt.requests}
    assert requests == {810, 160}
    run_until_idle(core)
    # The 160 closes the 190 hole the 810 left instead of opening the idle GPU.
    assert [pod.node_name for pod in core.cache.pods() if pod.name == "small"] == [holed]


def test_the_workload_observer_counts_a_bounded_number_of_shapes() -> None:
    workload = OnlineWorkload(max_shapes=8)
    common = make_pod("common", cpu="1", gpus=1)
    for i in range(5):
        workload.observe(make_pod(f"c{i}", cpu="1", gpus=1))
    for i in range(100):
        workload.observe(make_pod(f"rare{i}", cpu=f"{i + 2}m"))
    assert workload.shapes <= 8
    shares = workload.current().shares
    assert shape_of(common) in shares  # the frequent shape survives the pruning


def test_an_unreadable_pod_leaves_no_ghost_once_deleted_or_missing_from_a_relist(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=1), 0)
    with monkeypatch.context() as patch:
        patch.setattr(cache.cluster, "pod_from_api", raising_for("a", cache.cluster.pod_from_api))
        patch.setattr(cache.cluster, "pod_from_api", raising_for("b", cache.cluster.pod_from_api))
        core.apply_pod(ADDED, pod_obj("a", gpus=1), 0)
        core.apply_pod(ADDED, pod_obj("b", gpus=1), 0)
    assert pod_problems(core, "a") and pod_problems(core, "b")
    core.apply_pod(DELETED, pod_obj("a"), 0)  # reads fine now
    core.replace_pods([], 0)  # b's deletion was missed: the relist lacks it
    core.refresh(1.0)
    assert core.gangs == {} and core.problems == [] and len(core.failures) == 0
