"""The answers a planner keeps across calls (kept choices, lone-member windows,
rankings) under scores learnt from the pods seen: the learnt workload moves in steps
(policies/scores/fragmentation.py `rebuild_due`), a planner keeps answers within a step
and drops them at the next (Planner._follow_learning), so a long-lived planner decides
exactly what a planner that keeps nothing decides."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.pod import pod_from_api
from cache.snapshot import Snapshot
from policies.profile import build_profile
from policies.scores.fragmentation import OnlineWorkload
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan
from tests.factories import node_obj, pod_obj
from tests.scheduler.test_planner_lone_member import _node, _pod

SCHED = "gang-scheduler"
LEARNT = ["fgd", "fgd-complete", "fgd-complete-reserve"]


def _workload(profile: Any) -> OnlineWorkload:
    workload = profile.workload
    assert isinstance(workload, OnlineWorkload)
    return workload


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_a_kept_planner_decides_as_a_fresh_one_as_the_workload_is_learnt(
    data: st.DataObject,
) -> None:
    policy = data.draw(st.sampled_from(LEARNT))
    # 0: exhaustive (rankings); else bounded (kept choices, windows).
    limit = data.draw(st.sampled_from([0, 1, 3]))
    profile = build_profile(policy, topology_keys=(), candidate_limit=limit)
    workload = _workload(profile)
    assert profile.memoizable  # what lets the planner keep answers at all
    cache = ClusterCache()
    names = [f"n{i}" for i in range(data.draw(st.integers(1, 6)))]
    for name in names:
        cache.apply_node(EventType.ADDED, _node(data.draw, name))
    planner, snapshot = Planner(profile), Snapshot()
    for i in range(data.draw(st.integers(1, 25))):
        # Pods seen that are never planned here move the learnt workload too (those of
        # other gangs, of other namespaces, deleted since).
        for j in range(data.draw(st.sampled_from([0, 0, 1, 5]))):
            workload.observe(pod_from_api(_pod(data.draw, f"seen-{i}-{j}")))
        name = f"p{i}"
        obj = _pod(data.draw, name)
        cache.apply_pod(EventType.ADDED, obj)
        workload.observe(pod_from_api(obj))
        pending = [p for p in cache.pods() if not p.node_name and not cache.is_assumed(p.uid)]
        gang = assemble_gangs(pending, {}, SCHED).gangs[f"default/pod:{name}"]
        cache.update_snapshot(snapshot)
        kept = planner.plan(gang, snapshot)
        assert kept == Planner(profile).plan(gang, cache.snapshot())
        if isinstance(kept, Plan):
            cache.assume(kept.placements, now=0)
        else:
            cache.apply_pod(EventType.DELETED, obj)


def test_a_step_of_the_learnt_workload_changes_the_kept_decision() -> None:
    """The comparison above compares something: the same pod on the same nodes goes
    elsewhere once the workload has moved, which a planner keeping the old answers
    would not see. Node x has 2 GPUs and 4 cores, node y 1 GPU and 64 cores; the pod
    asks 1 GPU. While the pods seen ask 2 GPUs, taking x's pair breaks it: to FGD y is
    better. Once most ask 1 GPU and 60 cores, x's GPUs are stranded anyway (too few
    cores) and y's is the one they can use: x is better."""
    profile = build_profile("fgd", topology_keys=(), candidate_limit=2)
    workload = _workload(profile)
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("x", gpus=2, cpu="4"))
    cache.apply_node(EventType.ADDED, node_obj("y", gpus=1, cpu="64"))
    planner, snapshot = Planner(profile), Snapshot()
    cache.apply_pod(EventType.ADDED, pod_obj("probe", gpus=1))
    gang = assemble_gangs(cache.pods(), {}, SCHED).gangs["default/pod:probe"]
    for i in range(20):
        workload.observe(pod_from_api(pod_obj(f"pair-{i}", gpus=2, cpu="1")))
    cache.update_snapshot(snapshot)
    before = planner.plan(gang, snapshot)
    assert isinstance(before, Plan) and before.placements[0].node == "y"
    step = profile.learning_step()
    for i in range(200):
        workload.observe(pod_from_api(pod_obj(f"wide-{i}", gpus=1, cpu="60")))
    assert profile.learning_step() != step
    after = planner.plan(gang, snapshot)
    assert isinstance(after, Plan) and after.placements[0].node == "x"
    assert after == Planner(profile).plan(gang, cache.snapshot())
