"""The gang binder against the API emulator over real HTTP: all members or none, one
request per pod on the happy path, what is and is not retried, the GPU assignment on the
pod, onBindFailure, and the crash-safety rule for partial gangs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cache.cluster import EventType, Placement, Reservation
from cache.gpu import ASSIGNMENT_ANNOTATION, format_assignment
from cache.pod import pod_from_api
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.gangs.gang import Gang, build_gang
from scheduler.kube.binder import (
    RESOLVE_ATTEMPTS,
    GangBinder,
    PartialGangs,
    bind_and_settle,
    binding_body,
    resolve_unknown,
    restart_decision,
)
from scheduler.kube.client import KubeClient
from scheduler.planner.result import Plan
from tests.factories import node_obj, pod_obj
from tests.kubeapi import KubeApiEmulator
from tests.signed import TEST_KEY, signed
from tests.waiting import eventually

SCHEDULER = "gang-scheduler"


def seed_gang(
    api: KubeApiEmulator, name: str = "train", size: int = 4, gpus: int = 2, nodes: int = 2
) -> None:
    for i in range(nodes):
        api.put_node(node_obj(f"n{i}", gpus=8))
    for i in range(size):
        api.put_pod(pod_obj(f"{name}-{i}", gang=name, min_member=size, gpus=gpus))


def core_from(api: KubeApiEmulator) -> SchedulingCore:
    """A core fed what the server holds (what the informers would give it)."""
    core = SchedulingCore(build_profile())
    core.replace_nodes(api.nodes(), 0.0)
    core.replace_pods(api.pods(), 0.0)
    return core


def plan_next(core: SchedulingCore) -> tuple[Gang, Plan]:
    attempt = core.schedule_next(0.0)
    assert attempt is not None and isinstance(attempt.result, Plan), attempt
    return attempt.gang, attempt.result


def bound_pods(api: KubeApiEmulator) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in api.pods()
        if p["spec"].get("nodeName")
    }


@pytest.mark.asyncio
async def test_four_member_gang_binds_all_four_with_exactly_four_requests(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api)
    gang, plan = plan_next(core_from(api))
    api.reset_request_counts()
    result = await GangBinder(client).bind(gang, plan)
    assert result.ok and len(result.bound) == 4
    assert api.request_count() == 4
    assert api.request_count("create", "pods", "binding") == 4
    assert result.requests == 4
    for placement in plan.placements:
        pod = next(p for p in api.pods() if p["metadata"]["uid"] == placement.pod_uid)
        assert pod["spec"]["nodeName"] == placement.node
        # Node and devices in one write: the Binding's annotation is on the pod.
        assert pod["metadata"]["annotations"][ASSIGNMENT_ANNOTATION] == format_assignment(
            placement.shares
        )
        assert len(placement.shares) == 2


@pytest.mark.asyncio
async def test_a_pod_without_gpus_gets_no_assignment_annotation(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api, size=2, gpus=0)
    gang, plan = plan_next(core_from(api))
    body = binding_body(gang.pending[0], plan.placements[0])
    assert "annotations" not in body["metadata"]
    assert body["metadata"]["uid"] == gang.pending[0].uid
    result = await GangBinder(client).bind(gang, plan)
    assert result.ok
    for pod in api.pods():
        assert ASSIGNMENT_ANNOTATION not in pod["metadata"]["annotations"]


@pytest.mark.asyncio
async def test_third_bind_failing_breaks_the_gang_and_bound_members_are_deleted(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api)
    core = core_from(api)
    gang, plan = plan_next(core)
    api.reset_request_counts()
    api.fail_next_binds(1, status=409, after=2)
    binder = GangBinder(client, concurrency=1)  # one at a time: "the 3rd" is well defined
    result, undo = await bind_and_settle(core, binder, gang, plan, clock=lambda: 0.0)
    assert not result.ok
    assert len(result.bound) == 3 and len(result.failed) == 1
    failed = result.failed[0]
    assert failed.status == 409 and failed.requests == 1
    assert "409" in result.reason and failed.key in result.reason
    # 409 is never retried: one binding request per member, nothing read.
    assert api.request_count("create", "pods", "binding") == 4
    assert api.request_count("get", "pods") == 0
    assert undo is not None and sorted(undo.deleted) == sorted(m.key for m in result.bound)
    assert "deleted" in undo.describe()
    assert bound_pods(api) == {}  # none left bound
    assert api.request_count("delete", "pods") == 3
    # The core released the reservation of the member that was not bound and will retry.
    assert failed.placement.pod_uid not in core.cache.assumed()
    assert gang.key in core.queue


@pytest.mark.asyncio
async def test_a_server_error_is_retried_once_when_the_pod_is_still_unbound(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api)
    gang, plan = plan_next(core_from(api))
    api.reset_request_counts()
    api.fail_next_binds(1, status=500, after=2)
    result = await GangBinder(client, concurrency=1, retry_jitter=0.01).bind(gang, plan)
    assert result.ok
    assert api.request_count("create", "pods", "binding") == 5
    assert api.request_count("get", "pods") == 1  # the check that it is still unbound
    assert len(bound_pods(api)) == 4


@pytest.mark.asyncio
async def test_a_server_error_after_the_write_landed_counts_as_bound(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api)
    gang, plan = plan_next(core_from(api))
    api.reset_request_counts()
    api.fail_next_binds(1, status=503, committed=True)
    result = await GangBinder(client, retry_jitter=0.01).bind(gang, plan)
    assert result.ok
    # The recheck found the pod on its planned node: no second bind.
    assert api.request_count("create", "pods", "binding") == 4
    assert api.request_count("get", "pods") == 1


@pytest.mark.asyncio
async def test_repeated_server_errors_are_settled_by_reading_the_pod(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api)
    core = core_from(api)
    gang, plan = plan_next(core)
    api.fail_next_binds(100, status=500, after=2)
    binder = GangBinder(client, concurrency=1, retry_jitter=0.01)
    partial = PartialGangs()
    result, undo = await bind_and_settle(
        core, binder, gang, plan, clock=lambda: 0.0, partial=partial
    )
    # After the last 500 a read shows the pod unbound: that bind definitely failed.
    assert len(result.bound) == 2 and len(result.failed) == 2 and result.unknown == ()
    assert all(m.requests == 4 for m in result.failed)  # bind, check, bind, read
    assert all("is not bound" in m.reason for m in result.failed)
    assert gang.key not in partial  # nothing left uncertain
    assert undo is not None and len(undo.deleted) == 2
    assert bound_pods(api) == {}
    # Failed members are released; bound ones stay charged until the watch shows them
    # deleted.
    assert all(m.placement.pod_uid not in core.cache.assumed() for m in result.failed)
    assert all(
        core.cache.reservation(m.placement.pod_uid) == Reservation.BOUND for m in result.bound
    )
    # A failure of the API, not of the plan: the gang is retried after its backoff, not
    # left waiting for a cluster change that nothing will make.
    assert core.queue.state(gang.key) == "backoff"


@pytest.mark.asyncio
async def test_a_refused_bind_waits_for_a_change_in_the_cluster(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api)
    core = core_from(api)
    gang, plan = plan_next(core)
    api.fail_next_binds(1, status=403, after=2)
    binder = GangBinder(client, concurrency=1, retry_jitter=0.01)
    result, _ = await bind_and_settle(core, binder, gang, plan, clock=lambda: 0.0)
    assert [m.status for m in result.failed] == [403]
    assert core.queue.state(gang.key) == "unschedulable"


@pytest.mark.asyncio
async def test_a_bind_whose_outcome_cannot_be_read_stays_reserved_until_a_later_read(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api, size=2)
    core = core_from(api)
    gang, plan = plan_next(core)
    api.fail_next_binds(100, status=500)
    api.fail_requests("get", "pods", count=100, status=503)
    binder = GangBinder(client, retry_jitter=0.01)
    partial = PartialGangs()
    result, _ = await bind_and_settle(core, binder, gang, plan, clock=lambda: 0.0, partial=partial)
    assert len(result.unknown) == 2 and gang.key in partial
    # bind, check (fails: no retry without it), then RESOLVE_ATTEMPTS reads
    assert all(m.requests == 2 + RESOLVE_ATTEMPTS for m in result.unknown)
    uids = {p.pod_uid for p in plan.placements}
    assert {p.pod_uid for p in core.cache.unresolved()} == uids
    # The reads keep failing: nothing is released, however often it is tried.
    assert await resolve_unknown(core, binder, clock=lambda: 1e6) == 0
    assert {p.pod_uid for p in core.cache.unresolved()} == uids
    # Reads work again: both pods are unbound, so both reservations go.
    api.clear_faults()
    assert await resolve_unknown(core, binder, clock=lambda: 1e6) == 2
    assert core.cache.assumed() == {}
    assert {p.uid for p in core.cache.pending_pods(SCHEDULER)} == uids


@pytest.mark.asyncio
async def test_a_later_read_that_finds_the_pod_bound_keeps_it_charged(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api, size=1)
    core = core_from(api)
    gang, plan = plan_next(core)
    api.fail_next_binds(100, status=500, committed=True)
    api.fail_requests("get", "pods", count=100, status=503)
    binder = GangBinder(client, retry_jitter=0.01)
    result, _ = await bind_and_settle(core, binder, gang, plan, clock=lambda: 0.0)
    assert len(result.unknown) == 1 and bound_pods(api) == {"train-0": "n0"}
    api.clear_faults()
    assert await resolve_unknown(core, binder) == 1
    uid = plan.placements[0].pod_uid
    assert core.cache.reservation(uid) == Reservation.BOUND
    assert core.cache.charged_shares(uid) == plan.placements[0].shares


@pytest.mark.asyncio
async def test_a_bind_without_answer_in_time_breaks_the_gang(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api, size=2)
    gang, plan = plan_next(core_from(api))
    api.hold_binds()  # no bind is answered within the timeout, on any machine
    binder = GangBinder(client, timeout=2.0, retry_jitter=0.05)
    result, undo = await binder.bind_gang(gang, plan)
    # A timeout is not retried; a read then shows the pod unbound (the server gave up on
    # the bind when the client went away), so the bind definitely failed.
    assert not result.ok and len(result.failed) == 2
    assert "2s" in result.failed[0].reason and "is not bound" in result.failed[0].reason
    assert all(m.requests == 2 for m in result.failed)  # bind, read
    # The server drops the binds their clients gave up on; released, none lands.
    await eventually(lambda: api.binds_held == 0, "the abandoned binds dropped")
    api.release_binds()
    assert undo is not None and undo.deleted == ()
    assert bound_pods(api) == {}


@pytest.mark.asyncio
async def test_a_member_deleted_before_its_bind_is_not_retried(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api)
    gang, plan = plan_next(core_from(api))
    api.delete_pod("default", "train-1")
    api.reset_request_counts()
    result, undo = await GangBinder(client).bind_gang(gang, plan)
    assert [m.name for m in result.failed] == ["train-1"]
    assert result.failed[0].status == 404
    assert api.request_count("create", "pods", "binding") == 4
    assert undo is not None and len(undo.deleted) == 3
    assert bound_pods(api) == {}


@pytest.mark.asyncio
async def test_a_recreated_pod_of_the_same_name_is_not_bound(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api, size=2)
    gang, plan = plan_next(core_from(api))
    api.delete_pod("default", "train-0")
    api.put_pod(pod_obj("train-0", gang="train", min_member=2, gpus=2, uid="uid-new"))
    result, _ = await GangBinder(client).bind_gang(gang, plan)
    assert not result.ok and result.failed[0].status == 409
    assert bound_pods(api) == {}


@pytest.mark.asyncio
async def test_keep_leaves_the_bound_members_bound(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    seed_gang(api)
    core = core_from(api)
    gang, plan = plan_next(core)
    api.fail_next_binds(1, status=409, after=2)
    binder = GangBinder(client, concurrency=1, on_failure="keep")
    result, undo = await bind_and_settle(core, binder, gang, plan, clock=lambda: 0.0)
    assert undo is not None and len(undo.kept) == 3 and undo.deleted == ()
    assert len(bound_pods(api)) == 3
    assert api.request_count("delete", "pods") == 0
    # Bound members keep their reservation: their room is not planned twice.
    assert all(m.placement.pod_uid in core.cache.assumed() for m in result.bound)


class CountingClient(KubeClient):
    """Counts binding requests in flight at once."""

    def __init__(self, inner: KubeClient) -> None:
        super().__init__(inner.api)
        self.in_flight = 0
        self.peak = 0

    async def request_json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await super().request_json(method, path, **kwargs)
        finally:
            self.in_flight -= 1


@pytest.mark.asyncio
async def test_binds_in_flight_are_bounded(api: KubeApiEmulator, client: KubeClient) -> None:
    seed_gang(api, size=8, gpus=1)
    gang, plan = plan_next(core_from(api))
    api.bind_delay(0.05)
    counting = CountingClient(client)
    result = await GangBinder(counting, concurrency=3).bind(gang, plan)
    assert result.ok and counting.peak == 3


# --- crash safety ---------------------------------------------------------------------
def partial_gang(bound: int, pending: int, min_member: int = 4) -> Gang:
    pods = [
        pod_from_api(pod_obj(f"p{i}", gang="g", min_member=min_member, node_name="n0"))
        for i in range(bound)
    ] + [pod_from_api(pod_obj(f"q{i}", gang="g", min_member=min_member)) for i in range(pending)]
    gang = build_gang("default/g", pods, None, SCHEDULER)
    assert gang is not None
    return gang


def test_restart_decision_completes_whole_or_placeable_gangs() -> None:
    assert restart_decision(partial_gang(4, 1), 100.0, 60.0, partial_since=0.0) == "complete"
    gang = partial_gang(2, 2)
    assert restart_decision(gang, 100.0, 60.0, partial_since=0.0, placeable=True) == "complete"
    # Ready and not tried yet: the planner tries (bound members count toward minMember).
    assert restart_decision(gang, 10.0, 60.0, partial_since=0.0) == "complete"


def test_restart_decision_waits_within_grace_then_deletes() -> None:
    gang = partial_gang(2, 2)
    assert restart_decision(gang, 59.0, 60.0, partial_since=0.0, placeable=False) == "wait"
    assert restart_decision(gang, 60.0, 60.0, partial_since=0.0, placeable=False) == "delete"
    assert restart_decision(gang, 60.0, 60.0, partial_since=0.0) == "delete"
    missing = partial_gang(2, 1)  # a member still to be recreated: cannot complete yet
    assert restart_decision(missing, 30.0, 60.0, partial_since=0.0) == "wait"
    assert restart_decision(missing, 90.0, 60.0, partial_since=0.0) == "delete"
    # Just found: the grace period starts now.
    assert restart_decision(missing, 1e9, 60.0) == "wait"


def test_partial_gangs_tracks_gangs_found_at_start() -> None:
    tracker = PartialGangs(grace=60.0)
    partial, whole = partial_gang(2, 2), partial_gang(0, 4)
    whole.key = "default/whole"
    assert tracker.found_at_start([partial, whole], 10.0) == ["default/g"]
    assert "default/g" in tracker and "default/whole" not in tracker
    tracker.attempted("default/g", placeable=False)
    assert tracker.review({"default/g": partial}, 20.0) == {"default/g": "wait"}
    assert tracker.review({"default/g": partial}, 70.0) == {"default/g": "delete"}
    assert "default/g" not in tracker  # decided: no longer tracked
    tracker.suspect("default/g", 80.0)
    assert tracker.review({}, 90.0) == {}  # gone (or whole): forgotten
    assert "default/g" not in tracker


@pytest.mark.asyncio
async def test_after_a_restart_a_partial_gang_is_completed_when_the_rest_fits(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    api.put_node(node_obj("n0", gpus=8))
    for i in range(4):
        # Two members were bound before the crash, two were not.
        api.put_pod(
            pod_obj(f"t-{i}", gang="t", min_member=4, gpus=2, node_name="n0" if i < 2 else "")
        )
    core = core_from(api)
    tracker = PartialGangs(grace=60.0)
    core.refresh(0.0)
    assert tracker.found_at_start(core.gangs.values(), 0.0) == ["default/t"]
    assert tracker.review(core.gangs, 1.0) == {"default/t": "complete"}
    gang, plan = plan_next(core)
    assert len(plan.placements) == 2
    result, _ = await bind_and_settle(core, GangBinder(client), gang, plan)
    assert result.ok and len(bound_pods(api)) == 4


@pytest.mark.asyncio
async def test_after_a_restart_a_partial_gang_that_cannot_complete_is_deleted_after_grace(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    api.put_node(node_obj("n0", gpus=4))
    for i in range(4):
        member = pod_obj(f"t-{i}", gang="t", min_member=4, gpus=2, node_name="n0" if i < 2 else "")
        # The two bound before the crash were bound by this scheduler: signed.
        api.put_pod(signed(member) if i < 2 else member)
    # Somebody else's pod took the rest of the node since.
    api.put_pod(pod_obj("other", scheduler="default-scheduler", gpus=0, node_name="n0", cpu="63"))
    core = core_from(api)
    tracker = PartialGangs(grace=0.2)
    core.refresh(0.0)
    tracker.found_at_start(core.gangs.values(), 0.0)
    attempt = core.schedule_next(0.0)
    assert attempt is not None and not isinstance(attempt.result, Plan)
    tracker.attempted(attempt.gang.key, placeable=False)
    assert tracker.review(core.gangs, 0.1) == {"default/t": "wait"}
    decisions = tracker.review(core.gangs, 0.3)
    assert decisions == {"default/t": "delete"}
    binder = GangBinder(client, signing_key=TEST_KEY)
    undo = await binder.delete_members(core.gangs["default/t"].bound)
    assert sorted(undo.deleted) == ["default/t-0", "default/t-1"]
    assert bound_pods(api) == {"other": "n0"}
    # The deletions reach the core through the watch; here, applied by hand.
    for key in undo.deleted:
        core.apply_pod(
            EventType.DELETED, {"metadata": {"uid": f"uid-{key.replace('/', '-')}"}}, 0.4
        )
    core.refresh(0.4)
    assert not core.gangs["default/t"].bound


@pytest.mark.asyncio
async def test_binding_many_gangs_at_once_shares_one_limit(
    api: KubeApiEmulator, client: KubeClient
) -> None:
    for i in range(4):
        api.put_node(node_obj(f"n{i}", gpus=8))
    for g in range(4):
        for i in range(4):
            api.put_pod(pod_obj(f"g{g}-{i}", gang=f"g{g}", min_member=4, gpus=2))
    core = core_from(api)
    binder = GangBinder(client, concurrency=4)
    plans = []
    while (attempt := core.schedule_next(0.0)) is not None:
        assert isinstance(attempt.result, Plan)
        plans.append((attempt.gang, attempt.result))
    api.reset_request_counts()
    results = await asyncio.gather(*(binder.bind(g, p) for g, p in plans))
    assert all(r.ok for r in results) and len(bound_pods(api)) == 16
    assert api.request_count() == 16


def test_the_binding_signs_the_assignment_over_uid_node_and_devices() -> None:
    from cache.gpu import SIGNATURE_ANNOTATION, verify_assignment
    from cache.pod import PodInfo
    from scheduler.kube.binder import binding_body

    pod = PodInfo(uid="u-1", namespace="ml", name="w-0")
    shares = ((1, 1000), (3, 1000))
    key = b"s" * 32
    body = binding_body(pod, Placement("u-1", "gpu-7", shares), key)
    annotations = body["metadata"]["annotations"]
    assert annotations[ASSIGNMENT_ANNOTATION] == "1:1000,3:1000"
    signature = annotations[SIGNATURE_ANNOTATION]
    assert verify_assignment(key, "u-1", "gpu-7", shares, signature)
    assert not verify_assignment(key, "u-2", "gpu-7", shares, signature)
    assert not verify_assignment(key, "u-1", "gpu-8", shares, signature)
    assert not verify_assignment(key, "u-1", "gpu-7", ((1, 1000),), signature)
