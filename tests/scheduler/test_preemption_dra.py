"""Preemption with DRA devices (issue 28): the what-if counts the victims' ResourceClaims
as released when the resourceclaim controller will release them (cache/dra/view.py),
the preemptor keeps the devices it chose until its victims are gone and their claims
released, and its words name the devices and the claims it waits for."""

from __future__ import annotations

import uuid
from fractions import Fraction
from typing import Any

from cache.cluster import EventType
from cache.dra.claims import DELETE_PROTECTION
from cache.dra.slices import DeviceId
from cache.dra.store import DraCache
from cache.dra.view import ReleasedView, released_claims, without_pods
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.dra_claims import resolve_dra
from scheduler.planner.dra_reach import ReachMemo
from scheduler.planner.result import Plan, Unschedulable
from scheduler.process.queue_report import queue_report
from scheduler.sharing.preemption import RECLAIM
from tests.cache.test_quota import quota_obj
from tests.dra_builders import (
    allocated,
    capacity_request,
    class_obj,
    counter_slice,
    exactly,
    partition,
    shared_device,
)
from tests.dra_builders import claim_obj as built_claim
from tests.dra_builders import share as share_of
from tests.dra_builders import slice_obj as built_slice
from tests.dra_objects import DRIVER, allocation, claim_obj, device_class_obj, slice_obj
from tests.factories import pod_obj
from tests.scheduler.dra_cores import dra_core, feed, taken_twice
from tests.scheduler.test_preemption_core import run
from tests.signed import TEST_KEY, signed

NS = "ml"


def gpu(index: int, node: str = "n1") -> DeviceId:
    return DeviceId(DRIVER, node, f"gpu-{index}")


def uid(pod: str, ns: str = NS) -> str:
    return f"uid-{ns}-{pod}"


def pod_ref(pod: str, ns: str = NS) -> dict[str, str]:
    return {"resource": "pods", "name": pod, "uid": uid(pod, ns)}


def allocated_claim(
    name: str,
    devices: tuple[int, ...],
    consumers: list[dict[str, str]],
    *,
    finalizer: bool = True,
    owner: str = "",
    rv: str = "1",
    ns: str = NS,
) -> dict[str, Any]:
    """A claim as an allocator leaves it: allocated on n1's `devices`, reserved for
    `consumers`, with the delete-protection finalizer (unless told otherwise)."""
    obj = claim_obj(name, ns, count=len(devices))
    meta = obj["metadata"]
    meta.update(uid=f"claim-{name}", resourceVersion=rv)
    if finalizer:
        meta["finalizers"] = [DELETE_PROTECTION]
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": owner,
                "uid": uid(owner),
                "controller": True,
            }
        ]
    obj["status"] = {
        "allocation": allocation("n1", tuple(f"gpu-{i}" for i in devices)),
        "reservedFor": consumers,
    }
    return obj


def deallocated(claim: dict[str, Any], rv: str) -> dict[str, Any]:
    """The claim once the resourceclaim controller released it."""
    released = {key: value for key, value in claim.items() if key != "status"}
    released["metadata"] = {**claim["metadata"], "resourceVersion": rv, "finalizers": []}
    return released


def with_claims(pod: dict[str, Any], *claims: str) -> dict[str, Any]:
    pod["spec"]["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    return pod


def running(
    name: str,
    priority: int,
    *claims: str,
    scheduler: str = "gang-scheduler",
    ns: str = NS,
    cpu: str = "1",
) -> dict[str, Any]:
    """A one-pod gang this scheduler bound on n1 (signed), using `claims`."""
    pod = pod_obj(
        name,
        namespace=ns,
        cpu=cpu,
        gang=name,
        min_member=1,
        priority=priority,
        node_name="n1",
        phase="Running",
        scheduler=scheduler,
    )
    return signed(with_claims(pod, *claims))


def pending(
    name: str, priority: int, *claims: str, never: bool = False, ns: str = NS, cpu: str = "1"
) -> dict[str, Any]:
    pod = pod_obj(name, namespace=ns, cpu=cpu, gang=name, min_member=1, priority=priority)
    if never:
        pod["spec"]["preemptionPolicy"] = "Never"
    return with_claims(pod, *claims)


def core_on(gpus: int, *objs: dict[str, Any], cpu: str = "64") -> SchedulingCore:
    """One node, n1, with `gpus` DRA devices; `objs`: quotas, claims, then pods."""
    core = dra_core("n1", cpu=cpu)
    core.cache.assignment_key = TEST_KEY  # the running gangs were bound with it
    core.preempter.enabled = True
    feed(core, device_class_obj(), slice_obj("n1", gpus))
    for obj in objs:
        if obj["kind"] == "ResourceClaim":
            feed(core, obj)
        elif obj["kind"] == "ElasticQuota":
            core.apply_elasticquota(EventType.ADDED, obj, 0.0)
        else:
            core.apply_pod(EventType.ADDED, obj, 0.0)
    return core


# --- which claims a what-if releases --------------------------------------------------------
def test_a_what_if_releases_only_the_claims_the_controller_will_release() -> None:
    dra = DraCache()
    for obj in (
        slice_obj("n1", 8),
        device_class_obj(),
    ):
        (dra.apply_slice if obj["kind"] == "ResourceSlice" else dra.apply_class)("ADDED", obj)
    claims = [
        allocated_claim("solo", (0,), [pod_ref("victim")]),
        allocated_claim("both-victims", (1,), [pod_ref("victim"), pod_ref("victim-2")]),
        allocated_claim("shared", (2,), [pod_ref("victim"), pod_ref("survivor")]),
        allocated_claim("theirs", (3,), [pod_ref("survivor")]),
        allocated_claim(
            "workload",
            (4,),
            [
                pod_ref("victim"),
                {"resource": "workloads", "apiGroup": "x.io", "name": "w", "uid": "w"},
            ],
        ),
        # No finalizer: the controller removes the reservation but never deallocates.
        allocated_claim("unprotected", (5,), [pod_ref("victim")], finalizer=False),
        # Made from a template for the victim: deleted with it, finalizer or not.
        allocated_claim("generated", (6,), [pod_ref("victim")], finalizer=False, owner="victim"),
        claim_obj("unallocated", NS),
    ]
    for obj in claims:
        dra.apply_claim("ADDED", obj)
    gone = frozenset({uid("victim"), uid("victim-2")})
    assert released_claims(dra, gone) == {f"{NS}/solo", f"{NS}/both-victims", f"{NS}/generated"}
    assert released_claims(dra, frozenset({uid("victim")})) == {f"{NS}/solo", f"{NS}/generated"}
    assert released_claims(dra, frozenset({uid("someone")})) == frozenset()

    generation, stamp = dra.generation, dra.node_stamp("n1")
    view = without_pods(dra, gone)
    assert isinstance(view, ReleasedView)
    assert view.freed == {gpu(0), gpu(1), gpu(6)}
    assert [view.holder(gpu(i)) for i in range(7)] == [
        "",
        "",
        f"{NS}/shared",
        f"{NS}/theirs",
        f"{NS}/workload",
        f"{NS}/unprotected",
        "",
    ]
    assert view.allocation_of(f"{NS}/solo") is None
    assert view.claims[f"{NS}/solo"].reserved_for == ()
    assert view.allocation_of(f"{NS}/shared") is not None
    assert view.node_stamp("n1") is None  # its devices change here: no kept answer
    # The DraCache itself is only read.
    assert dra.holder(gpu(0)) == f"{NS}/solo"
    assert dra.allocation_of(f"{NS}/solo") is not None
    assert (dra.generation, dra.node_stamp("n1")) == (generation, stamp)
    assert without_pods(dra, frozenset({uid("someone")})) is dra  # nothing released


def test_a_what_if_neither_poisons_nor_reads_the_kept_reach_answers() -> None:
    """One planner's memo asked with a what-if (the victim's claim released: n1 fits)
    and with the DraCache (n1 full) in turn: each gets its own answer."""
    core = core_on(
        2,
        allocated_claim("low-gpu", (0, 1), [pod_ref("low")]),
        claim_obj("high-gpu", NS, count=2),
        running("low", 1, "low-gpu"),
        pending("high", 10, "high-gpu"),
    )
    core.refresh(0.0)
    core.cache.update_snapshot(core.snapshot)
    members = core.gangs[f"{NS}/high"].pending
    memo = ReachMemo()
    view = without_pods(core.dra, frozenset({uid("low")}))

    def reach(dra: Any) -> frozenset[str]:
        resolved, _ = resolve_dra(members, dra, core.snapshot, {}, memo)
        assert resolved[0].dra_reach is not None
        return resolved[0].dra_reach[0]

    assert reach(view) == {"n1"}
    assert reach(core.dra) == frozenset()
    assert reach(view) == {"n1"}
    assert reach(core.dra) == frozenset()


# --- the decision --------------------------------------------------------------------------
def test_a_dra_gang_evicts_the_gang_whose_claim_holds_its_devices_and_keeps_them() -> None:
    low_claim = allocated_claim("low-gpu", (0, 1), [pod_ref("low")])
    low = running("low", 1, "low-gpu")
    core = core_on(
        2, low_claim, claim_obj("high-gpu", NS, count=2), low, pending("high", 10, "high-gpu")
    )
    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None, attempt.result
    assert [v.key for v in decision.victims] == [f"{NS}/low"]
    assert decision.devices == (gpu(0), gpu(1))
    assert decision.released_claims == ((f"{NS}/low-gpu", f"{NS}/low"),)
    assert "gpu.example.com/n1/gpu-0, gpu.example.com/n1/gpu-1" in decision.message
    assert f"releases the victims' claims {NS}/low-gpu" in decision.message
    assert core.dra.kept(f"{NS}/high") == {gpu(0), gpu(1)}
    assert core.dra.allocation_of(f"{NS}/low-gpu") is not None  # the what-if changed nothing
    [shown] = [g for g in queue_report(core, 1.0)["gangs"] if g["key"] == f"{NS}/high"]
    assert shown["keptDevices"] == ["gpu.example.com/n1/gpu-0", "gpu.example.com/n1/gpu-1"]
    assert shown["releasingClaims"] == [f"{NS}/low-gpu"]

    # The victim is gone; its claim is not released yet: the gang waits, and says why.
    core.apply_pod(EventType.DELETED, low, 2.0)
    [waiting] = run(core, 2.0)
    assert isinstance(waiting.result, Unschedulable) and waiting.preemption is None
    note = f"waiting for the resourceclaim controller to release their claims {NS}/low-gpu"
    assert note in waiting.result.message
    assert all(note in reason for reason in waiting.result.reasons.values())
    assert f"{NS}/high" in core.preempter.decisions
    assert core.dra.kept(f"{NS}/high") == {gpu(0), gpu(1)}

    # The controller deallocates it: the gang is planned onto those devices.
    feed(core, deallocated(low_claim, "2"), event="MODIFIED")
    [placed] = run(core, 60.0)
    assert isinstance(placed.result, Plan), placed.result
    [claim] = placed.result.claims
    assert claim.allocation is not None
    assert sorted(r.device for r in claim.allocation.results) == ["gpu-0", "gpu-1"]
    assert core.dra.kept(f"{NS}/high") == frozenset()
    assert core.preempter.decisions == {}
    assert taken_twice(core) == []


def test_no_other_gang_is_given_the_kept_devices_while_the_claims_are_released() -> None:
    """A gang of even higher priority (that may not preempt) comes while the victim's
    claim is being released: the devices are kept for the preemptor, not handed to it."""
    low_claim = allocated_claim("low-gpu", (0, 1), [pod_ref("low")])
    low = running("low", 1, "low-gpu")
    core = core_on(
        2, low_claim, claim_obj("high-gpu", NS, count=2), low, pending("high", 10, "high-gpu")
    )
    [attempt] = run(core)
    assert attempt.preemption is not None
    feed(core, claim_obj("top-gpu", NS, count=1))
    core.apply_pod(EventType.ADDED, pending("top", 20, "top-gpu", never=True), 1.5)
    core.apply_pod(EventType.DELETED, low, 2.0)
    run(core, 2.0)
    feed(core, deallocated(low_claim, "2"), event="MODIFIED")
    attempts = {a.gang.key: a for a in run(core, 60.0)}
    assert isinstance(attempts[f"{NS}/high"].result, Plan), attempts[f"{NS}/high"].result
    top = attempts[f"{NS}/top"].result
    assert isinstance(top, Unschedulable)
    assert "cannot allocate all claims" in top.message
    assert taken_twice(core) == []


def test_only_the_victims_own_claims_count_as_released() -> None:
    """Four devices: the victim's own claim (gpu-0), one it shares with a pod that stays
    (gpu-1), one someone else allocated for another scheduler's pod (gpu-2) and one
    also reserved for a consumer that is not a pod (gpu-3). A gang needing one device
    evicts the victim for gpu-0; a gang needing two evicts nothing."""
    claims_and_pods = [
        allocated_claim("solo", (0,), [pod_ref("low")]),
        allocated_claim("shared", (1,), [pod_ref("low"), pod_ref("keeper")]),
        allocated_claim("theirs", (2,), [pod_ref("foreign")]),
        allocated_claim(
            "workload",
            (3,),
            [
                pod_ref("low"),
                {"resource": "workloads", "apiGroup": "x.io", "name": "w", "uid": "w"},
            ],
        ),
        running("low", 1, "solo", "shared", "workload"),
        running("keeper", 50, "shared"),
        running("foreign", 1, "theirs", scheduler="default-scheduler"),
    ]
    core = core_on(4, *claims_and_pods, claim_obj("one", NS, count=1), pending("one", 10, "one"))
    [attempt] = run(core)
    assert attempt.preemption is not None, attempt.result
    assert [v.key for v in attempt.preemption.victims] == [f"{NS}/low"]
    assert attempt.preemption.devices == (gpu(0),)
    assert attempt.preemption.released_claims == ((f"{NS}/solo", f"{NS}/low"),)

    core = core_on(4, *claims_and_pods, claim_obj("two", NS, count=2), pending("two", 10, "two"))
    [attempt] = run(core)
    assert isinstance(attempt.result, Unschedulable) and attempt.preemption is None
    assert core.dra.kept(f"{NS}/two") == frozenset()


# --- the starvation guard --------------------------------------------------------------------
def test_a_starving_dra_gang_reserves_the_devices_a_running_pods_claim_will_free() -> None:
    """n1's two devices are allocated to the claim of a running pod this scheduler bound;
    a gang needing both starves. Drained in the guard's what-if, that pod releases its
    claim: the gang reserves n1 and keeps the two devices, so a gang of its priority
    that comes once they are free is not given them; the reserved gang is placed."""
    r0_claim = allocated_claim("r0-gpu", (0, 1), [pod_ref("r0")])
    r0 = running("r0", 0, "r0-gpu")
    core = core_on(2, r0_claim, claim_obj("large-gpu", NS, count=2), r0)
    core.starvation.guard_seconds = 10.0
    core.apply_pod(EventType.ADDED, pending("large", 0, "large-gpu"), 0.0)
    run(core, 1.0)
    assert core.starvation.announcements() == []  # has not waited long enough
    run(core, 20.0)
    assert core.starvation.announcements() == [(f"{NS}/large", frozenset({"n1"}))]
    owner = f"{NS}/large (starvation reservation)"
    assert core.dra.kept(owner) == {gpu(0), gpu(1)}
    assert core.dra.allocation_of(f"{NS}/r0-gpu") is not None  # the what-if changed nothing
    # r0 ends and the controller releases its claim while the large gang backs off: a
    # gang of the same priority tried first finds the devices kept; the large gang, due
    # next, is placed on them.
    core.apply_pod(EventType.DELETED, r0, 20.5)
    feed(core, deallocated(r0_claim, "2"), event="MODIFIED")
    assert core.dra.holder(gpu(0)) == f"gang {owner}"
    feed(core, claim_obj("fill-gpu", NS, count=1))
    core.apply_pod(EventType.ADDED, pending("fill", 0, "fill-gpu"), 20.5)
    attempts = run(core, 20.5)
    assert [a.gang.key for a in attempts] == [f"{NS}/fill", f"{NS}/large"]
    fill, placed = attempts
    assert isinstance(fill.result, Unschedulable)
    assert "2 devices, 2 in use" in fill.result.message
    assert isinstance(placed.result, Plan), placed.result
    [claim] = placed.result.claims
    assert claim.allocation is not None and len(claim.allocation.results) == 2
    assert core.dra.kept(owner) == frozenset()
    assert taken_twice(core) == []


# --- reclaim -----------------------------------------------------------------------------
def test_a_team_within_its_min_reclaims_a_borrowing_gang_whose_claim_holds_the_devices() -> None:
    """Teams a and b are each guaranteed 4 of n1's 8 cpus. b runs "own" (4 cpus) and
    "borrow" (4 cpus beyond its min, with a claim on both devices); a's gang asks for 4
    cpus and both devices: it reclaims "borrow", whose claim the what-if releases."""
    cpus = {"cpu": "4"}
    objs = [
        quota_obj("a", {"cpu": "8"}, cpus),
        quota_obj("b", {"cpu": "8"}, cpus),
        allocated_claim("b-gpu", (0, 1), [pod_ref("borrow", "b")], ns="b"),
        claim_obj("a-gpu", "a", count=2),
        running("own", 100, ns="b", cpu="4"),
        running("borrow", 100, "b-gpu", ns="b", cpu="4"),
        pending("job", 0, "a-gpu", ns="a", cpu="4"),
    ]
    core = core_on(2, *objs, cpu="8")
    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None, attempt.result
    assert decision.reason == RECLAIM
    assert [v.key for v in decision.victims] == ["b/borrow"]
    assert decision.devices == (gpu(0), gpu(1))
    assert decision.released_claims == (("b/b-gpu", "b/borrow"),)
    assert core.dra.kept("a/job") == {gpu(0), gpu(1)}


# --- shares and partitions -------------------------------------------------------------------
def _share_claim(name: str, memory: str, consumer: str, share: int) -> dict[str, Any]:
    """A claim another allocator left holding a share of n1's gpu-0 (`memory` of its
    capacity), reserved for `consumer`, with the delete-protection finalizer."""
    result = share_of("gpu-0", str(uuid.UUID(int=share)), pool="n1", memory=memory)
    obj = built_claim(
        name,
        [capacity_request(memory=memory)],
        namespace=NS,
        allocation={"devices": {"results": [result]}},
    )
    obj["metadata"]["finalizers"] = [DELETE_PROTECTION]
    obj["status"]["reservedFor"] = [pod_ref(consumer)]
    return obj


def _memory_consumed(core: SchedulingCore, device: DeviceId) -> Fraction:
    total = Fraction(0)
    for key in core.dra.claims:
        allocation = core.dra.allocation_of(key)
        for result in allocation.results if allocation is not None else ():
            if result.device_id == device:
                total += sum((amount for _, amount in result.consumed), Fraction(0))
    return total


def test_a_preemptor_needing_a_share_gets_the_capacity_a_victims_share_held() -> None:
    """gpu-0 (40Gi, shared) holds a share of 10Gi for a pod that stays and one of 30Gi
    for a lower gang; a gang asking 20Gi of it preempts the lower gang (the what-if gives
    the victim's 30Gi back, not the other share's 10Gi), keeps gpu-0 whole until the
    victim's claim is released (a gang of even higher priority asking 15Gi, which would
    leave the preemptor short, is not given a share of it) and then gets its share."""
    gpu0 = DeviceId(DRIVER, "n1", "gpu-0")
    low_claim = _share_claim("low-gpu", "30Gi", "low", 1)
    low = running("low", 1, "low-gpu")
    core = dra_core("n1")
    core.cache.assignment_key = TEST_KEY
    core.preempter.enabled = True
    feed(core, class_obj(), built_slice("s", [shared_device("gpu-0", memory="40Gi")], node="n1"))
    feed(core, _share_claim("keeper-gpu", "10Gi", "keeper", 2), low_claim)
    feed(core, built_claim("high-gpu", [capacity_request(memory="20Gi")], namespace=NS))
    for pod in (running("keeper", 50, "keeper-gpu"), low, pending("high", 10, "high-gpu")):
        core.apply_pod(EventType.ADDED, pod, 0.0)

    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None, attempt.result
    assert [v.key for v in decision.victims] == [f"{NS}/low"]
    assert decision.devices == (gpu0,)
    assert decision.released_claims == ((f"{NS}/low-gpu", f"{NS}/low"),)
    assert core.dra.kept(f"{NS}/high") == {gpu0}

    feed(core, built_claim("top-gpu", [capacity_request(memory="15Gi")], namespace=NS))
    core.apply_pod(EventType.ADDED, pending("top", 20, "top-gpu", never=True), 1.5)
    core.apply_pod(EventType.DELETED, low, 2.0)
    waiting = {a.gang.key: a for a in run(core, 2.0)}[f"{NS}/high"].result
    assert isinstance(waiting, Unschedulable)
    assert f"release their claims {NS}/low-gpu" in waiting.message
    feed(core, deallocated(low_claim, "2"), event="MODIFIED")
    attempts = {a.gang.key: a for a in run(core, 60.0)}
    placed = attempts[f"{NS}/high"].result
    assert isinstance(placed, Plan), placed
    [claim] = placed.claims
    assert claim.allocation is not None
    [result] = claim.allocation.results
    assert result.device == "gpu-0" and result.share_id
    assert dict(result.consumed) == {"memory": 20 * 2**30}
    top = attempts[f"{NS}/top"].result
    assert isinstance(top, Unschedulable), top
    assert core.dra.kept(f"{NS}/high") == frozenset()
    assert _memory_consumed(core, gpu0) == 30 * 2**30
    assert taken_twice(core) == []


def test_a_preemptor_needing_a_partition_gets_the_counters_a_victims_partition_drew() -> None:
    """One GPU split as a whole partition (80) or two halves (40 each) of one counter set:
    the lower gang's claim holds the whole one; a gang asking a half preempts it (the
    what-if gives the counters back) and gets a half once the claim is released."""
    parts = [partition("whole", memory="80"), partition("half-0", memory="40")]
    parts.append(partition("half-1", memory="40"))
    for part in parts:
        part["attributes"] = {"kind": {"string": part["name"].split("-")[0]}}
    low_claim = built_claim(
        "low-gpu",
        [exactly()],
        namespace=NS,
        allocation=allocated((DRIVER, "n1", "whole")),
    )
    low_claim["metadata"]["finalizers"] = [DELETE_PROTECTION]
    low_claim["status"]["reservedFor"] = [pod_ref("low")]
    low = running("low", 1, "low-gpu")
    core = dra_core("n1")
    core.cache.assignment_key = TEST_KEY
    core.preempter.enabled = True
    feed(
        core,
        class_obj(),
        counter_slice("counters", {"gpu-0": {"memory": "80"}}, node="n1", count=2),
        built_slice("parts", parts, node="n1", count=2),
        low_claim,
    )
    half = exactly(selectors=(f'device.attributes["{DRIVER}"].kind == "half"',))
    feed(core, built_claim("high-gpu", [half], namespace=NS))
    for pod in (low, pending("high", 10, "high-gpu")):
        core.apply_pod(EventType.ADDED, pod, 0.0)

    [attempt] = run(core)
    decision = attempt.preemption
    assert decision is not None, attempt.result
    assert [v.key for v in decision.victims] == [f"{NS}/low"]
    assert decision.devices == (DeviceId(DRIVER, "n1", "half-0"),)
    core.apply_pod(EventType.DELETED, low, 2.0)
    run(core, 2.0)
    feed(core, deallocated(low_claim, "2"), event="MODIFIED")
    [placed] = run(core, 60.0)
    assert isinstance(placed.result, Plan), placed.result
    [claim] = placed.result.claims
    assert claim.allocation is not None
    assert [r.device for r in claim.allocation.results] == ["half-0"]
    assert taken_twice(core) == []
