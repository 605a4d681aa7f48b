"""Claims of a whole gang (a native PodGroup's spec.resourceClaims, KEP-5729) through
the scheduling core: allocated once for every member, on a node set all of them reach,
reserved for the PodGroup (docs/dra.md, "Claims of a whole gang")."""

from __future__ import annotations

from typing import Any

from cache.cluster import EventType
from cache.dra.claims import Consumer
from cache.native_gang import native_podgroup_from_api
from scheduler.cycle.core import SchedulingCore
from scheduler.planner.result import Plan, Unschedulable
from tests.dra_builders import DRIVER, allocated, claim_obj, class_obj, device, exactly, slice_obj
from tests.integrations.controllers import native_podgroup_obj
from tests.scheduler.dra_cores import add_pods, claiming, dra_core, feed, taken_twice

GROUP_UID = "uid-pg-train"
GROUP = Consumer("podgroups", "train", GROUP_UID, "scheduling.k8s.io")


def group_obj(claims: list[dict[str, Any]], made: dict[str, str] | None = None) -> dict[str, Any]:
    obj = native_podgroup_obj("train", 4, namespace="ns")
    obj["metadata"]["uid"] = GROUP_UID
    obj["spec"]["resourceClaims"] = claims
    if made:
        obj["status"] = {
            "resourceClaimStatuses": [
                {"name": name, "resourceClaimName": claim} for name, claim in made.items()
            ]
        }
    return obj


def member(index: int, entries: list[dict[str, str]]) -> dict[str, Any]:
    pod = claiming(f"w-{index}", gang=None)
    pod["spec"]["resourceClaims"] = entries
    pod["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    return pod


def three_nodes() -> SchedulingCore:
    """node-1 has one device, node-2 and node-3 two each: a claim of two devices fits
    on node-2 or node-3 only."""
    core = dra_core("node-1", "node-2", "node-3")
    feed(
        core,
        slice_obj("s1", [device("gpu-0")], node="node-1"),
        slice_obj("s2", [device("gpu-0"), device("gpu-1")], node="node-2"),
        slice_obj("s3", [device("gpu-0"), device("gpu-1")], node="node-3"),
        class_obj(),
    )
    return core


def schedule(core: SchedulingCore, group: dict[str, Any], pods: list[dict[str, Any]]) -> Any:
    core.apply_gang_group(native_podgroup_from_api, EventType.ADDED, group, 0.0)
    add_pods(core, *pods)
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    return attempt.result


SHARED = [{"name": "gpus", "resourceClaimName": "shared"}]


def test_a_gang_of_four_shares_one_group_claim_of_two_devices_on_one_node() -> None:
    core = three_nodes()
    feed(core, claim_obj("shared", [exactly(count=2)]))
    plan = schedule(core, group_obj(SHARED), [member(i, SHARED) for i in range(4)])
    assert isinstance(plan, Plan), plan
    assert len(plan.placements) == 4
    nodes = {p.node for p in plan.placements}
    assert len(nodes) == 1 and nodes <= {"node-2", "node-3"}
    [shared] = plan.claims
    assert shared.allocation is not None and len(shared.allocation.results) == 2
    # Reserved for the PodGroup, once, not for each pod.
    assert shared.reserved_for == (GROUP,)
    assert sorted(shared.group_members) == sorted(p.pod_uid for p in plan.placements)
    assert not taken_twice(core)


def test_a_pod_claim_that_differs_from_the_groups_is_the_pods_own() -> None:
    # Same name, other claim: resourceclaim.BindTo reserves it for the pod.
    core = three_nodes()
    feed(core, claim_obj("shared", [exactly(count=2)]), claim_obj("mine", [exactly()]))
    own = [{"name": "gpus", "resourceClaimName": "mine"}]
    plan = schedule(
        core, group_obj(SHARED), [member(0, own)] + [member(i, SHARED) for i in (1, 2, 3)]
    )
    assert isinstance(plan, Plan), plan
    by_key = {c.key: c for c in plan.claims}
    assert by_key["ns/mine"].reserved_for == (Consumer("pods", "w-0", "uid-ns-w-0"),)
    assert by_key["ns/shared"].reserved_for == (GROUP,)


def test_a_group_claim_made_from_a_template_is_found_through_the_podgroup() -> None:
    core = three_nodes()
    made = claim_obj("train-gpus-x7", [exactly(count=2)])
    made["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "name": "train",
            "uid": GROUP_UID,
            "controller": True,
        }
    ]
    feed(core, made)
    entries = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    group = group_obj(entries, made={"gpus": "train-gpus-x7"})
    plan = schedule(core, group, [member(i, entries) for i in range(4)])
    assert isinstance(plan, Plan), plan
    [claim] = plan.claims
    assert claim.key == "ns/train-gpus-x7" and claim.reserved_for == (GROUP,)


def test_a_template_claim_owned_by_someone_else_is_not_the_groups() -> None:
    core = three_nodes()
    stolen = claim_obj("train-gpus-x7", [exactly(count=2)])
    stolen["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "other", "controller": True}
    ]
    feed(core, stolen)
    entries = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    group = group_obj(entries, made={"gpus": "train-gpus-x7"})
    result = schedule(core, group, [member(i, entries) for i in range(4)])
    assert isinstance(result, Unschedulable)
    assert "was not created for PodGroup ns/train (PodGroup is not owner)" in result.message


def test_a_missing_group_claim_keeps_the_gang_waiting_and_says_which() -> None:
    core = three_nodes()
    result = schedule(core, group_obj(SHARED), [member(i, SHARED) for i in range(4)])
    assert isinstance(result, Unschedulable)
    assert "waiting for ResourceClaim ns/shared of PodGroup ns/train claim gpus" in result.message


def test_a_group_claim_naming_another_namespace_is_refused_by_name() -> None:
    # The API server refuses a name with a slash (k8s-long-name); an object that
    # carries one anyway never reaches a claim of another namespace: the gang waits
    # and its pods say which field.
    core = three_nodes()
    feed(core, claim_obj("shared", [exactly(count=2)], namespace="other"))
    hostile = [{"name": "gpus", "resourceClaimName": "other/shared"}]
    core.apply_gang_group(native_podgroup_from_api, EventType.ADDED, group_obj(hostile), 0.0)
    add_pods(core, *(member(i, SHARED) for i in range(4)))
    assert core.schedule_next(0.0) is None
    [(gang, message)] = core.waiting()
    assert gang.key == "ns/train"
    assert "spec.resourceClaims[0]" in message and "not a valid name" in message
    assert not core.dra.is_assumed("other/shared")


def reserved_for_group() -> dict[str, Any]:
    claim = claim_obj(
        "shared",
        [exactly(count=2)],
        allocation=allocated((DRIVER, "node-2", "gpu-0"), (DRIVER, "node-2", "gpu-1")),
    )
    claim["status"]["reservedFor"] = [
        {
            "apiGroup": "scheduling.k8s.io",
            "resource": "podgroups",
            "name": "train",
            "uid": GROUP_UID,
        }
    ]
    return claim


def test_a_group_claim_of_a_gang_with_no_pod_on_a_node_is_stale() -> None:
    # kube-scheduler's PostFilter takes the PodGroup off; so does the adapter.
    core = three_nodes()
    feed(core, reserved_for_group())
    core.apply_gang_group(native_podgroup_from_api, EventType.ADDED, group_obj(SHARED), 0.0)
    add_pods(core, *(member(i, SHARED) for i in range(3)))
    assert core.schedule_next(0.0) is None  # 3/4 members exist: the gang waits
    [(claim, uid)] = core.stale_group_reservations()
    assert (claim.key, uid) == ("ns/shared", GROUP_UID)


def test_a_group_claim_stays_while_a_member_is_on_its_node_even_being_deleted() -> None:
    core = three_nodes()
    feed(core, reserved_for_group())
    core.apply_gang_group(native_podgroup_from_api, EventType.ADDED, group_obj(SHARED), 0.0)
    leaving = member(3, SHARED)
    leaving["spec"]["nodeName"] = "node-2"
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    add_pods(core, *(member(i, SHARED) for i in range(3)), leaving)
    assert core.schedule_next(0.0) is None
    assert core.gangs and core.stale_group_reservations() == []


def test_a_gang_is_not_planned_while_its_podgroup_is_taken_off_its_claims() -> None:
    # A plan reusing the allocation while the release is in flight could bind members
    # onto devices the release then frees: the gang waits for the release's end.
    core = three_nodes()
    feed(core, reserved_for_group())
    core.apply_gang_group(native_podgroup_from_api, EventType.ADDED, group_obj(SHARED), 0.0)
    add_pods(core, *(member(i, SHARED) for i in range(4)))
    core.refresh(0.0)  # the gangs, as the adapter's loop has them before its pass
    assert [c.key for c, _ in core.stale_group_reservations()] == ["ns/shared"]
    assert core.schedule_next(0.0) is None
    core.group_release_ended(1.0)
    attempt = core.schedule_next(1.0)
    assert attempt is not None and isinstance(attempt.result, Plan), attempt
    # Still allocated and reserved (the release found it changed, say): reused as is.
    [claim] = attempt.result.claims
    assert claim.allocation is None and claim.reserved_for == (GROUP,)
