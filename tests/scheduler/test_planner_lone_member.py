"""The planner's one-pass path for a lone member (scheduler/planner/planner.py,
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

import scheduler.planner.planning as planner_module
from cache.cluster import ClusterCache, EventType
from cache.pod import pod_from_api
from cache.snapshot import Snapshot
from policies.profile import Profile, build_profile
from policies.scores.fragmentation import OnlineWorkload
from policies.whole_node_reserve import LearnedWholeNodeReserve
from scheduler.gangs.gang import Gang, assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, PlanResult
from tests.factories import dgx_links, make_node, node_obj, pod_obj

SCHED = "gang-scheduler"
PRODUCT = "nvidia.com/gpu.product"
TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
EVEN = {"most-allocated": 1.0, "least-allocated": 1.0}


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


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_lone_member_path_decides_as_the_general_path(data: st.DataObject) -> None:
    policy = data.draw(st.sampled_from(["binpack", "spread", "even"]))
    limit = data.draw(st.integers(1, 5))
    # "even": packing and spreading weigh alike, so totals tie often and the rank or
    # the walk order decides: any node of the window may win, not only the first.
    weights = EVEN if policy == "even" else None
    profile: Profile = build_profile(policy, weights=weights, candidate_limit=limit)
    cache = ClusterCache()
    names = [f"n{i}" for i in range(data.draw(st.integers(1, 8)))]
    for name in names:
        cache.apply_node(EventType.ADDED, _node(data.draw, name))
    if data.draw(st.booleans()):
        # Tie-breaks by rank, as the simulator's profiles have them.
        ranks = {name: data.draw(st.integers(0, 3)) for name in names}
        profile = dataclasses.replace(profile, node_rank=ranks)
    _stream_decides_alike(data, profile, cache, names)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_lone_member_path_applies_the_reserves_as_the_general_path(
    data: st.DataObject,
) -> None:
    """With a whole-node reserve (each last resort) and the model reserve's preference,
    both learnt from the pods the stream brings, and a margin that makes the reserve
    short often: the window's pick decides what the general path's pick decides."""
    limit = data.draw(st.integers(1, 5))
    profile = build_profile("fgd-complete-reserve", topology_keys=(), candidate_limit=limit)
    workload = profile.workload
    assert isinstance(workload, OnlineWorkload)
    resort = data.draw(st.sampled_from([None, "none", "no-stranding"]))
    if resort is not None:
        margin = data.draw(st.sampled_from([1.0, 4.0, 20.0]))
        reserve = LearnedWholeNodeReserve(workload, resort, margin)
        profile = dataclasses.replace(profile, whole_node_reserve=reserve)
    for i in range(data.draw(st.integers(0, 4))):  # whole-node workers seen before
        workload.observe(pod_from_api(pod_obj(f"worker-{i}", gpus=8, cpu="4")))
    # Pods pinned to A100 seen before: unpinned pods are steered off A100 nodes.
    pinned = {"nvidia.com/gpu.product": "A100"}
    for i in range(data.draw(st.sampled_from([0, 20]))):
        obj = pod_obj(f"pinned-{i}", gpus=1 + i % 2, cpu="2", node_selector=pinned)
        workload.observe(pod_from_api(obj))
    cache = ClusterCache()
    names = [f"n{i}" for i in range(data.draw(st.integers(1, 8)))]
    for name in names:
        cache.apply_node(EventType.ADDED, _node(data.draw, name))
    _stream_decides_alike(data, profile, cache, names, workload)


def _stream_decides_alike(
    data: st.DataObject,
    profile: Profile,
    cache: ClusterCache,
    names: list[str],
    workload: OnlineWorkload | None = None,
) -> None:
    """A stream of one-pod gangs, nodes changing between plans: the one-pass path of a
    long-lived planner decides as the general path of another, and of a fresh one
    (`workload`: fed each pod the stream brings, as the scheduling core feeds it)."""
    # Each planner keeps choices across calls against its own snapshot.
    fast_planner, fast_snapshot = Planner(profile), Snapshot()
    slow_planner, slow_snapshot = Planner(profile), Snapshot()
    planned = 0
    for step in range(data.draw(st.integers(1, 20))):
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
        obj = _pod(data.draw, name)
        cache.apply_pod(EventType.ADDED, obj)
        if workload is not None:
            workload.observe(pod_from_api(obj))
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
        assert fast == slow
        # And a planner that keeps nothing agrees too.
        assert fast == _reference(Planner(profile), gang, cache.snapshot())
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


# --- the window's edge cases, one by one ----------------------------------------------
def _even_profile(limit: int, ranks: dict[str, int]) -> Profile:
    """Totals tie on every node, so the rank decides: the test picks the winner."""
    profile = build_profile("even", weights=EVEN, candidate_limit=limit)
    return dataclasses.replace(profile, node_rank=ranks)


def _plan_both(planner: Planner, snapshot: Snapshot, cache: ClusterCache, name: str) -> str:
    """Plan a fresh one-GPU one-pod gang with the kept planner; check it against a
    planner that keeps nothing; the node it goes to."""
    cache.apply_pod(EventType.ADDED, pod_obj(name, gpus=1))
    gang = assemble_gangs([p for p in cache.pods() if p.name == name], {}, SCHED).gangs[
        f"default/pod:{name}"
    ]
    cache.update_snapshot(snapshot)
    kept = planner.plan(gang, snapshot)
    assert kept == _reference(Planner(planner.profile), gang, cache.snapshot())
    assert isinstance(kept, Plan)
    return kept.placements[0].node


def test_a_change_to_the_windows_last_node_keeps_it_in() -> None:
    """The window's last node changes without moving in the walk (another pod's CPU):
    it stays a candidate, and the best."""
    cache = ClusterCache()
    for name in ("n0", "n1", "n2"):
        cache.apply_node(EventType.ADDED, node_obj(name, gpus=8))
    planner, snapshot = Planner(_even_profile(2, {"n0": 1, "n1": 0, "n2": 1})), Snapshot()
    assert _plan_both(planner, snapshot, cache, "p0") == "n1"  # window n0, n1
    other = pod_obj("cpu", cpu="2", node_name="n1", phase="Running", scheduler="other")
    cache.apply_pod(EventType.ADDED, other)
    assert _plan_both(planner, snapshot, cache, "p1") == "n1"


def test_a_window_cut_back_to_its_limit_is_not_complete() -> None:
    """A complete window (every passing node in) that grows past the limit and is cut
    back no longer holds every passing node: when one of its nodes goes, the walk
    must resume and find the node cut off."""
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("n0", gpus=8))
    for name in ("n1", "n2"):
        cache.apply_node(EventType.ADDED, node_obj(name, gpus=8, taints=[TAINT]))
    planner, snapshot = Planner(_even_profile(2, {"n0": 1, "n1": 1, "n2": 0})), Snapshot()
    assert _plan_both(planner, snapshot, cache, "p0") == "n0"  # only n0 passes: complete
    for name in ("n1", "n2"):
        cache.apply_node(EventType.MODIFIED, node_obj(name, gpus=8, resource_version="2"))
    assert _plan_both(planner, snapshot, cache, "p1") == "n0"  # n2 cut off by the limit
    tainted = node_obj("n0", gpus=8, taints=[TAINT], resource_version="2")
    cache.apply_node(EventType.MODIFIED, tainted)
    assert _plan_both(planner, snapshot, cache, "p2") == "n2"


def test_a_node_never_through_a_cache_is_read_afresh() -> None:
    """A node put straight into the snapshot has generation 0: its changes are not in
    the snapshot's log, so a window that saw it is built again next time."""
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("n0", gpus=8))
    planner, snapshot = Planner(_even_profile(4, {"n0": 1, "manual": 0})), Snapshot()
    cache.update_snapshot(snapshot)
    snapshot.put(make_node("manual", gpus=8))
    cache.apply_pod(EventType.ADDED, pod_obj("p0", gpus=1))
    gangs = assemble_gangs(cache.pods(), {}, SCHED).gangs
    first = planner.plan(gangs["default/pod:p0"], snapshot)
    assert isinstance(first, Plan) and first.placements[0].node == "manual"
    # The same node without GPUs now, put again with generation 0 and nothing logged.
    snapshot.put(make_node("manual"))
    cache.apply_pod(EventType.ADDED, pod_obj("p1", gpus=1))
    gangs = assemble_gangs(cache.pods(), {}, SCHED).gangs
    second = planner.plan(gangs["default/pod:p1"], snapshot)
    assert isinstance(second, Plan) and second.placements[0].node == "n0"


def _window_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_attempts(self: object) -> Any:
        raise AssertionError("the general path ran")

    monkeypatch.setattr(planner_module._GangPlanning, "_attempts", no_attempts)


PINNED_A100 = [
    pod_obj(f"pinned-{i}", gpus=1, cpu="2", node_selector={PRODUCT: "A100"}) for i in range(20)
]
WORKERS = [pod_obj(f"worker-{i}", gpus=8, cpu="4") for i in range(20)]


@pytest.mark.parametrize(
    ("seen", "packed", "spare"),
    [
        # The model reserve: pinned pods need the A100 node's GPUs.
        (PINNED_A100, node_obj("a100", gpus=2, model="A100"), node_obj("t4", gpus=4, model="T4")),
        # The whole-node reserve: 8-GPU workers need the only 8-GPU node.
        (WORKERS, node_obj("big", gpus=8, model="T4"), node_obj("t4", gpus=4, model="T4")),
    ],
)
def test_the_window_applies_the_reserves(
    monkeypatch: pytest.MonkeyPatch,
    seen: list[dict[str, Any]],
    packed: dict[str, Any],
    spare: dict[str, Any],
) -> None:
    """A one-pod gang under `fgd-complete-reserve`'s reserves takes the window path,
    and its pick keeps them: packing (weights most-allocated, a tight walk) would put
    the 1-GPU pod on the node another pod already uses, which the reserve keeps."""
    packing = {"most-allocated": 1.0}
    profile = build_profile(
        "fgd-complete-reserve", weights=packing, topology_keys=(), candidate_limit=4
    )
    workload = profile.workload
    assert isinstance(workload, OnlineWorkload)
    for obj in seen:
        workload.observe(pod_from_api(obj))
    cache = ClusterCache()
    for node in (packed, spare):
        cache.apply_node(EventType.ADDED, node)
    name = packed["metadata"]["name"]
    cache.apply_pod(
        EventType.ADDED,
        pod_obj("busy", cpu="48", node_name=name, phase="Running", scheduler="other"),
    )
    cache.apply_pod(EventType.ADDED, pod_obj("solo", gpus=1))
    gang = assemble_gangs(cache.pods(), {}, SCHED).gangs["default/pod:solo"]
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    plain = build_profile("binpack", weights=packing, topology_keys=(), candidate_limit=4)
    unreserved = Planner(plain).plan(gang, snapshot)
    assert isinstance(unreserved, Plan) and unreserved.placements[0].node == name
    general = _reference(Planner(profile), gang, snapshot)
    _window_only(monkeypatch)
    plan = Planner(profile).plan(gang, snapshot)
    assert plan == general
    assert isinstance(plan, Plan) and plan.placements[0].node == "t4"
