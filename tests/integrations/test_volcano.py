"""Volcano's PodGroup sizes the gang of a Volcano Job that names this scheduler."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType
from cache.volcano import VOLCANO_GROUP, volcano_podgroup_from_api
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from tests.factories import node_obj, podgroup_obj
from tests.integrations.controllers import VOLCANO_JOB_UID, volcano_pod, volcano_podgroup_obj

ADDED, DELETED = EventType.ADDED, EventType.DELETED
GROUP = f"default/mnist-{VOLCANO_JOB_UID}"


def core_with(pods: list[dict[str, Any]], *groups: dict[str, Any]) -> SchedulingCore:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=8), 0)
    for group in groups:
        core.apply_gang_group(volcano_podgroup_from_api, ADDED, group, 0)
    for pod in pods:
        core.apply_pod(ADDED, pod, 0)
    return core


def test_a_volcano_job_waits_for_its_podgroups_min_member() -> None:
    core = core_with(
        [volcano_pod("mnist", "worker", i) for i in range(3)],
        volcano_podgroup_obj("mnist", 4),
    )
    gang = core.index.assemble()[0].gangs[GROUP]
    assert (gang.min_member, gang.size_source, gang.ready) == (4, "podgroup", False)
    assert gang.waiting_message == "waiting for 1 more member: 3/4 exist"
    assert core.schedule_next(0) is None
    core.apply_pod(ADDED, volcano_pod("mnist", "worker", 3), 1)
    attempt = core.schedule_next(1)
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert len(attempt.result.placements) == 4


def test_the_podgroup_read_keeps_queue_and_task_minimums() -> None:
    group = volcano_podgroup_from_api(
        volcano_podgroup_obj("mnist", 3, {"ps": 1, "worker": 2, "idle": 0}, queue="research")
    )
    assert (group.api, group.min_member, group.queue) == (VOLCANO_GROUP, 3, "research")
    assert group.role_minimums == (("ps", 1), ("worker", 2))
    assert group.role_key == "volcano.sh/task-spec"


def test_malformed_volcano_podgroups_become_problems_never_errors() -> None:
    for spec, text in (
        ({"minMember": -1}, "spec.minMember must be a non-negative 32-bit integer, got -1"),
        ({"minMember": "4"}, "spec.minMember must be a non-negative 32-bit integer, got '4'"),
        ({"minTaskMember": [1]}, "spec.minTaskMember must be a map, got [1]"),
        ({"minTaskMember": {"w": 2**31}}, "spec.minTaskMember['w'] must be a non-negative"),
    ):
        group = volcano_podgroup_from_api({"metadata": {"name": "g"}, "spec": spec})
        assert group.problems and group.problems[0].startswith(text), group.problems
    unreadable = volcano_podgroup_from_api({"metadata": {"name": "g"}, "spec": "nonsense"})
    assert unreadable.min_member is None and unreadable.role_minimums == ()


def test_an_invalid_volcano_podgroup_is_named_on_the_pods_and_they_wait_for_all() -> None:
    bad = volcano_podgroup_obj("mnist", 4)
    bad["spec"]["minMember"] = -4
    core = core_with([volcano_pod("mnist", "worker", i) for i in range(2)], bad)
    gang = core.index.assemble()[0].gangs[GROUP]
    reasons = {(p.kind, p.reason) for p in gang.problems}
    assert ("Pod", "InvalidPodGroup") in reasons
    assert ("PodGroup", "InvalidPodGroup") not in reasons  # not scheduler-plugins' kind


def test_scheduler_plugins_podgroup_wins_a_shared_name_and_deletions_stay_apart() -> None:
    name = f"mnist-{VOLCANO_JOB_UID}"
    core = core_with(
        [volcano_pod("mnist", "worker", i) for i in range(2)], volcano_podgroup_obj("mnist", 4)
    )
    core.apply_podgroup(ADDED, podgroup_obj(name, 2), 0)
    assert core.index.assemble()[0].gangs[GROUP].min_member == 2
    # Volcano's deleted: scheduler-plugins' still sizes the gang.
    core.apply_gang_group(volcano_podgroup_from_api, DELETED, volcano_podgroup_obj("mnist", 4), 1)
    assert core.index.assemble()[0].gangs[GROUP].min_member == 2
    core.apply_gang_group(volcano_podgroup_from_api, ADDED, volcano_podgroup_obj("mnist", 4), 2)
    core.apply_podgroup(DELETED, podgroup_obj(name, 2), 3)
    assert core.index.assemble()[0].gangs[GROUP].min_member == 4


def test_a_relist_forgets_volcano_podgroups_it_no_longer_lists() -> None:
    core = core_with(
        [volcano_pod("mnist", "worker", i) for i in range(2)], volcano_podgroup_obj("mnist", 4)
    )
    relist = core.relist_gang_groups(volcano_podgroup_from_api, VOLCANO_GROUP)
    relist.add([], 1)
    relist.finish(1)
    assert dict(core.gang_groups.of(VOLCANO_GROUP)) == {}
    gang = core.index.assemble()[0].gangs[GROUP]
    assert gang.size_source == "default"
