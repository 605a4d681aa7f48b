"""Per-role minimums: a gang is placeable only when every role's minimum is."""

from __future__ import annotations

from typing import Any

import pytest

from cache.cluster import ClusterCache, EventType
from cache.pod import GangKeys
from cache.volcano import volcano_podgroup_from_api
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.roles import parse_role_minimums
from scheduler.planner.result import Plan, Unschedulable
from tests.factories import node_obj, pod_obj
from tests.integrations.controllers import VOLCANO_JOB_UID, volcano_pod, volcano_podgroup_obj

ADDED = EventType.ADDED
REPLICA_TYPE = "training.kubeflow.org/replica-type"


def member(name: str, role: str, minimums: str | None = "ps=1,worker=2", **kw: Any) -> Any:
    annotations = {"gang-scheduler.io/min-role-members": minimums} if minimums else {}
    obj = pod_obj(name, gang="tf", min_member=3, gpus=1, annotations=annotations, **kw)
    obj["metadata"]["labels"][REPLICA_TYPE] = role
    return obj


def core_with(pods: list[dict[str, Any]], gpus: int = 8, keys: GangKeys | None = None) -> Any:
    cache = ClusterCache(gang_keys=keys) if keys is not None else None
    core = SchedulingCore(build_profile(), cache=cache)
    core.apply_node(ADDED, node_obj("n", gpus=gpus), 0)
    for pod in pods:
        core.apply_pod(ADDED, pod, 0)
    return core


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("ps=1,worker=4", {"ps": 1, "worker": 4}),
        (" ps = 1 , worker=0 ", {"ps": 1}),
        ("Master=1", {"Master": 1}),
        ("", None),
        ("ps", None),
        ("ps=1,ps=2", None),
        ("ps=-1", None),
        ("ps=1.5", None),
        ("a/b=1", None),
        ("ps=99999999999", None),
    ],
)
def test_the_annotation_is_role_equals_count_pairs(text: str, parsed: Any) -> None:
    assert parse_role_minimums(text) == parsed


def test_a_gang_missing_a_role_waits_even_when_its_total_is_reached() -> None:
    core = core_with([member(f"tf-worker-{i}", "worker") for i in range(3)])
    gang = core.index.assemble()[0].gangs["default/tf"]
    assert not gang.ready
    assert gang.waiting_message == (
        "waiting for members of a role: role ps: 0/1 exist (role label " + REPLICA_TYPE + ")"
    )
    assert core.schedule_next(0) is None
    core.apply_pod(ADDED, member("tf-ps-0", "ps"), 1)
    attempt = core.schedule_next(1)
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert len(attempt.result.placements) == 4


def test_room_short_for_everyone_goes_to_the_roles_that_need_it() -> None:
    # 4 GPUs, 5 members of 1 GPU: a plain greedy pass places the 4 older workers and
    # leaves the parameter server out, which the gang cannot run without.
    pods = [member(f"tf-worker-{i}", "worker") for i in range(4)]
    pods.append(member("tf-ps-0", "ps", created="2026-01-01T00:00:09Z"))
    core = core_with(pods, gpus=4)
    attempt = core.schedule_next(0)
    assert attempt is not None and isinstance(attempt.result, Plan)
    placed = {p.pod_uid for p in attempt.result.placements}
    assert "uid-default-tf-ps-0" in placed and len(placed) == 4


def test_a_role_that_cannot_fit_leaves_the_whole_gang_unplaced_and_says_which() -> None:
    pods = [member(f"tf-worker-{i}", "worker") for i in range(3)]
    ps = member("tf-ps-0", "ps")
    ps["spec"]["nodeSelector"] = {"role": "cpu-only"}
    core = core_with([*pods, ps])
    attempt = core.schedule_next(0)
    assert attempt is not None and isinstance(attempt.result, Unschedulable)
    assert "role ps: 0/1 placeable" in attempt.result.message
    assert list(core.cache.assumed()) == []


def test_volcanos_min_task_member_is_the_per_role_minimum() -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n", gpus=8), 0)
    group = volcano_podgroup_obj("tf", 3, {"ps": 1, "worker": 2})
    core.apply_gang_group(volcano_podgroup_from_api, ADDED, group, 0)
    for i in range(3):
        core.apply_pod(ADDED, volcano_pod("tf", "worker", i), 0)
    gang = core.index.assemble()[0].gangs[f"default/tf-{VOLCANO_JOB_UID}"]
    assert (gang.role_minimums, gang.role_label) == ({"ps": 1, "worker": 2}, "volcano.sh/task-spec")
    assert not gang.ready
    core.apply_pod(ADDED, volcano_pod("tf", "ps", 0), 1)
    attempt = core.schedule_next(1)
    assert attempt is not None and isinstance(attempt.result, Plan)


def test_the_role_label_is_configurable_for_jobset() -> None:
    label = "jobset.sigs.k8s.io/replicatedjob-name"
    pods = []
    for i in range(2):
        obj = pod_obj(
            f"w-{i}",
            gang="js",
            min_member=3,
            annotations={"gang-scheduler.io/min-role-members": "driver=1"},
        )
        obj["metadata"]["labels"][label] = "workers"
        pods.append(obj)
    core = core_with(pods, keys=GangKeys(role_label=label))
    assert not core.index.assemble()[0].gangs["default/js"].ready
    driver = pod_obj("d-0", gang="js", min_member=3)
    driver["metadata"]["labels"][label] = "driver"
    core.apply_pod(ADDED, driver, 1)
    assert core.index.assemble()[0].gangs["default/js"].ready


def test_malformed_and_conflicting_annotations_are_told_and_the_largest_wins() -> None:
    core = core_with(
        [
            member("tf-worker-0", "worker", "ps=1,worker=2"),
            member("tf-worker-1", "worker", "ps=1,worker=3"),
            member("tf-ps-0", "ps", "ps=one"),
        ]
    )
    gang = core.index.assemble()[0].gangs["default/tf"]
    assert gang.role_minimums == {"ps": 1, "worker": 3}
    reasons = {(p.key, p.reason) for p in gang.problems}
    assert ("default/tf-ps-0", "InvalidMinRoleMembers") in reasons
    assert ("default/tf-worker-0", "ConflictingMinRoleMembers") in reasons
