"""The starvation guard through the core (scheduler/sharing/starvation.py, issue 12): a large gang
behind a stream of small ones gets a reservation after `guard_seconds` and is placed
within a bounded wait; without the guard it waits forever. Backfill takes only room the
reserved gang does not need."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType, Reservation
from cache.quota import GPU
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.queue import ClusterChange
from scheduler.planner.result import Plan
from scheduler.process.config import build_core_from, config_from_mapping
from scheduler.process.metrics import SchedulerMetrics
from tests.cache.test_quota import quota_obj
from tests.factories import gang_pods, node_obj, pod_obj
from tests.scheduler.cores import core_on_nodes
from tests.scheduler.cores import run_binding as run
from tests.signed import TEST_KEY, signed
from tests.volume_objects import pv_obj, pvc_obj, storage_class_obj, with_claims

ADDED = EventType.ADDED


def core_with(nodes: int, guard: float) -> SchedulingCore:
    core = core_on_nodes(nodes)
    core.cache.assignment_key = TEST_KEY  # pods written bound were bound (signed) with it
    core.starvation.guard_seconds = guard
    return core


def gang(name: str, size: int, gpus: int, priority: int = 0, ns: str = "default") -> list[Any]:
    created = f"2026-01-01T00:{len(name) % 60:02d}:00Z"
    return gang_pods(name, size, namespace=ns, gpus=gpus, priority=priority, created=created)


def stream_into(
    core: SchedulingCore, large_size: int, large_at: float, until: float
) -> tuple[float | None, Plan | None, list[tuple[str, frozenset[str]]]]:
    """From t=0 four 1-GPU gangs arrive every second, each running 20 s; at `large_at` a
    gang "large" of `large_size` x 8 GPUs arrives. Returns when the large gang was placed
    (None: not by `until`), its plan, and the reservations announced."""
    finishing: list[tuple[float, dict[str, Any]]] = []
    announced: list[tuple[str, frozenset[str]]] = []
    small = 0
    now = 0.0
    while now <= until:
        for _, pod in [f for f in finishing if f[0] <= now]:
            core.apply_pod(EventType.DELETED, pod, now)
        finishing = [f for f in finishing if f[0] > now]
        for _ in range(4):
            for pod in gang(f"s{small}", 1, 1):
                pod["metadata"]["creationTimestamp"] = f"2026-01-01T01:{small // 240:02d}:00Z"
                core.apply_pod(ADDED, pod, now)
            small += 1
        if now == large_at:
            for pod in gang("large", large_size, 8):
                core.apply_pod(ADDED, pod, now)
        large: Plan | None = None
        for attempt in run(core, now):
            if not isinstance(attempt.result, Plan):
                continue
            if attempt.gang.key == "default/large":
                large = attempt.result
            for placement in attempt.result.placements:
                finishing.append((now + 20.0, {"metadata": {"uid": placement.pod_uid}}))
        announced.extend(core.starvation.announcements())
        if large is not None:
            return now, large, announced
        now += 1.0
    return None, None, announced


def stream(guard: float, until: float) -> tuple[float | None, list[tuple[str, frozenset[str]]]]:
    """8 nodes of 8 GPUs, the stream above (80 GPUs asked for at once, 64 exist) and at
    t=5 a gang of 8 x 8 GPUs."""
    placed_at, _, announced = stream_into(core_with(8, guard), 8, 5.0, until)
    return placed_at, announced


def test_a_large_gang_behind_a_stream_of_small_ones_is_placed_within_a_bounded_wait() -> None:
    placed_at, announced = stream(guard=30.0, until=400.0)
    # Waited 30 s, then the reserved nodes drain in at most 20 s; plus one backoff (60 s
    # at most) before the gang's retry: a bound, whatever the stream does.
    assert placed_at is not None and placed_at - 5.0 <= 30.0 + 20.0 + 60.0
    # The first reservation, told once, with every node (it needs all 64 GPUs).
    assert announced[0] == ("default/large", frozenset(f"n{i}" for i in range(8)))
    assert [key for key, _ in announced].count("default/large") == 1


def test_without_the_guard_the_large_gang_starves() -> None:
    placed_at, _ = stream(guard=0.0, until=400.0)
    assert placed_at is None


def test_backfill_takes_only_room_the_reserved_gang_does_not_need() -> None:
    # 3 nodes of 8 GPUs, each with 4 GPUs used by a running 1-pod gang; a gang of 2 x 8
    # GPUs starves. It reserves the 2 nodes of least work (all equal: by name, n0 and n1);
    # n2 stays open, and a 4-GPU gang of the same priority goes there, not onto n0/n1.
    core = core_with(3, guard=10.0)
    for i in range(3):
        running = pod_obj(f"r{i}", gpus=4, node_name=f"n{i}", phase="Running")
        core.apply_pod(ADDED, signed(running), 0.0)  # bound by the scheduler: it will leave
    for pod in gang("large", 2, 8):
        core.apply_pod(ADDED, pod, 0.0)
    run(core, 1.0)
    assert core.starvation.announcements() == []  # has not waited long enough
    run(core, 20.0)
    assert core.starvation.announcements() == [("default/large", frozenset({"n0", "n1"}))]
    assert core.starvation_reservations() == {"default/large": frozenset({"n0", "n1"})}
    for pod in gang("large", 2, 8):
        assert core.cache.reservation(pod["metadata"]["uid"]) == Reservation.RESERVED
    assert core.cache.quotas.ledger.used("default").get(GPU, 0) == 12_000  # not charged
    metrics = SchedulerMetrics()
    metrics.observe_core(core)
    pending = metrics.registry.get_sample_value("gang_scheduler_pending_pods")
    assert pending == 2  # held room, still waiting
    for i in range(3):
        for pod in gang(f"fill{i}", 1, 4, priority=0):
            core.apply_pod(ADDED, pod, 21.0)
    placed = [a for a in run(core, 21.0) if isinstance(a.result, Plan)]
    assert [
        {p.node for p in a.result.placements} for a in placed if isinstance(a.result, Plan)
    ] == [{"n2"}]
    # A higher priority is not held back by the reservation.
    for pod in gang("urgent", 1, 4, priority=10):
        core.apply_pod(ADDED, pod, 22.0)
    [urgent] = run(core, 22.0)
    assert isinstance(urgent.result, Plan) and urgent.result.placements[0].node in {"n0", "n1"}
    assert core.starvation_reservations() == {"default/large": frozenset({"n0", "n1"})}
    # The running pods on the reserved nodes leave: the large gang is retried and placed.
    core.apply_pod(EventType.DELETED, pod_obj("r0", node_name="n0"), 30.0)
    core.apply_pod(EventType.DELETED, pod_obj("r1", node_name="n1"), 30.0)
    urgent_uid = urgent.result.placements[0].pod_uid
    core.apply_pod(EventType.DELETED, {"metadata": {"uid": urgent_uid}}, 30.0)
    placed = [a.gang.key for a in run(core, 200.0) if isinstance(a.result, Plan)]
    assert "default/large" in placed
    assert "default/large" not in core.starvation_reservations()  # over once placed


def test_no_reservation_for_a_gang_its_quota_refuses() -> None:
    core = core_with(2, guard=10.0)
    core.apply_elasticquota(ADDED, quota_obj("team", {"nvidia.com/gpu": 8}), 0.0)
    for pod in gang("big", 2, 8, ns="team"):
        core.apply_pod(ADDED, pod, 0.0)
    run(core, 1.0)
    core.queue.cluster_changed(50.0, ClusterChange.QUOTA_CHANGED)
    assert run(core, 50.0)
    assert core.starvation.announcements() == []
    assert core.starvation_reservations() == {}


def test_the_guard_is_read_from_the_configuration() -> None:
    assert config_from_mapping(None).starvation.guard_seconds == 300.0
    assert build_core_from(config_from_mapping(None)).starvation.guard_seconds == 300.0
    off = config_from_mapping({"starvation": {"guardSeconds": 0}})
    assert build_core_from(off).starvation.guard_seconds == 0.0
    assert SchedulingCore(build_profile()).starvation.guard_seconds == 0.0  # sim, demo


def test_a_starving_gang_with_a_claim_reserves_the_node_its_volume_is_pinned_to() -> None:
    # 3 nodes of 8 GPUs, each with 4 GPUs used by a running 1-pod gang; a gang of 1 x 8
    # GPUs starves. Its claim is bound to a PV pinned to n2: the reservation is on n2,
    # not on n0 (first by name among nodes of equal work), where it could never run.
    core = core_with(3, guard=10.0)
    for i in range(3):
        running = pod_obj(f"r{i}", gpus=4, node_name=f"n{i}", phase="Running")
        core.apply_pod(ADDED, signed(running), 0.0)  # bound by the scheduler: it will leave
    for kind, obj in (
        ("classes", storage_class_obj("local")),
        ("volumes", pv_obj("disk-n2", node="n2", claim=("default", "data"), phase="Bound")),
        ("claims", pvc_obj("data", volume_name="disk-n2")),
    ):
        core.apply_volume_object(kind, ADDED, obj, 0.0)
    for pod in gang("large", 1, 8):
        core.apply_pod(ADDED, with_claims(pod, "data"), 0.0)
    run(core, 1.0)
    assert core.starvation_reservations() == {}  # has not waited long enough
    run(core, 20.0)
    assert core.starvation.announcements() == [("default/large", frozenset({"n2"}))]
    assert core.starvation_reservations() == {"default/large": frozenset({"n2"})}
    # The pod on n2 leaves: the gang is placed there, with its volume.
    core.apply_pod(EventType.DELETED, pod_obj("r2", node_name="n2"), 30.0)
    placed = [a for a in run(core, 200.0) if a.gang.key == "default/large"]
    assert placed and isinstance(placed[-1].result, Plan)
    assert [p.node for p in placed[-1].result.placements] == ["n2"]
    assert "default/large" not in core.starvation_reservations()


RACK = "topology.kubernetes.io/rack"


def test_a_starving_rack_required_gang_reserves_inside_one_rack() -> None:
    """8 nodes of 8 GPUs in two racks of 4, a stream of 1-GPU gangs (each running 20 s)
    keeping every GPU busy; at t=20 a gang of 4 x 8 GPUs that requires one rack. Its
    reservation is inside one rack, and it is placed there within a bounded wait."""
    core = SchedulingCore(build_profile())
    for i in range(8):
        labels = {RACK: f"r{i // 4}"}
        core.apply_node(ADDED, node_obj(f"n{i}", gpus=8, labels=labels), 0.0)
    core.cache.assignment_key = TEST_KEY
    core.starvation.guard_seconds = 30.0
    group = {
        "metadata": {"name": "large", "namespace": "default"},
        "spec": {"minMember": 4, "topology": {"requiredKey": RACK}},
    }
    core.apply_podgroup(ADDED, group, 0.0)
    rack_of = {f"n{i}": f"r{i // 4}" for i in range(8)}
    _, plan, told = stream_into(core, 4, 20.0, 400.0)
    placed = {rack_of[p.node] for p in plan.placements} if plan is not None else set()
    announced = [nodes for key, nodes in told if "large" in key]
    assert announced, "the large gang starved and reserved"
    assert all(len({rack_of[n] for n in nodes}) == 1 for nodes in announced), announced
    assert len(placed) == 1, placed
