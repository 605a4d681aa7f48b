"""Guaranteed-first queue order cannot be gamed (docs/security.md, "Tenant: quotas,
reclaim and the starvation guard"): a gang judged within its namespace's min when it
was queued, but that would borrow by the time it is handed out (its namespace placed
other gangs meanwhile), does not pass older borrowing gangs of other namespaces."""

from __future__ import annotations

from cache.cluster import EventType
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan
from tests.cache.test_quota import quota_obj
from tests.factories import node_obj, pod_obj

ADDED = EventType.ADDED


def test_a_gang_queued_as_guaranteed_that_now_borrows_waits_behind_older_borrowers() -> None:
    core = SchedulingCore(build_profile())
    for name in ("n0", "n1"):
        core.apply_node(ADDED, node_obj(name, gpus=4), 0.0)
    # 8 GPUs: teams a and b are guaranteed 4 each; team c only borrows.
    for namespace, least in (("a", 4), ("b", 4), ("c", 0)):
        quota = quota_obj(namespace, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": least})
        core.apply_elasticquota(ADDED, quota, 0.0)
    jobs = [("c", "c1", "2026-01-01T00:00:00Z")]
    # Team a queues two 4-GPU gangs at once: each alone is within its min.
    jobs += [("a", "a1", "2026-01-01T00:05:00Z"), ("a", "a2", "2026-01-01T00:06:00Z")]
    for namespace, name, created in jobs:
        pod = pod_obj(
            f"{name}-0", namespace=namespace, gang=name, min_member=1, gpus=4, created=created
        )
        core.apply_pod(ADDED, pod, 1.0)
    placed = []
    for cycle in range(3):
        attempt = core.schedule_next(2.0 + cycle)
        if attempt is None:
            break
        if isinstance(attempt.result, Plan):
            placed.append(attempt.gang.key)
            for placement in attempt.result.placements:
                core.bound(placement)
    # a1 is guaranteed; then a2 borrows as c1 does, and c1 is older: b's idle 4 GPUs go
    # to c1, not to a2 on the strength of a judgement made before a1 was placed.
    assert placed[:2] == ["a/a1", "c/c1"], placed


def test_a_gang_queued_as_borrowing_goes_first_once_its_team_is_back_under_its_min() -> None:
    """The other way round: a team's gang queued while the team used its whole min is
    handed out before older borrowers once the team's running job finished, rather than
    losing the freed room to them and then having to reclaim it."""
    core = SchedulingCore(build_profile())
    core.apply_node(ADDED, node_obj("n0", gpus=4), 0.0)
    core.apply_node(ADDED, node_obj("n1", gpus=4), 0.0)
    for namespace, least in (("a", 4), ("b", 4), ("c", 0)):
        quota = quota_obj(namespace, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": least})
        core.apply_elasticquota(ADDED, quota, 0.0)
    running = pod_obj(
        "b0-0", namespace="b", gang="b0", min_member=1, gpus=4, node_name="n0", phase="Running"
    )
    blocker = pod_obj(
        "a0-0", namespace="a", gang="a0", min_member=1, gpus=4, node_name="n1", phase="Running"
    )
    core.apply_pod(ADDED, running, 0.0)
    core.apply_pod(ADDED, blocker, 0.0)
    # Both wait while the cluster is full: c1 (older) borrows, b1 would borrow too now.
    for namespace, name, created in (("c", "c1", "00:00"), ("b", "b1", "00:05")):
        pod = pod_obj(
            f"{name}-0",
            namespace=namespace,
            gang=name,
            min_member=1,
            gpus=4,
            created=f"2026-01-01T00:{created}:00Z",
        )
        core.apply_pod(ADDED, pod, 1.0)
    while core.schedule_next(2.0) is not None:
        pass
    # b's running job finishes: b is back under its min, and 4 GPUs are free.
    core.apply_pod(EventType.DELETED, running, 3.0)
    placed = []
    for second in range(4, 200):
        attempt = core.schedule_next(float(second))
        if attempt is not None and isinstance(attempt.result, Plan):
            placed.append(attempt.gang.key)
            for placement in attempt.result.placements:
                core.bound(placement)
            break
    assert placed == ["b/b1"], placed
