"""ClusterCache: events, resourceVersions, accounting, assume/confirm/forget, snapshots."""

from __future__ import annotations

import pytest

from cache.cluster import AssumeError, ClusterCache, EventType, Placement, Reservation
from cache.gpu import sign_assignment
from cache.snapshot import PlanningView
from tests.factories import node_obj, pod_obj

ADDED, MODIFIED, DELETED = EventType.ADDED, EventType.MODIFIED, EventType.DELETED


def cluster(*nodes: dict) -> ClusterCache:
    cache = ClusterCache()
    for node in nodes:
        cache.apply_node(ADDED, node)
    return cache


def accounting(cache: ClusterCache) -> dict[str, tuple[dict[str, int], list[int]]]:
    return {n.name: (dict(n.requested), list(n.gpu_free)) for n in cache.nodes()}


def test_bound_pods_of_any_scheduler_take_resources() -> None:
    cache = cluster(node_obj("n", gpus=4))
    cache.apply_pod(
        ADDED, pod_obj("a", cpu="2", gpus=2, scheduler="default-scheduler", node_name="n")
    )
    node = cache.node("n")
    assert node is not None
    assert node.requested["cpu"] == 2000 and node.requested["pods"] == 1
    assert sorted(node.gpu_free) == [0, 0, 1000, 1000]
    cache.apply_pod(
        MODIFIED,
        pod_obj("a", cpu="2", gpus=2, node_name="n", phase="Succeeded", resource_version="2"),
    )
    assert node.requested == {} and node.gpu_free == [1000] * 4


def test_assignment_annotation_is_charged_as_written() -> None:
    cache = cluster(node_obj("n", gpus=4))
    cache.assignment_key = b"k" * 16
    signature = sign_assignment(cache.assignment_key, "uid-default-a", "n", ((2, 300),))
    cache.apply_pod(
        ADDED,
        pod_obj(
            "a",
            vgpu=300,
            node_name="n",
            annotations={
                "gang-scheduler.io/gpu-devices": "2:300",
                "gang-scheduler.io/gpu-devices-signature": signature,
            },
        ),
    )
    assert cache.node("n").gpu_free == [1000, 1000, 700, 1000]  # type: ignore[union-attr]
    # An assignment that does not match the request is not trusted: inferred instead.
    cache.apply_pod(
        ADDED,
        pod_obj(
            "b", vgpu=200, node_name="n", annotations={"gang-scheduler.io/gpu-devices": "9:500"}
        ),
    )
    # (inferred best fit: the tightest device with room)
    assert cache.node("n").gpu_free == [1000, 1000, 500, 1000]  # type: ignore[union-attr]


def test_stale_events_never_overwrite_newer_state() -> None:
    cache = cluster(node_obj("n", gpus=2))
    cache.apply_pod(ADDED, pod_obj("a", gpus=1, node_name="n", resource_version="10"))
    cache.apply_pod(MODIFIED, pod_obj("a", gpus=1, resource_version="9"))  # older: pending
    pod = cache.pod("uid-default-a")
    assert pod is not None and pod.node_name == "n" and pod.resource_version == "10"
    cache.apply_node(MODIFIED, node_obj("n", gpus=1, resource_version="0"))
    assert len(cache.node("n").devices) == 2  # type: ignore[union-attr]


def test_deleting_unknown_objects_is_harmless() -> None:
    cache = ClusterCache()
    cache.apply_pod(DELETED, pod_obj("ghost"))
    cache.apply_node(DELETED, node_obj("ghost"))
    cache.apply_podgroup(DELETED, {"metadata": {"name": "g", "namespace": "x"}})
    assert list(cache.pods()) == [] and list(cache.nodes()) == []


def test_pods_seen_before_their_node_are_charged_when_it_arrives() -> None:
    cache = ClusterCache()
    cache.apply_pod(ADDED, pod_obj("a", cpu="3", gpus=1, node_name="n"))
    cache.apply_node(ADDED, node_obj("n", gpus=2))
    node = cache.node("n")
    assert node is not None and node.requested["cpu"] == 3000 and sorted(node.gpu_free) == [0, 1000]


def test_node_update_keeps_accounting() -> None:
    cache = cluster(node_obj("n", gpus=2))
    cache.apply_pod(ADDED, pod_obj("a", cpu="3", gpus=1, node_name="n"))
    cache.apply_node(MODIFIED, node_obj("n", gpus=2, labels={"rack": "r1"}, resource_version="2"))
    node = cache.node("n")
    assert node is not None and node.labels["rack"] == "r1"
    assert node.requested["cpu"] == 3000 and sorted(node.gpu_free) == [0, 1000]


def test_assume_confirm_via_event() -> None:
    cache = cluster(node_obj("n", gpus=4))
    cache.apply_pod(ADDED, pod_obj("a", gpus=2))
    assert [p.name for p in cache.pending_pods("gang-scheduler")] == ["a"]
    cache.assume([Placement("uid-default-a", "n", ((1, 1000), (3, 1000)))], now=0)
    assert list(cache.pending_pods("gang-scheduler")) == []
    assert cache.node("n").gpu_free == [1000, 0, 1000, 0]  # type: ignore[union-attr]
    # A late event of the still-pending pod does not undo the reservation.
    cache.apply_pod(MODIFIED, pod_obj("a", gpus=2, resource_version="2"))
    assert cache.is_assumed("uid-default-a")
    bound = pod_obj(
        "a",
        gpus=2,
        node_name="n",
        resource_version="3",
        annotations={"gang-scheduler.io/gpu-devices": "1:1000,3:1000"},
    )
    cache.apply_pod(MODIFIED, bound)
    assert not cache.is_assumed("uid-default-a")
    assert cache.node("n").gpu_free == [1000, 0, 1000, 0]  # type: ignore[union-attr]
    assert cache.reservation("uid-default-a") is None


def test_assume_forget_restores_exact_state() -> None:
    cache = cluster(node_obj("n", gpus=4), node_obj("m", gpus=4))
    cache.apply_pod(
        ADDED, pod_obj("other", cpu="1", vgpu=300, node_name="n", scheduler="default-scheduler")
    )
    cache.apply_pod(ADDED, pod_obj("a", gpus=2))
    cache.apply_pod(ADDED, pod_obj("b", vgpu=500))
    before = accounting(cache)
    cache.assume(
        [
            Placement("uid-default-a", "m", ((0, 1000), (1, 1000))),
            Placement("uid-default-b", "n", ((0, 500),)),
        ],
        now=0,
    )
    assert accounting(cache) != before
    cache.forget("uid-default-a")
    cache.forget("uid-default-b")
    assert accounting(cache) == before


def test_assume_is_all_or_nothing() -> None:
    cache = cluster(node_obj("n", gpus=4))
    cache.apply_pod(ADDED, pod_obj("a", gpus=1))
    before = accounting(cache)
    with pytest.raises(AssumeError, match="node gone"):
        cache.assume(
            [
                Placement("uid-default-a", "n", ((0, 1000),)),
                Placement("uid-default-a", "gone", ((0, 1000),)),
            ],
            now=0,
        )
    assert accounting(cache) == before and not cache.is_assumed("uid-default-a")


def test_a_reservation_the_api_accepted_is_never_forgotten_only_confirmed() -> None:
    cache = cluster(node_obj("n", gpus=1))
    cache.apply_pod(ADDED, pod_obj("a", gpus=1))
    cache.assume([Placement("uid-default-a", "n", ((0, 1000),))], now=100)
    assert cache.reservation("uid-default-a") == Reservation.BINDING
    cache.mark_bound("uid-default-a")
    # A 201'd bind is bound: a late "failure" report and an unknown mark change nothing.
    cache.forget("uid-default-a")
    cache.mark_unknown("uid-default-a")
    assert cache.reservation("uid-default-a") == Reservation.BOUND
    # A stale event (the pod still unbound) keeps it charged.
    cache.apply_pod(MODIFIED, pod_obj("a", gpus=1, resource_version="2"))
    assert cache.node("n").gpu_free == [0]  # type: ignore[union-attr]
    assert list(cache.pending_pods("gang-scheduler")) == []
    bound = pod_obj(
        "a",
        gpus=1,
        node_name="n",
        resource_version="3",
        annotations={"gang-scheduler.io/gpu-devices": "0:1000"},
    )
    cache.apply_pod(MODIFIED, bound)
    assert cache.reservation("uid-default-a") is None
    assert cache.node("n").gpu_free == [0]  # type: ignore[union-attr]


def test_an_unknown_bind_stays_reserved_until_settled() -> None:
    cache = cluster(node_obj("n", gpus=2))
    cache.apply_pod(ADDED, pod_obj("a", gpus=1))
    cache.apply_pod(ADDED, pod_obj("b", gpus=1))
    cache.assume(
        [
            Placement("uid-default-a", "n", ((0, 1000),)),
            Placement("uid-default-b", "n", ((1, 1000),)),
        ],
        now=0,
    )
    cache.mark_unknown("uid-default-a")
    cache.mark_unknown("uid-default-b")
    assert {p.pod_uid for p in cache.unresolved()} == {"uid-default-a", "uid-default-b"}
    # A relist showing both still unbound settles neither: only a read after the bind
    # ended does (the core's bind_resolved), or the API's word on the pod.
    cache.replace_pods([pod_obj("a", gpus=1), pod_obj("b", gpus=1)])
    assert cache.node("n").gpu_free == [0, 0]  # type: ignore[union-attr]
    cache.forget("uid-default-a")  # a read showed it unbound
    cache.apply_pod(DELETED, pod_obj("b", gpus=1))
    assert cache.unresolved() == [] and cache.node("n").gpu_free == [1000, 1000]  # type: ignore[union-attr]
    assert [p.name for p in cache.pending_pods("gang-scheduler")] == ["a"]


def test_relist_keeps_reservations_of_pods_that_still_exist() -> None:
    cache = cluster(node_obj("n", gpus=2))
    cache.apply_pod(ADDED, pod_obj("a", gpus=1))
    cache.apply_pod(ADDED, pod_obj("gone", cpu="1", node_name="n"))
    cache.assume([Placement("uid-default-a", "n", ((0, 1000),))], now=0)
    cache.replace_pods([pod_obj("a", gpus=1)])
    assert cache.is_assumed("uid-default-a") and cache.pod("uid-default-gone") is None
    node = cache.node("n")
    assert node is not None and node.gpu_free == [0, 1000] and node.requested["pods"] == 1
    cache.replace_nodes([])
    assert cache.node("n") is None


def test_snapshot_update_copies_only_changed_nodes() -> None:
    cache = cluster(*(node_obj(f"n{i}", gpus=8) for i in range(50)))
    snapshot = cache.snapshot()
    assert len(snapshot) == 50
    assert cache.update_snapshot(snapshot) == 0
    cache.apply_pod(ADDED, pod_obj("a", gpus=3, node_name="n7"))
    assert cache.update_snapshot(snapshot) == 1
    assert snapshot.nodes["n7"].free_whole_gpus == 5
    cache.apply_node(DELETED, node_obj("n3"))
    cache.apply_node(ADDED, node_obj("n3", gpus=2, resource_version="5"))
    cache.apply_node(DELETED, node_obj("n4"))
    cache.update_snapshot(snapshot)
    assert "n4" not in snapshot.nodes and snapshot.nodes["n3"].free_whole_gpus == 2
    fresh = cache.snapshot()
    assert {n: (v.requested, v.gpu_free) for n, v in snapshot.nodes.items()} == {
        n: (v.requested, v.gpu_free) for n, v in fresh.nodes.items()
    }


def test_snapshot_change_log_names_what_changed_since_a_generation() -> None:
    cache = cluster(*(node_obj(f"n{i}", gpus=2) for i in range(3)))
    snapshot = cache.snapshot()
    seen = snapshot.generation
    cache.apply_pod(ADDED, pod_obj("a", gpus=1, node_name="n2"))
    cache.apply_node(DELETED, node_obj("n0"))
    cache.apply_pod(ADDED, pod_obj("b", gpus=1, node_name="n1"))
    cache.update_snapshot(snapshot)
    assert snapshot.changed_since(seen) == ["n2", "n0", "n1"]
    assert snapshot.changed_since(snapshot.generation) == []


def test_snapshot_candidates_walk_the_capacity_index() -> None:
    cache = cluster(*(node_obj(f"n{i}", gpus=8) for i in range(4)))
    for i, used in enumerate([6, 2, 7, 0]):
        if used:
            cache.apply_pod(ADDED, pod_obj(f"p{i}", gpus=used, node_name=f"n{i}"))
    snapshot = cache.snapshot()
    assert list(snapshot.candidates(2, 1000, 0, tight=True)) == ["n0", "n1", "n3"]
    assert list(snapshot.candidates(2, 1000, 0, tight=False)) == ["n3", "n1", "n0"]
    assert next(iter(snapshot.candidates(1, 500, 0, tight=True))) == "n0"


def test_planning_view_leaves_the_snapshot_alone() -> None:
    cache = cluster(node_obj("n", gpus=2))
    snapshot = cache.snapshot()
    view = PlanningView(snapshot)
    view.place("n", {"cpu": 1000}, ((0, 1000),))
    assert view.node("n").gpu_free == [0, 1000] and view.version("n") > 0
    assert snapshot.nodes["n"].gpu_free == [1000, 1000] and view.version("x") == 0


def test_assuming_a_plan_never_moves_an_inferred_share_onto_its_devices() -> None:
    # Another scheduler's shares (300, 700, 700 milli) are inferred onto 3 GPUs as
    # [1000, 700, 0] used; a plan takes the free GPU whole and 250 of the 300 left on
    # GPU 1. Charging the reservation before the guesses re-inferred them around it
    # (700 + 300 onto GPU 0's neighbour) and booked GPU 1 at 1,250 milli (found by
    # test_planner_properties).
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("n0", gpus=3))
    for i, milli in enumerate((300, 700, 700)):
        other = pod_obj(f"run-{i}", vgpu=milli, node_name="n0", phase="Running")
        other["spec"]["schedulerName"] = "default-scheduler"
        cache.apply_pod(EventType.ADDED, other)
    for name, request in (("whole", {"gpus": 1}), ("share", {"vgpu": 250})):
        cache.apply_pod(EventType.ADDED, pod_obj(name, gang="g", min_member=2, **request))
    (node,) = cache.nodes()
    assert node.gpu_free == [0, 300, 1000]
    cache.assume(
        [
            Placement("uid-default-whole", "n0", ((2, 1000),)),
            Placement("uid-default-share", "n0", ((1, 250),)),
        ],
        now=0,
    )
    (node,) = cache.nodes()
    assert node.gpu_free == [0, 50, 0]
