"""Kueue's plain-pod groups: the pod-group-name label and the total-count annotation
define a gang; Kueue's admission gate holds it until the group is admitted."""

from __future__ import annotations

from cache.cluster import EventType
from cache.pod import pod_from_api
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from tests.factories import node_obj
from tests.integrations.controllers import kueue_pod

ADDED, MODIFIED = EventType.ADDED, EventType.MODIFIED


def test_kueues_label_and_count_make_a_gang() -> None:
    pod = pod_from_api(kueue_pod("sample-group", 0, 3))
    assert (pod.gang_key, pod.min_member_text) == ("default/sample-group", "3")


def test_a_kueue_group_waits_for_admission_and_for_all_its_members() -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=8), 0)
    for i in range(2):
        core.apply_pod(ADDED, kueue_pod("g", i, 3), 0)
    gang = core.index.assemble()[0].gangs["default/g"]
    assert (gang.min_member, gang.size_source) == (3, "annotation")
    assert gang.waiting_message == "waiting for 1 more member: 2/3 exist"
    core.apply_pod(ADDED, kueue_pod("g", 2, 3), 1)
    assert core.schedule_next(1) is None  # all gated: Kueue has not admitted the group
    for i in range(2):  # admission removes the gates one pod at a time
        core.apply_pod(MODIFIED, kueue_pod("g", i, 3, gated=False), 2)
    assert core.schedule_next(2) is None
    core.apply_pod(MODIFIED, kueue_pod("g", 2, 3, gated=False), 3)
    attempt = core.schedule_next(3)
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert len(attempt.result.placements) == 3


def test_a_malformed_total_count_is_named_by_its_own_key() -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=8), 0)
    core.apply_pod(ADDED, kueue_pod("g", 0, "three", gated=False), 0)
    gang = core.index.assemble()[0].gangs["default/g"]
    [invalid] = [p for p in gang.problems if p.reason == "InvalidMinMember"]
    assert "annotation kueue.x-k8s.io/pod-group-total-count='three'" in invalid.message
