"""Planner invariants over random clusters and gangs (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from policies.profile import POLICIES, build_profile
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import plan_gang
from scheduler.planner.result import Plan
from tests.factories import dgx_links, node_obj, pcie_two_switch_links, pod_obj

PROFILES = {name: build_profile(name, candidate_limit=4) for name in POLICIES}


@st.composite
def clusters(draw: st.DrawFn) -> list[dict[str, Any]]:
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["dgx", "pcie", "plain", "cpu"]))
        zone = {"topology.kubernetes.io/zone": draw(st.sampled_from(["z1", "z2"]))}
        model = draw(st.sampled_from(["A100", "T4"]))
        cpu = draw(st.sampled_from(["8", "32"]))
        if kind == "dgx":
            nodes.append(
                node_obj(f"n{i}", gpus=8, links=dgx_links(), model=model, labels=zone, cpu=cpu)
            )
        elif kind == "pcie":
            nodes.append(
                node_obj(
                    f"n{i}",
                    gpus=4,
                    links=pcie_two_switch_links(),
                    model=model,
                    labels=zone,
                    cpu=cpu,
                )
            )
        elif kind == "plain":
            nodes.append(
                node_obj(f"n{i}", gpus=draw(st.integers(1, 4)), model=model, labels=zone, cpu=cpu)
            )
        else:
            nodes.append(node_obj(f"n{i}", cpu=cpu, labels=zone))
    return nodes


@st.composite
def workloads(draw: st.DrawFn, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pods = []
    names = [n["metadata"]["name"] for n in nodes]
    # Pods already running, with assignments the cache may trust or infer.
    for i in range(draw(st.integers(0, 8))):
        pods.append(
            pod_obj(
                f"run-{i}",
                cpu="2",
                vgpu=draw(st.sampled_from([0, 300, 700])),
                node_name=draw(st.sampled_from(names)),
                phase="Running",
                scheduler="default-scheduler",
            )
        )
    size = draw(st.integers(1, 6))
    min_member = draw(st.integers(1, size))
    for i in range(size):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        vgpu = 0 if gpus else draw(st.sampled_from([0, 250, 500, 1000, 2000]))
        selector = draw(st.sampled_from([None, {"nvidia.com/gpu.product": "A100"}]))
        pods.append(
            pod_obj(
                f"g-{i}",
                gang="g",
                min_member=min_member,
                gpus=gpus,
                vgpu=vgpu,
                cpu=draw(st.sampled_from(["1", "4", "16"])),
                node_selector=selector,
            )
        )
    return pods


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_plan_places_at_least_min_member_or_nothing_and_never_overcommits(
    data: st.DataObject,
) -> None:
    nodes = data.draw(clusters())
    pods = data.draw(workloads(nodes))
    policy = data.draw(st.sampled_from(sorted(PROFILES)))
    cache = ClusterCache()
    for node in nodes:
        cache.apply_node(EventType.ADDED, node)
    for pod in pods:
        cache.apply_pod(EventType.ADDED, pod)
    gang = assemble_gangs(cache.pods(), cache.podgroups(), "gang-scheduler").gangs["default/g"]
    snapshot = cache.snapshot()
    # Devices already over-committed by pods we did not place are left out of the check.
    overcommitted = {(n.name, i) for n in cache.nodes() for i, f in enumerate(n.gpu_free) if f < 0}
    result = plan_gang(PROFILES[policy], gang, snapshot)
    if not isinstance(result, Plan):
        assert result.placeable < max(gang.needed, 1) or result.placeable <= len(gang.pending)
        return
    assert len(result.placements) >= gang.needed
    assert len({p.pod_uid for p in result.placements}) == len(result.placements)
    cache.assume(result.placements, now=0)
    for node in cache.nodes():
        for index, free in enumerate(node.gpu_free):
            assert free >= 0 or (node.name, index) in overcommitted
    # Nodes other schedulers over-filled are not ours to judge; those we placed on are.
    for name in {p.node for p in result.placements}:
        node = cache.node(name)
        assert node is not None
        for resource in ("cpu", "memory", "pods"):
            assert node.requested.get(resource, 0) <= node.allocatable.get(resource, 0)
    by_uid = {p.uid: p for p in gang.pending}
    for placement in result.placements:
        pod = by_uid[placement.pod_uid]
        assert len(placement.shares) == pod.gpu.count
        assert all(milli == pod.gpu.milli for _, milli in placement.shares)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_exhaustive_rankings_kept_across_calls_match_a_fresh_planner(data: st.DataObject) -> None:
    """The persistent ranking is caught up from the snapshot's change log; it must pick
    what a planner that sees the cluster for the first time picks."""
    from scheduler.planner.planner import Planner

    nodes = data.draw(clusters())
    policy = data.draw(st.sampled_from(["binpack", "spread"]))
    profile = build_profile(policy, candidate_limit=0, network_weight=0)
    cache = ClusterCache()
    for node in nodes:
        cache.apply_node(EventType.ADDED, node)
    persistent = Planner(profile)
    snapshot = cache.snapshot()
    for step in range(data.draw(st.integers(1, 15))):
        gpus = data.draw(st.sampled_from([0, 1, 2]))
        vgpu = 0 if gpus else data.draw(st.sampled_from([0, 300, 700]))
        cache.apply_pod(EventType.ADDED, pod_obj(f"p{step}", gpus=gpus, vgpu=vgpu, cpu="1"))
        gang = assemble_gangs(
            [p for p in cache.pods() if not p.node_name], {}, "gang-scheduler"
        ).gangs[f"default/pod:p{step}"]
        cache.update_snapshot(snapshot)
        kept = persistent.plan(gang, snapshot)
        fresh = Planner(profile).plan(gang, cache.snapshot())
        assert type(kept) is type(fresh)
        if isinstance(kept, Plan) and isinstance(fresh, Plan):
            assert kept.placements == fresh.placements
            cache.assume(kept.placements, now=0)
            for placement in kept.placements:
                cache.confirm(placement.pod_uid, placement.node, placement.shares)
        else:
            cache.apply_pod(EventType.DELETED, pod_obj(f"p{step}"))
