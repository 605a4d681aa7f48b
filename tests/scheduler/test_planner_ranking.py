"""The exhaustive rankings (candidate limit 0): a heap with lazy removal, caught up
from the snapshot's change log. A planner that keeps its rankings across calls places
every gang, one pod or several, exactly as a planner that ranks afresh, and a lone
member's shortcut (the ranking's head) exactly as the attempts, over random clusters
and streams of gangs with pods coming and going; and after every catch-up the heap's
walk lists exactly the valid keys, best first."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.planner.planning as planner_module
from cache.cluster import ClusterCache, EventType
from cache.pod import pod_from_api
from cache.snapshot import Snapshot
from policies.profile import Profile, build_profile
from scheduler.gangs.gang import Gang, assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, PlanResult
from scheduler.sim.profiles import openb_profile
from tests.factories import dgx_links, node_obj, pod_obj

SCHED = "gang-scheduler"
POLICIES = ("binpack", "spread", "fgd", "fgd-fill", "fgd-keep-largest")


def _node(draw: Callable[[st.SearchStrategy[Any]], Any], name: str) -> dict[str, Any]:
    kind = draw(st.sampled_from(["dgx", "plain", "plain", "cpu"]))
    model = draw(st.sampled_from(["A100", "T4"]))
    cpu = draw(st.sampled_from(["8", "32", "96"]))
    if kind == "dgx":
        return node_obj(name, gpus=8, links=dgx_links(), model=model, cpu=cpu)
    if kind == "plain":
        return node_obj(name, gpus=draw(st.sampled_from([1, 2, 4, 8])), model=model, cpu=cpu)
    return node_obj(name, cpu=cpu)


def _pod(
    draw: Callable[[st.SearchStrategy[Any]], Any], name: str, gang: str | None, size: int
) -> dict[str, Any]:
    gpus = draw(st.sampled_from([0, 1, 1, 2, 4, 8]))
    vgpu = 0 if gpus else draw(st.sampled_from([0, 250, 500, 810, 1000]))
    selector = draw(st.sampled_from([None, None, {"nvidia.com/gpu.product": "A100"}]))
    return pod_obj(
        name,
        gpus=gpus,
        vgpu=vgpu,
        cpu=draw(st.sampled_from(["1", "4", "16"])),
        node_selector=selector,
        gang=gang,
        min_member=size if gang else None,
    )


def _profile(policy: str, names: list[str], history: list[dict[str, Any]]) -> Profile:
    if policy in ("binpack", "spread"):
        # No gang score: every member of a gang is picked from the ranking, the later
        # ones below the nodes the earlier ones took.
        profile = build_profile(policy, candidate_limit=0, topology_keys=(), network_weight=0)
        return dataclasses.replace(profile, node_rank={n: i for i, n in enumerate(names)})
    pods = [pod_from_api(obj) for obj in history]
    return openb_profile(policy, seed=7, max_cpu_milli=96000, max_gpu_milli=8000, history=pods)


def _general(planner: Planner, gang: Gang, snapshot: Snapshot) -> PlanResult:
    """The attempts, without the shortcut for a lone plain member."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner_module._GangPlanning, "_plan_ranked_member", lambda self: None)
        return planner.plan(gang, snapshot)


def _check_rankings(planner: Planner) -> None:
    for ranking in planner._rankings.values():
        valid = sorted(ranking.keys.values())
        assert list(dict.fromkeys(ranking.best_first())) == valid
        assert ranking.head() == (valid[0] if valid else None)
        assert set(ranking.choices) == set(ranking.keys)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_kept_rankings_place_as_fresh_ones(data: st.DataObject) -> None:
    policy = data.draw(st.sampled_from(POLICIES))
    names = [f"n{i}" for i in range(data.draw(st.integers(1, 8)))]
    history = [_pod(data.draw, f"h{i}", None, 1) for i in range(6)]
    profile = _profile(policy, data.draw(st.permutations(names)), history)
    assert profile.candidate_limit == 0 and profile.memoizable
    cache = ClusterCache()
    for name in names:
        cache.apply_node(EventType.ADDED, _node(data.draw, name))
    kept, snapshot = Planner(profile), Snapshot()
    bound: list[str] = []
    for step in range(data.draw(st.integers(1, 25))):
        if bound and data.draw(st.integers(0, 4)) == 0:
            # A pod leaves: its node climbs back in the rankings.
            victim = bound.pop(data.draw(st.integers(0, len(bound) - 1)))
            cache.apply_pod(EventType.DELETED, pod_obj(victim))
            continue
        size = data.draw(st.sampled_from([1, 1, 1, 2, 3]))
        gang = f"g{step}" if size > 1 else None
        members = [f"s{step}-{i}" for i in range(size)]
        for member in members:
            cache.apply_pod(EventType.ADDED, _pod(data.draw, member, gang, size))
        pending = [p for p in cache.pods() if not p.node_name and not cache.is_assumed(p.uid)]
        key = f"default/{gang}" if gang else f"default/pod:{members[0]}"
        found = assemble_gangs(pending, {}, SCHED).gangs[key]
        cache.update_snapshot(snapshot)
        result = kept.plan(found, snapshot)
        _check_rankings(kept)
        assert result == Planner(profile).plan(found, cache.snapshot())
        assert result == _general(Planner(profile), found, cache.snapshot())
        if isinstance(result, Plan):
            cache.assume(result.placements, now=0)
            bound += [
                p.name for p in found.pending if p.uid in {x.pod_uid for x in result.placements}
            ]
        else:
            for member in members:
                cache.apply_pod(EventType.DELETED, pod_obj(member))
