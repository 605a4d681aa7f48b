"""Guaranteed-first queue order cannot be gamed (docs/security.md, "Tenant: quotas,
reclaim and the starvation guard"): a gang judged within its namespace's min when it
was queued, but that would borrow by the time it is handed out (its namespace placed
other gangs meanwhile), does not pass older borrowing gangs of other namespaces."""

from __future__ import annotations

from cache.cluster import EventType
from policies.profile import build_profile
from scheduler.core import SchedulingCore
from scheduler.planner import Plan
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
