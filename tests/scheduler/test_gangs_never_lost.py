"""Gangs are never lost or stuck: recreated pods, partial gangs without a pending
member, scheduling gates, head-of-line requeues and per-object memory (issue 10)."""

from __future__ import annotations

from typing import Any

import pytest

from cache.cluster import EventType
from cache.node import NodeInfo
from cache.snapshot import REMOVALS_KEPT, Snapshot
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from tests.factories import node_obj, pod_obj, podgroup_obj

ADDED, MODIFIED, DELETED = EventType.ADDED, EventType.MODIFIED, EventType.DELETED


def core_with(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> SchedulingCore:
    core = SchedulingCore(build_profile())
    for node in nodes:
        core.apply_node(ADDED, node, 0)
    for pod in pods:
        core.apply_pod(ADDED, pod, 0)
    return core


def member(name: str, uid: str, *, size: int = 2, rv: str = "1", **extra: Any) -> dict[str, Any]:
    return pod_obj(name, gang="g", min_member=size, gpus=1, uid=uid, resource_version=rv, **extra)


# --- 1. a pod recreated under the same name -------------------------------------------
def test_a_member_recreated_under_its_name_during_a_watch_outage_is_still_scheduled() -> None:
    # g-0 (uid a) is bound and running; the watch breaks; the scheduler's rollback (or
    # a StatefulSet) deletes it and its controller recreates it, pending, with uid b.
    core = core_with(
        [node_obj("n", gpus=4)],
        [member("g-0", "a", node_name="n", phase="Running"), member("g-1", "c")],
    )
    core.replace_pods([member("g-0", "b", rv="5"), member("g-1", "c")], 1)
    assert core.cache.pod("a") is None and core.cache.pod("b") is not None
    core.refresh(1)
    gang = core.gangs.get("default/g")
    assert gang is not None
    assert sorted(pod.uid for pod in gang.pending) == ["b", "c"]
    attempt = core.schedule_next(1)
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert sorted(p.pod_uid for p in attempt.result.placements) == ["b", "c"]


def test_a_late_delete_of_the_old_uid_does_not_drop_its_successor() -> None:
    # The successor's ADDED reached the core before the predecessor's DELETED (a relist
    # page applied before the reconciliation removed the old one).
    core = core_with([node_obj("n", gpus=4)], [member("g-0", "a"), member("g-1", "c")])
    core.apply_pod(MODIFIED, member("g-0", "b", rv="5"), 1)
    core.apply_pod(DELETED, member("g-0", "a", rv="6"), 1)
    attempt = core.schedule_next(1)
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert sorted(p.pod_uid for p in attempt.result.placements) == ["b", "c"]


# --- 3. scheduling gates ---------------------------------------------------------------
def gated(obj: dict[str, Any], *gates: str) -> dict[str, Any]:
    obj["spec"]["schedulingGates"] = [{"name": gate} for gate in gates]
    return obj


def test_a_gang_with_a_gated_member_it_needs_waits_and_says_so_then_binds() -> None:
    core = core_with(
        [node_obj("n", gpus=4)],
        [member("g-0", "a"), gated(member("g-1", "b"), "example.com/quota")],
    )
    assert core.schedule_next(0) is None  # not ready: nothing is planned
    waiting = dict((gang.key, message) for gang, message in core.waiting())
    assert waiting["default/g"] == (
        "1 member waits for scheduling gates to be removed (example.com/quota): 1/2 schedulable"
    )
    # The gate is removed (an update that only takes gates away): the gang is ready.
    core.apply_pod(MODIFIED, member("g-1", "b", rv="2"), 1)
    attempt = core.schedule_next(1)
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert sorted(p.pod_uid for p in attempt.result.placements) == ["a", "b"]


def test_a_gated_member_beyond_min_member_is_never_planned() -> None:
    core = core_with(
        [node_obj("n", gpus=4)],
        [member("g-0", "a", size=1), gated(member("g-1", "b", size=1), "hold")],
    )
    attempt = core.schedule_next(0)
    assert attempt is not None and isinstance(attempt.result, Plan)
    assert [p.pod_uid for p in attempt.result.placements] == ["a"]


# --- 4. head-of-line: requeue only what a change could help ---------------------------
IMPOSSIBLE = 400


def impossible(i: int, rv: str = "1") -> dict[str, Any]:
    """A pod no node can take (16 GPUs on 8-GPU nodes), older than anything else."""
    return pod_obj(f"huge-{i}", gpus=16, created="2026-01-01T00:00:00Z", resource_version=rv)


def attempts_until(core: SchedulingCore, gang_key: str, now: float) -> int:
    """Plan attempts until `gang_key` is planned (the count includes its own)."""
    count = 0
    while True:
        attempt = core.schedule_next(now)
        assert attempt is not None, f"{gang_key} was never planned"
        count += 1
        if attempt.gang.key == gang_key:
            assert isinstance(attempt.result, Plan)
            return count


def crowded_core() -> SchedulingCore:
    """IMPOSSIBLE unschedulable pods, each tried once; n1 has 2 GPUs free, n2 none."""
    core = core_with(
        [node_obj("n1", gpus=8), node_obj("n2", gpus=8)],
        [impossible(i) for i in range(IMPOSSIBLE)]
        + [
            pod_obj("cpu-job", cpu="8", node_name="n1", phase="Running"),
            pod_obj("six-gpus", gpus=6, node_name="n1", phase="Running"),
            pod_obj("gpu-job", gpus=8, node_name="n2", phase="Running"),
        ],
    )
    for _ in range(IMPOSSIBLE):
        attempt = core.schedule_next(0)
        assert attempt is not None and not isinstance(attempt.result, Plan)
    assert core.schedule_next(0) is None
    return core


def test_status_writes_on_unschedulable_pods_do_not_requeue_them() -> None:
    core = crowded_core()
    # The scheduler's own PodScheduled=False writes come back on the watch.
    for i in range(IMPOSSIBLE):
        obj = impossible(i, rv="2")
        obj["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
        core.apply_pod(MODIFIED, obj, 0.5)
    core.apply_pod(
        ADDED, pod_obj("fits", gang="f", min_member=1, gpus=2, created="2026-01-01T00:00:05Z"), 0.5
    )
    assert attempts_until(core, "default/f", 5.0) == 1


def test_a_deletion_requeues_only_gangs_the_freed_room_could_help() -> None:
    core = crowded_core()
    # A gang that waits for GPUs on n2, which gpu-job holds.
    core.apply_pod(ADDED, pod_obj("wants-n2", gpus=8, created="2026-01-01T00:00:01Z"), 0)
    attempt = core.schedule_next(0)
    assert attempt is not None and attempt.gang.key == "default/pod:wants-n2"
    assert not isinstance(attempt.result, Plan)
    # cpu-job ends: 8 CPUs freed, nothing any GPU pod here could use.
    core.apply_pod(DELETED, pod_obj("cpu-job", cpu="8", node_name="n1", resource_version="3"), 1)
    assert core.queue.counts()["unschedulable"] == IMPOSSIBLE + 1
    core.apply_pod(
        ADDED, pod_obj("fits", gang="f", min_member=1, gpus=2, created="2026-01-01T00:00:05Z"), 1
    )
    assert attempts_until(core, "default/f", 5.0) == 1
    # gpu-job ends: its 8 GPUs can take wants-n2, which is retried; the others wait.
    core.apply_pod(DELETED, pod_obj("gpu-job", gpus=8, node_name="n2", resource_version="4"), 6)
    assert core.queue.state("default/pod:wants-n2") == "backoff"
    assert core.queue.counts()["unschedulable"] == IMPOSSIBLE
    assert attempts_until(core, "default/pod:wants-n2", 10.0) == 1


# --- 2. partial gangs with no pending member -------------------------------------------
def test_a_gang_with_bound_members_and_none_pending_is_known_partial() -> None:
    core = core_with(
        [node_obj("n", gpus=4)],
        [member(f"g-{i}", f"u{i}", size=4, node_name="n", phase="Running") for i in range(2)],
    )
    core.refresh(0)
    assert "default/g" not in core.gangs  # nothing to schedule
    partial = core.partial_gangs["default/g"]
    assert (len(partial.bound), partial.min_member) == (2, 4)
    # Its missing members are recreated: an ordinary gang again.
    core.apply_pod(ADDED, member("g-2", "u2", size=4), 1)
    core.refresh(1)
    assert "default/g" in core.gangs and "default/g" not in core.partial_gangs
    # They are bound: whole, not partial.
    core.apply_pod(DELETED, member("g-2", "u2", size=4), 2)
    for i in (2, 3):
        core.apply_pod(ADDED, member(f"g-{i}", f"u{i}", size=4, node_name="n"), 2)
    core.refresh(2)
    assert core.partial_gangs == {} and core.gangs == {}


def test_bound_only_gangs_that_are_not_ours_finished_or_unsized_are_not_partial() -> None:
    pods = [
        member("done-0", "d0", node_name="n", phase="Succeeded"),
        member("done-1", "d1", node_name="n", phase="Running"),
        pod_obj("other-0", gang="other", min_member=3, node_name="n", scheduler="x", uid="o0"),
        pod_obj("unsized-0", gang="unsized", node_name="n", uid="s0"),
    ]
    for obj in pods[:2]:
        obj["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "done"
    core = core_with([node_obj("n", gpus=4)], pods)
    core.refresh(0)
    assert core.partial_gangs == {}


# --- 5. memory: per-node state -----------------------------------------------------------
@pytest.mark.parametrize("candidate_limit", [0, 128])
def test_nodes_that_come_and_go_leave_nothing_behind(candidate_limit: int) -> None:
    """Autoscaled nodes with unique names: the cache's and the snapshot's change logs
    and the planner's memos stay bounded, and plans never name a node that is gone
    (with every node ranked, the planner's rankings catch up through the snapshot's
    change log, which forgets the oldest removals)."""
    core = SchedulingCore(build_profile(candidate_limit=candidate_limit))
    core.apply_node(ADDED, node_obj("keep", gpus=1), 0)
    core.apply_pod(ADDED, pod_obj("p", gpus=1, uid="p"), 0)
    first = core.schedule_next(0)
    assert first is not None and isinstance(first.result, Plan)
    core.bind_failed(first.gang.key, first.result.placements, 0, "test")
    gang = core.gangs["default/pod:p"]
    for i in range(3000):
        core.apply_node(ADDED, node_obj(f"tmp-{i}", gpus=1), 0)
        core.cache.update_snapshot(core.snapshot)
        assert isinstance(core.planner.plan(gang, core.snapshot), Plan)
        core.apply_node(DELETED, node_obj(f"tmp-{i}", gpus=1), 0)
        core.cache.update_snapshot(core.snapshot)
    assert core.cache._node_removals == []
    assert len(core.snapshot._changes) <= len(core.snapshot) + 1024
    assert all(len(table) <= 2 * 2 + 64 + 1 for table in core.planner.memo._tables.values())
    core.apply_node(DELETED, node_obj("keep", gpus=1), 0)
    core.apply_node(ADDED, node_obj("new", gpus=1), 0)
    retry = core.schedule_next(100)
    assert retry is not None and isinstance(retry.result, Plan)
    assert [p.node for p in retry.result.placements] == ["new"]


def test_a_snapshot_forgets_its_oldest_removals_and_says_who_must_start_over() -> None:
    snapshot = Snapshot()
    snapshot.put(NodeInfo("keep", generation=1))
    generation = 1
    for i in range(REMOVALS_KEPT + 10):
        generation += 1
        snapshot.put(NodeInfo(f"tmp-{i}", generation=generation))
        generation += 1
        snapshot.remove(f"tmp-{i}", generation)
    assert len(snapshot._changes) <= len(snapshot) + REMOVALS_KEPT
    assert not snapshot.remembers(1)  # removals it never saw are forgotten
    recent = generation - 4
    assert snapshot.remembers(recent)
    assert snapshot.changed_since(recent) == [
        f"tmp-{REMOVALS_KEPT + 8}",
        f"tmp-{REMOVALS_KEPT + 9}",
    ]


def test_a_podgroup_status_write_does_not_requeue_its_gang() -> None:
    core = core_with([node_obj("n", gpus=1)], [member("g-0", "a"), member("g-1", "b")])
    core.apply_podgroup(ADDED, podgroup_obj("g", 2), 0)
    attempt = core.schedule_next(0)
    assert attempt is not None and not isinstance(attempt.result, Plan)
    written = podgroup_obj("g", 2)
    written["metadata"]["resourceVersion"] = "7"
    written["status"] = {"phase": "Pending", "scheduled": 0}
    core.apply_podgroup(MODIFIED, written, 0.5)
    core.refresh(0.5)
    assert core.queue.state("default/g") == "unschedulable"
    # A change of its size is news: the gang is retried.
    resized = podgroup_obj("g", 1)
    resized["metadata"]["resourceVersion"] = "8"
    core.apply_podgroup(MODIFIED, resized, 1)
    core.refresh(1)
    assert core.queue.state("default/g") == "backoff"
