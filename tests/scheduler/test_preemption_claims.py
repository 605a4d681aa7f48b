"""Preemption and reclaim for gangs whose members mount volume claims, through the core:
the victim search's what-if plans them as the core does (scheduler/planner/volume_claims.py)."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType, Reservation
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan, Unschedulable
from tests.cache.test_quota import quota_obj
from tests.factories import node_obj, pod_obj
from tests.scheduler.test_preemption_core import core_with, delete, run
from tests.volume_objects import pv_obj, pvc_obj, storage_class_obj, with_claims

ADDED = EventType.ADDED


def pod(
    name: str, priority: int, pool: str = "", namespace: str = "default", gpus: int = 8
) -> dict[str, Any]:
    """A one-pod gang; with `pool`, held to the node of that name (placed by the core
    in `bind_first`: victims are gangs this scheduler bound)."""
    return pod_obj(
        name,
        namespace=namespace,
        gang=name,
        min_member=1,
        gpus=gpus,
        priority=priority,
        node_selector={"pool": pool} if pool else None,
    )


def nodes(*names: str) -> list[dict[str, Any]]:
    return [node_obj(name, gpus=8, labels={"pool": name}) for name in names]


def bind_first(core: SchedulingCore, *pods: dict[str, Any]) -> None:
    """The pods added, planned and bound by the core itself."""
    for obj in pods:
        core.apply_pod(ADDED, obj, 0.0)
    for attempt in run(core, 0.5):
        assert isinstance(attempt.result, Plan)
        for placement in attempt.result.placements:
            core.bound(placement)


def add_volumes(core: SchedulingCore, *objects: tuple[str, dict[str, Any]]) -> None:
    for kind, obj in objects:
        core.apply_volume_object(kind, ADDED, obj, 0.0)


def test_a_preemptor_with_a_local_volume_evicts_the_gang_on_its_volumes_node() -> None:
    """The cheapest victim by priority (low, on n0) would free room where the claim's
    only PV cannot be reached: the search evicts mid on n1 instead, holds the PV with
    the room, and the gang is placed there with it once mid is gone."""
    low, mid = pod("low", 1, "n0"), pod("mid", 5, "n1")
    high = with_claims(pod("high", 10), "data")
    core = core_with(nodes("n0", "n1"), [])
    bind_first(core, low, mid)
    add_volumes(
        core,
        ("classes", storage_class_obj("local")),
        ("volumes", pv_obj("disk-n1", node="n1")),
        ("claims", pvc_obj("data")),
    )
    core.apply_pod(ADDED, high, 0.0)
    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None
    assert [v.key for v in decision.victims] == ["default/mid"]
    assert [p.node for p in decision.placements] == ["n1"]
    assert decision.volumes == (("disk-n1", "default/data"),)
    assert core.volumes.held_for("disk-n1") == "default/data"
    delete(core, [mid], 2.0)
    [placed] = run(core, 2.0)
    assert isinstance(placed.result, Plan)
    assert [p.node for p in placed.result.placements] == ["n1"]
    [choice] = [c for choices in placed.result.volumes.values() for c in choices]
    assert choice.volume == "disk-n1"


def test_no_eviction_when_the_claims_volume_is_where_no_victim_may_be_taken() -> None:
    """Room-wise, evicting low would let the gang fit; its volume is on n1, held by a
    gang of higher priority: nothing is evicted."""
    core = core_with(nodes("n0", "n1"), [])
    bind_first(core, pod("low", 1, "n0"), pod("top", 20, "n1"))
    add_volumes(
        core,
        ("classes", storage_class_obj("local")),
        ("volumes", pv_obj("disk-n1", node="n1")),
        ("claims", pvc_obj("data")),
    )
    core.apply_pod(ADDED, with_claims(pod("high", 10), "data"), 0.0)
    [attempt] = run(core)
    assert isinstance(attempt.result, Unschedulable) and attempt.preemption is None
    assert core.preempter.decisions == {}


def test_a_read_write_once_pod_claim_of_a_victim_is_free_once_it_is_gone() -> None:
    """The victim mounts the ReadWriteOncePod claim the preemptor needs: in the what-if
    without it, the claim is free, so the victim is chosen and the preemptor placed."""
    modes = ("ReadWriteOncePod",)
    low = with_claims(pod("low", 1, "n0"), "shared")
    core = core_with(nodes("n0"), [])
    add_volumes(
        core,
        ("classes", storage_class_obj("local")),
        ("volumes", pv_obj("pv-x", modes=modes, claim=("default", "shared"), phase="Bound")),
        ("claims", pvc_obj("shared", modes=modes, volume_name="pv-x")),
    )
    bind_first(core, low)
    high = with_claims(pod("high", 10), "shared")
    core.apply_pod(ADDED, high, 0.0)
    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None and [v.key for v in decision.victims] == ["default/low"]
    uid = decision.placements[0].pod_uid
    assert core.cache.reservation(uid) == Reservation.NOMINATED
    delete(core, [low], 2.0)
    [placed] = run(core, 2.0)
    assert isinstance(placed.result, Plan)


def test_a_dropped_decision_releases_the_volumes_it_held() -> None:
    core = core_with(nodes("n1"), [])
    bind_first(core, pod("low", 1, "n1"))
    add_volumes(
        core,
        ("classes", storage_class_obj("local")),
        ("volumes", pv_obj("disk-n1", node="n1")),
        ("claims", pvc_obj("data")),
    )
    core.apply_pod(ADDED, with_claims(pod("high", 10), "data"), 0.0)
    [attempt] = run(core)
    assert attempt.preemption is not None
    assert core.volumes.held_for("disk-n1") == "default/data"
    core.preempter.refuse("default/high", "default/low", "a PodDisruptionBudget refused", 1.0)
    assert core.volumes.held_for("disk-n1") is None


def test_a_gang_within_its_min_with_a_claim_reclaims_borrowed_room() -> None:
    """Reclaim takes the same path: team a, within its min, evicts team b's borrowing
    gang on the node its volume is on."""
    core = core_with(nodes("n0", "n1"), [])
    core.apply_elasticquota(ADDED, quota_obj("a", min_={"nvidia.com/gpu": 8}), 0.0)
    core.apply_elasticquota(ADDED, quota_obj("b", min_={"nvidia.com/gpu": 8}), 0.0)
    bind_first(core, pod("b0", 50, "n0", namespace="b"), pod("b1", 50, "n1", namespace="b"))
    add_volumes(
        core,
        ("classes", storage_class_obj("local")),
        ("volumes", pv_obj("disk-n1", node="n1")),
        ("claims", pvc_obj("data", namespace="a")),
    )
    core.apply_pod(ADDED, with_claims(pod("job", 1, namespace="a"), "data"), 0.0)
    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None and decision.reason == "reclaim"
    assert [v.key for v in decision.victims] == ["b/b1"]
    assert [p.node for p in decision.placements] == ["n1"]
