"""The planner's one-pass path for a lone member (scheduler/planner.py,
`_GangPlanning._plan_lone_member`) decides exactly what the general path decides:
the same node, devices, score and attempt, or the same refusal, over random clusters
and random streams of one-pod gangs, with nodes changing between plans."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.planner as planner_module
from cache.cluster import ClusterCache, EventType
from cache.snapshot import Snapshot
from policies.profile import Profile, build_profile
from scheduler.gang import Gang, assemble_gangs
from scheduler.planner import Plan, Planner, PlanResult
from tests.factories import dgx_links, node_obj, pod_obj

SCHED = "gang-scheduler"
TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}


def _node(draw: Callable[[st.SearchStrategy[Any]], Any], name: str) -> dict[str, Any]:
    kind = draw(st.sampled_from(["dgx", "plain", "cpu"]))
    model = draw(st.sampled_from(["A100", "T4"]))
    zone = {"topology.kubernetes.io/zone": draw(st.sampled_from(["z1", "z2"]))}
    taints = [TAINT] if draw(st.integers(0, 5)) == 0 else []
    cpu = draw(st.sampled_from(["8", "32"]))
    if kind == "dgx":
        return node_obj(
            name, gpus=8, links=dgx_links(), model=model, labels=zone, taints=taints, cpu=cpu
        )
    if kind == "plain":
        gpus = draw(st.integers(1, 4))
        return node_obj(name, gpus=gpus, model=model, labels=zone, taints=taints, cpu=cpu)
    return node_obj(name, cpu=cpu, labels=zone, taints=taints)


def _pod(draw: Callable[[st.SearchStrategy[Any]], Any], name: str) -> dict[str, Any]:
    gpus = draw(st.sampled_from([0, 1, 1, 2, 4, 8]))
    vgpu = 0 if gpus else draw(st.sampled_from([0, 250, 500, 1000]))
    selector = draw(st.sampled_from([None, None, {"nvidia.com/gpu.product": "A100"}]))
    tolerations = [TAINT] if draw(st.booleans()) else []
    cpu = draw(st.sampled_from(["1", "1", "4", "16"]))
    return pod_obj(
        name, gpus=gpus, vgpu=vgpu, cpu=cpu, node_selector=selector, tolerations=tolerations
    )


def _reference(planner: Planner, gang: Gang, snapshot: Snapshot) -> PlanResult:
    """The general path: collect candidates, then the attempts."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner_module._GangPlanning, "_lone_member", lambda self: None)
        return planner.plan(gang, snapshot)


def _same(fast: PlanResult, slow: PlanResult) -> None:
    assert type(fast) is type(slow)
    if isinstance(fast, Plan):
        assert isinstance(slow, Plan)
        assert fast.placements == slow.placements
        assert fast.score == slow.score
        assert fast.attempt == slow.attempt
        assert fast.left_out == slow.left_out
        assert fast.volumes == slow.volumes
    else:
        assert fast == slow


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_lone_member_path_decides_as_the_general_path(data: st.DataObject) -> None:
    policy = data.draw(st.sampled_from(["binpack", "spread"]))
    limit = data.draw(st.integers(1, 5))
    profile: Profile = build_profile(policy, candidate_limit=limit)
    cache = ClusterCache()
    names = [f"n{i}" for i in range(data.draw(st.integers(1, 8)))]
    for name in names:
        cache.apply_node(EventType.ADDED, _node(data.draw, name))
    if data.draw(st.booleans()):
        # Tie-breaks by rank, as the simulator's profiles have them.
        ranks = {name: data.draw(st.integers(0, 3)) for name in names}
        profile = dataclasses.replace(profile, node_rank=ranks)
    # Each planner keeps choices across calls against its own snapshot.
    fast_planner, fast_snapshot = Planner(profile), Snapshot()
    slow_planner, slow_snapshot = Planner(profile), Snapshot()
    planned = 0
    for step in range(data.draw(st.integers(1, 12))):
        change = data.draw(st.sampled_from(["pod", "pod", "pod", "other", "relabel", "delete"]))
        if change == "other":
            # Another scheduler's pod lands on a node: that node's kept choices go stale.
            cache.apply_pod(
                EventType.ADDED,
                pod_obj(
                    f"other-{step}",
                    cpu="2",
                    vgpu=data.draw(st.sampled_from([0, 300, 1000])),
                    node_name=data.draw(st.sampled_from(names)),
                    phase="Running",
                    scheduler="default-scheduler",
                ),
            )
            continue
        if change == "relabel":
            name = data.draw(st.sampled_from(names))
            node = _node(data.draw, name)
            node["metadata"]["resourceVersion"] = str(step + 2)
            cache.apply_node(EventType.MODIFIED, node)
            continue
        if change == "delete" and planned:
            victim = f"p{data.draw(st.integers(0, planned - 1))}"
            cache.apply_pod(EventType.DELETED, pod_obj(victim))
            continue
        name = f"p{planned}"
        planned += 1
        cache.apply_pod(EventType.ADDED, _pod(data.draw, name))
        gangs = assemble_gangs(
            [p for p in cache.pods() if not p.node_name and not cache.is_assumed(p.uid)],
            {},
            SCHED,
        ).gangs
        gang = gangs[f"default/pod:{name}"]
        cache.update_snapshot(fast_snapshot)
        cache.update_snapshot(slow_snapshot)
        fast = fast_planner.plan(gang, fast_snapshot)
        slow = _reference(slow_planner, gang, slow_snapshot)
        _same(fast, slow)
        # And a planner that keeps nothing agrees too.
        _same(fast, _reference(Planner(profile), gang, cache.snapshot()))
        if isinstance(fast, Plan):
            cache.assume(fast.placements, now=0)
            if data.draw(st.booleans()):
                for placement in fast.placements:
                    cache.confirm(placement.pod_uid, placement.node, placement.shares)


def test_lone_member_path_is_taken_for_a_one_pod_gang(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above compares something: a plain one-pod gang is planned by the
    one-pass path, not handed to the attempts."""
    cache = ClusterCache()
    for i in range(3):
        cache.apply_node(EventType.ADDED, node_obj(f"n{i}", gpus=8))
    cache.apply_pod(EventType.ADDED, pod_obj("solo", gpus=1))
    gang = assemble_gangs(cache.pods(), {}, SCHED).gangs["default/pod:solo"]

    def no_attempts(self: object) -> Any:
        raise AssertionError("the general path ran")

    monkeypatch.setattr(planner_module._GangPlanning, "_attempts", no_attempts)
    result = Planner(build_profile()).plan(gang, cache.snapshot())
    assert isinstance(result, Plan) and result.attempt == "best-score"
