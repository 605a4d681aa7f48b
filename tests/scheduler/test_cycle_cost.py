"""What a scheduling cycle must not redo: a run of alike pods pays device choice and
scoring only for the nodes that changed, and gang assembly hands out its gangs without
copying them (bench/kube.py measures the speed; these check the work is not done)."""

from __future__ import annotations

from typing import Any

import pytest

import scheduler.planner.node_choice as planner_module
from cache.cluster import ClusterCache, EventType
from cache.node import NodeInfo
from cache.pod import PodInfo
from cache.snapshot import Snapshot
from policies.profile import Profile, build_profile
from scheduler.gangs.gang import GangIndex, assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan
from tests.factories import make_pod, node_obj, pod_obj

SCHED = "gang-scheduler"


def _single_pods(cache: ClusterCache, count: int) -> list[str]:
    """`count` one-pod gangs of one template, one GPU each; their gang keys."""
    for i in range(count):
        cache.apply_pod(EventType.ADDED, pod_obj(f"web-{i}", gpus=1))
    return [f"default/pod:web-{i}" for i in range(count)]


def _count_evaluations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    evaluated: list[str] = []
    original = planner_module.evaluate_choice

    def counting(profile: Profile, pod: PodInfo, node: NodeInfo, version: int) -> Any:
        evaluated.append(node.name)
        return original(profile, pod, node, version)

    monkeypatch.setattr(planner_module, "evaluate_choice", counting)
    return evaluated


def test_alike_pods_evaluate_only_the_nodes_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ClusterCache()
    for i in range(12):
        cache.apply_node(EventType.ADDED, node_obj(f"n{i:02d}", gpus=8))
    keys = _single_pods(cache, 3)
    evaluated = _count_evaluations(monkeypatch)
    profile = build_profile()
    planner, snapshot = Planner(profile), Snapshot()

    placed: list[str] = []
    for number, key in enumerate(keys):
        evaluated.clear()
        cache.update_snapshot(snapshot)
        gang = assemble_gangs(cache.pods(), cache.podgroups(), SCHED).gangs[key]
        result = planner.plan(gang, snapshot)
        kept_calls = set(evaluated)
        assert isinstance(result, Plan)
        # The same answer as a planner that keeps nothing.
        fresh = Planner(profile).plan(gang, snapshot)
        assert isinstance(fresh, Plan) and fresh.placements == result.placements
        if number == 0:
            assert len(kept_calls) == 12  # every candidate node
        else:
            # Only the node the previous pod went to changed since.
            assert kept_calls == {placed[-1]}
        cache.assume(result.placements, 0.0)
        placed.append(result.placements[0].node)


def test_kept_choices_are_dropped_when_the_node_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node relabelled, charged or freed is evaluated again: a kept answer never
    outlives the node state it was computed for."""
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("a", gpus=2))
    cache.apply_node(EventType.ADDED, node_obj("b", gpus=4))
    keys = _single_pods(cache, 2)
    profile = build_profile()
    planner, snapshot = Planner(profile), Snapshot()
    cache.update_snapshot(snapshot)
    gangs = assemble_gangs(cache.pods(), cache.podgroups(), SCHED).gangs
    first = planner.plan(gangs[keys[0]], snapshot)
    assert isinstance(first, Plan) and first.placements[0].node == "a"  # tightest fit
    # Another scheduler's pod fills node a: the next alike pod must go to b.
    cache.apply_pod(EventType.ADDED, pod_obj("other", gpus=2, node_name="a", phase="Running"))
    cache.update_snapshot(snapshot)
    second = planner.plan(gangs[keys[1]], snapshot)
    assert isinstance(second, Plan) and second.placements[0].node == "b"


def test_gang_index_hands_out_read_only_views() -> None:
    """The index gives its own maps as read-only views (no copy of every gang per
    cycle), so a caller cannot change what the next cycle builds on."""
    index = GangIndex(SCHED)
    index.upsert_pod(make_pod("solo"))
    result, _ = index.assemble()
    assert set(result.gangs) == {"default/pod:solo"}
    with pytest.raises(TypeError):
        result.gangs["default/other"] = result.gangs["default/pod:solo"]  # type: ignore[index]
    with pytest.raises(TypeError):
        result.partial["default/other"] = result.gangs["default/pod:solo"]  # type: ignore[index]


def test_kept_choices_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shape's keep starts over past its bound, so memory does not grow with every
    node a long-lived shape was ever evaluated on."""
    monkeypatch.setattr(planner_module, "KEPT_CHOICES_PER_SHAPE", 4)
    cache = ClusterCache()
    for i in range(10):
        cache.apply_node(EventType.ADDED, node_obj(f"n{i}", gpus=1))
    keys = _single_pods(cache, 3)
    planner, snapshot = Planner(build_profile()), Snapshot()
    sizes = []
    for key in keys:
        cache.update_snapshot(snapshot)
        gang = assemble_gangs(cache.pods(), cache.podgroups(), SCHED).gangs[key]
        result = planner.plan(gang, snapshot)
        assert isinstance(result, Plan)
        cache.assume(result.placements, 0.0)
        kept = planner.kept_choices(gang.pending[0], snapshot)
        assert kept is not None
        sizes.append(len(kept))
    # Each plan evaluated all 10 nodes, past the bound of 4: the next ask starts over.
    assert sizes == [0, 0, 0]


def test_waiting_changes_name_only_the_gangs_rebuilt() -> None:
    """The loop publishes waiting messages every cycle: after the first full look it is
    told only the gangs rebuilt since, not every gang of a long queue."""
    from scheduler.cycle.core import SchedulingCore
    from tests.factories import pod_obj as member

    core = SchedulingCore(build_profile())
    for name in ("a", "b", "c"):
        # Each gang waits for a second member that does not exist yet.
        core.apply_pod(EventType.ADDED, member(f"{name}-0", gang=name, min_member=2), 0)
    core.refresh(0)
    assert core.waiting_changes() is None  # the first time: look at every gang
    assert {gang.key for gang, _ in core.waiting()} == {"default/a", "default/b", "default/c"}
    core.refresh(0)
    assert core.waiting_changes() == ([], [])  # nothing rebuilt since
    core.apply_pod(EventType.ADDED, member("b-1", gang="b", min_member=2), 0)  # b is ready
    core.apply_pod(EventType.ADDED, member("c-1", gang="c", min_member=3), 0)  # c waits on
    core.refresh(0)
    changes = core.waiting_changes()
    assert changes is not None
    waiting, done = changes
    assert [gang.key for gang, _ in waiting] == ["default/c"]
    assert "waiting for" in waiting[0][1]
    assert done == ["default/b"]
