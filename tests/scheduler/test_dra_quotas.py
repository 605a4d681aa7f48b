"""ElasticQuotas counting DRA devices through the scheduling core (docs/quotas.md, "DRA
devices"): a gang whose claims would take its namespace over `max` devices of a class
waits whole with the resource named; a claim shared by members counts once; shares
count by the capacity they consume; claims allocated by others count for their
namespace; and borrowing (fair share) weighs devices as any dimension."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType
from cache.dra.quota import capacity_resource, devices_resource
from policies.fair_share import dominant_share
from policies.guarantees import within_floors
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan, Unschedulable
from scheduler.sharing.preemption import RECLAIM
from scheduler.sharing.reclaim import reclaimable, reclaimed_resources
from tests.cache.test_quota import quota_obj
from tests.dra_builders import (
    DRIVER,
    allocated,
    capacity_request,
    claim_obj,
    class_obj,
    device,
    exactly,
    shared_device,
    slice_obj,
)
from tests.dra_objects import GPU_CLASS
from tests.dra_objects import claim_obj as claim_api
from tests.scheduler.dra_cores import add_pods, claiming, dra_core, feed
from tests.scheduler.test_preemption_core import run
from tests.scheduler.test_preemption_dra import allocated_claim, core_on, pending, pod_ref, running
from tests.signed import TEST_KEY, signed

DEVICES = devices_resource(DRIVER)  # gpu.example.com.deviceclass.resource.k8s.io/devices
MEMORY = capacity_resource(DRIVER, "memory")


def _schedule(core: SchedulingCore) -> Plan | Unschedulable:
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    result = attempt.result
    assert isinstance(result, Plan | Unschedulable)
    return result


def _quota(
    core: SchedulingCore,
    max_: dict[str, Any],
    min_: dict[str, Any] | None = None,
    namespace: str = "ns",
) -> None:
    core.apply_elasticquota(EventType.ADDED, quota_obj(namespace, max_, min_), 0.0)


def _gpus(core: SchedulingCore, count: int, node: str = "node-1") -> None:
    devices = [device(f"gpu-{i}") for i in range(count)]
    feed(core, slice_obj(f"s-{node}", devices, node=node), class_obj())


def test_a_gang_over_max_devices_waits_whole_naming_the_resource() -> None:
    core = dra_core("node-1")
    _gpus(core, 8)
    _quota(core, {DEVICES: 4})
    feed(core, *(claim_obj(f"a-{i}", [exactly(count=2)]) for i in range(2)))
    add_pods(core, *(claiming(f"a-{i}", f"a-{i}", gang="a", size=2) for i in range(2)))
    assert isinstance(_schedule(core), Plan)
    assert core.cache.quotas.ledger.used("ns").get(DEVICES) == 4000
    feed(core, *(claim_obj(f"b-{i}", [exactly()]) for i in range(2)))
    add_pods(core, *(claiming(f"b-{i}", f"b-{i}", gang="b", size=2) for i in range(2)))
    waiting = _schedule(core)
    assert isinstance(waiting, Unschedulable)
    expected = f"gang ns/b: quota ns exceeds max {DEVICES}: 4 used + 2 asked > 4"
    assert waiting.message == expected
    assert waiting.reasons == {"uid-ns-b-0": expected, "uid-ns-b-1": expected}
    assert not any(core.dra.is_assumed(f"ns/b-{i}") for i in range(2))


def test_a_claim_shared_by_members_counts_once() -> None:
    core = dra_core("node-1")
    _gpus(core, 8)
    _quota(core, {DEVICES: 3})
    feed(core, claim_obj("shared", [exactly(count=2)]))
    add_pods(core, *(claiming(f"a-{i}", "shared", gang="a", size=3) for i in range(3)))
    assert isinstance(_schedule(core), Plan)
    assert core.cache.quotas.ledger.used("ns").get(DEVICES) == 2000
    feed(core, claim_obj("b", [exactly(count=2)]))
    add_pods(core, claiming("b-0", "b", gang="b"))
    waiting = _schedule(core)
    assert isinstance(waiting, Unschedulable)
    assert waiting.message == f"gang ns/b: quota ns exceeds max {DEVICES}: 2 used + 2 asked > 3"


def test_shares_count_by_the_capacity_they_consume() -> None:
    core = dra_core("node-1")
    feed(core, slice_obj("s", [shared_device("gpu-0", memory="80Gi")]), class_obj())
    _quota(core, {MEMORY: "25Gi"})
    feed(core, *(claim_obj(f"a-{i}", [capacity_request(memory="10Gi")]) for i in range(2)))
    add_pods(core, *(claiming(f"a-{i}", f"a-{i}", gang="a", size=2) for i in range(2)))
    assert isinstance(_schedule(core), Plan)
    used = core.cache.quotas.ledger.used("ns")
    assert used[MEMORY] == 20 * 2**30 * 1000 and used[DEVICES] == 2000
    feed(core, claim_obj("b", [capacity_request(memory="10Gi")]))
    add_pods(core, claiming("b-0", "b", gang="b"))
    waiting = _schedule(core)
    assert isinstance(waiting, Unschedulable)
    assert waiting.message == (
        f"gang ns/b: quota ns exceeds max {MEMORY}: 20Gi used + 10Gi asked > 25Gi"
    )


def test_claims_allocated_by_others_count_for_their_namespace_until_released() -> None:
    core = dra_core("node-1")
    _gpus(core, 4)
    mine = allocated((DRIVER, "node-1", "gpu-0"), (DRIVER, "node-1", "gpu-1"))
    feed(core, claim_obj("theirs", [exactly(count=2)], namespace="team", allocation=mine))
    # Admin access takes nothing from others and counts nothing.
    admin = allocated((DRIVER, "node-1", "gpu-2"), admin=True)
    feed(core, claim_obj("watch", [exactly()], namespace="team", allocation=admin))
    assert core.cache.quotas.ledger.used("team") == {DEVICES: 2000}
    feed(core, claim_obj("theirs", [exactly(count=2)], namespace="team", rv="2"))
    assert core.cache.quotas.ledger.used("team") == {}


def test_a_gang_trimmed_to_its_need_leaves_its_extra_members_claims_unallocated() -> None:
    core = dra_core("node-1")
    _gpus(core, 8)
    _quota(core, {DEVICES: 2})
    feed(core, *(claim_obj(f"a-{i}", [exactly()]) for i in range(3)))
    # minMember 2 of 3 members: the third is beyond the need and over max.
    pods = [claiming(f"a-{i}", f"a-{i}", gang="a", size=2) for i in range(3)]
    add_pods(core, *pods)
    plan = _schedule(core)
    assert isinstance(plan, Plan)
    assert len(plan.placements) == 2 and len(plan.left_out) == 1
    (dropped,) = plan.left_out
    assert all(c.uid != dropped for claim in plan.claims for c in claim.reserved_for)
    assert len(plan.claims) == 2
    assert core.cache.quotas.ledger.used("ns").get(DEVICES) == 2000


def test_devices_borrowed_beyond_min_give_a_dominant_share() -> None:
    core = dra_core("node-1")
    _gpus(core, 8)
    _quota(core, {DEVICES: 8}, {DEVICES: 2})
    _quota(core, {DEVICES: 8}, {DEVICES: 4}, namespace="other")
    feed(core, *(claim_obj(f"a-{i}", [exactly(count=2)]) for i in range(2)))
    add_pods(core, *(claiming(f"a-{i}", f"a-{i}", gang="a", size=2) for i in range(2)))
    assert isinstance(_schedule(core), Plan)
    # 4 devices held, 2 beyond its min of 2, of the 6 all mins guarantee.
    assert dominant_share(core.cache.quotas, "ns") == 2 / 6
    # Borrowing more than the others' idle guarantees (4) is refused by device.
    feed(core, *(claim_obj(f"b-{i}", [exactly(count=3)]) for i in range(1)))
    add_pods(core, claiming("b-0", "b-0", gang="b"))
    waiting = _schedule(core)
    assert isinstance(waiting, Unschedulable)
    assert waiting.message == (
        f"gang ns/b: quota ns would borrow 5 {DEVICES} beyond min, only 4 idle in other quotas"
    )


def _running_member(name: str, claim: str, namespace: str, gang: str, size: int) -> dict[str, Any]:
    pod = claiming(name, claim, gang=gang, size=size, namespace=namespace)
    pod["spec"]["nodeName"] = "node-1"
    pod["status"] = {"phase": "Running"}
    return signed(pod)


def _reserved(claim: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
    ]
    return claim


def test_reclaim_weighs_the_devices_a_borrowing_gang_holds_and_a_gang_asks() -> None:
    core = dra_core("node-1")
    core.cache.assignment_key = TEST_KEY  # the running gang was bound (signed) with it
    _gpus(core, 4)
    _quota(core, {DEVICES: 8}, {DEVICES: 4}, namespace="lender")
    _quota(core, {DEVICES: 8}, {DEVICES: 1}, namespace="borrower")
    # The borrower runs a gang of 2 members holding 2 devices each (by claims someone
    # allocated and reserved for them): 3 devices beyond its min of 1.
    for i in range(2):
        pod = _running_member(f"b-{i}", f"b-{i}", "borrower", "b", 2)
        devices = [(DRIVER, "node-1", f"gpu-{2 * i + j}") for j in range(2)]
        claim = claim_obj(
            f"b-{i}", [exactly(count=2)], namespace="borrower", allocation=allocated(*devices)
        )
        feed(core, _reserved(claim, pod))
        add_pods(core, pod)
    assert core.cache.quotas.ledger.used("borrower").get(DEVICES) == 4000
    # The lender, within its min, asks 2 devices.
    feed(core, claim_obj("l-0", [exactly(count=2)], namespace="lender"))
    add_pods(core, claiming("l-0", "l-0", gang="l", namespace="lender"))
    core.refresh(0.0)
    lender = core.gangs["lender/l"]
    asked = reclaimed_resources(lender, core.cache.quotas, core.dra)
    assert asked == frozenset({DEVICES})
    running = core.preempter._running(lender, 0.0)
    holdings = {key: victim.holding for key, victim in running.items()}
    assert holdings["borrower/b"].usage.get(DEVICES) == 4000
    assert reclaimable(lender, asked, holdings, core.cache.quotas) == ["borrower/b"]
    # Taking all 4 would leave the borrower below its min of 1 device: refused.
    assert not within_floors(core.cache.quotas, "lender", holdings.values())


def test_a_team_within_its_device_min_reclaims_devices_another_team_borrows() -> None:
    """Quotas in devices only: teams a and b are each guaranteed 2 of n1's 4 devices.
    b runs "own" and "borrow" (2 devices each by their claims: 2 beyond its min); a's
    gang asks 2 devices, within its min: it reclaims the lower-priority of b's gangs,
    whose claim the what-if releases, and b keeps its min."""
    devices = devices_resource(GPU_CLASS)
    objs = [
        quota_obj("a", {devices: 8}, {devices: 2}),
        quota_obj("b", {devices: 8}, {devices: 2}),
        allocated_claim("b-own", (0, 1), [pod_ref("own", "b")], ns="b"),
        allocated_claim("b-borrow", (2, 3), [pod_ref("borrow", "b")], ns="b"),
        claim_api("a-gpu", "a", count=2),
        running("own", 100, "b-own", ns="b"),
        running("borrow", 50, "b-borrow", ns="b"),
        pending("job", 0, "a-gpu", ns="a"),
    ]
    core = core_on(4, *objs)
    assert core.cache.quotas.ledger.used("b").get(devices) == 4000
    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None, attempt.result
    assert decision.reason == RECLAIM
    assert [v.key for v in decision.victims] == ["b/borrow"]
    assert decision.released_claims == (("b/b-borrow", "b/borrow"),)
