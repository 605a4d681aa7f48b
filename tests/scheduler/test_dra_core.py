"""The core's side of DRA: pods' claims resolved (templates, missing claims, what is
refused), claims assumed with the plan all or nothing, released when the gang breaks,
confirmed by the claim's own event; the DRA entry points the Kubernetes adapter calls."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cache.cluster import AssumeError, EventType
from cache.pod import pod_from_api
from scheduler.planner.result import Plan, Unschedulable
from tests.dra_builders import DRIVER, claim_obj, class_obj, device, exactly, slice_obj
from tests.scheduler.dra_cores import add_pods, claiming, dra_core, feed


def _owned_by(claim: dict[str, Any], pod_uid: str) -> dict[str, Any]:
    claim["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": pod_uid, "controller": True}
    ]
    return claim


def _plan(core: Any, now: float = 0.0) -> Plan:
    attempt = core.schedule_next(now)
    assert attempt is not None
    assert isinstance(attempt.result, Plan), attempt.result
    return attempt.result


def test_pod_claims_are_read_and_no_longer_refused() -> None:
    obj = claiming("p", "c", templates={"gpu": "one-gpu"})
    obj["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]}
    pod = pod_from_api(obj)
    assert pod.problems == ()
    assert [(c.name, c.claim_name, c.template_name) for c in pod.resource_claims] == [
        ("c", "c", ""),
        ("gpu", "", "one-gpu"),
    ]
    assert pod.claim_statuses == {"gpu": "p-gpu-x"}


@pytest.mark.parametrize(
    ("claims", "named"),
    [
        ("not a list", "spec.resourceClaims must be a list"),
        ([{"name": "a"}], "exactly one of resourceClaimName"),
        ([{"name": "a", "resourceClaimName": "c", "resourceClaimTemplateName": "t"}], "exactly"),
        ([{"name": "A_B", "resourceClaimName": "c"}], "spec.resourceClaims[0].name"),
        ([{"name": "a", "resourceClaimName": "c"}] * 2, "listed twice"),
        ([{"name": f"a{i}", "resourceClaimName": "c"} for i in range(129)], "more than 128"),
        ([{"name": "a", "resourceClaimName": ["x"] * 3}], "spec.resourceClaims[0]"),
    ],
)
def test_unreadable_pod_claims_are_a_problem_naming_the_field(claims: object, named: str) -> None:
    obj = claiming("p")
    obj["spec"]["resourceClaims"] = claims
    pod = pod_from_api(obj)
    assert any(named in problem for problem in pod.problems), pod.problems


def test_a_template_claim_waits_for_its_claim_then_is_placed() -> None:
    core = dra_core("node-1")
    feed(core, slice_obj("s", [device("gpu-0")]), class_obj())
    pod = claiming("p", templates={"gpu": "one-gpu"}, gang=None)
    add_pods(core, pod)
    attempt = core.schedule_next(0.0)
    assert attempt is not None and isinstance(attempt.result, Unschedulable)
    assert (
        "waiting for the ResourceClaim of template one-gpu to be created"
        in (attempt.result.reasons["uid-ns-p"])
    )
    # The controller creates the claim, owned by the pod, and records it on the pod.
    made = _owned_by(claim_obj("p-gpu-1a2b", [exactly()]), "uid-ns-p")
    feed(core, made)
    seen = copy.deepcopy(pod)
    seen["metadata"]["resourceVersion"] = "2"
    seen["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-1a2b"}]}
    core.apply_pod(EventType.MODIFIED, seen, 1.0)
    plan = _plan(core, 100.0)
    [entry] = plan.claims
    assert entry.key == "ns/p-gpu-1a2b" and entry.allocation is not None
    assert core.dra.is_assumed("ns/p-gpu-1a2b")


def test_a_template_claim_not_owned_by_the_pod_and_a_missing_claim_wait() -> None:
    core = dra_core("node-1")
    feed(core, slice_obj("s", [device("gpu-0")]), class_obj())
    feed(core, _owned_by(claim_obj("stolen", [exactly()]), "someone-else"))
    pod = claiming("p", "absent", gang=None)
    add_pods(core, pod)
    other = claiming("q", templates={"gpu": "one-gpu"}, gang=None)
    other["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "stolen"}]}
    add_pods(core, other)
    reasons = {}
    while (attempt := core.schedule_next(0.0)) is not None:
        assert isinstance(attempt.result, Unschedulable)
        reasons.update(attempt.result.reasons)
    assert "waiting for ResourceClaim ns/absent to be created" in reasons["uid-ns-p"]
    assert (
        "ResourceClaim ns/stolen was not created for pod ns/q (pod is not owner)"
        in (reasons["uid-ns-q"])
    )


def test_what_is_still_unsupported_is_refused_naming_the_field() -> None:
    core = dra_core("node-1")
    feed(
        core,
        slice_obj("s", [device("gpu-0")]),
        class_obj(),
        claim_obj("cap", [exactly(capacity={"requests": {"memory": "-1Gi"}})]),
    )
    add_pods(core, claiming("p", "cap", gang=None))
    reasons = {}
    while (attempt := core.schedule_next(0.0)) is not None:
        assert isinstance(attempt.result, Unschedulable)
        reasons.update(attempt.result.reasons)
    assert (
        "spec.devices.requests[0].exactly.capacity.requests[memory] is negative"
        in reasons["uid-ns-p"]
    )
    # Extended resources a DeviceClass provides are served now (test_dra_extended.py).


def _placed_gang(core: Any) -> Plan:
    feed(core, slice_obj("s", [device(f"gpu-{i}") for i in range(2)]), class_obj())
    feed(core, claim_obj("c-0", [exactly()]), claim_obj("c-1", [exactly()]))
    add_pods(core, *(claiming(f"p-{i}", f"c-{i}", size=2) for i in range(2)))
    return _plan(core)


def test_claims_are_released_when_the_gang_breaks_unless_written() -> None:
    core = dra_core("node-1")
    plan = _placed_gang(core)
    assert all(core.dra.is_assumed(f"ns/c-{i}") for i in range(2))
    core.claims_written(plan, keys=["ns/c-0"])
    core.claims_failed(plan, keys=["ns/c-1"])
    assert core.dra.is_assumed("ns/c-0") and not core.dra.is_assumed("ns/c-1")
    # The gang breaks: what the API did not accept is released; the written claim
    # stays held until its event shows the allocation (never on a clock).
    core.bind_failed(plan.gang_key, plan.placements, 5.0, "a bind failed")
    assert core.dra.is_assumed("ns/c-0")
    [written] = [c.allocation for c in plan.claims if c.key == "ns/c-0"]
    assert written is not None and core.dra.taken() == set(written.charged())


def test_a_gang_that_breaks_before_any_write_releases_every_claim() -> None:
    core = dra_core("node-1")
    plan = _placed_gang(core)
    core.bind_failed(plan.gang_key, plan.placements, 5.0, "the claim writes failed")
    assert core.dra.taken() == frozenset()
    assert not any(core.dra.is_assumed(f"ns/c-{i}") for i in range(2))


def test_the_claims_event_showing_our_allocation_confirms_it() -> None:
    core = dra_core("node-1")
    plan = _placed_gang(core)
    core.claims_written(plan)
    for entry in plan.claims:
        assert entry.allocation is not None
        obj = claim_obj(entry.name, [exactly()], rv="2")
        obj["status"] = {
            "allocation": entry.allocation.to_api(),
            "reservedFor": [
                {"resource": "pods", "name": c.name, "uid": c.uid} for c in entry.reserved_for
            ],
        }
        feed(core, obj, event="MODIFIED")
        assert not core.dra.is_assumed(entry.key)
        assert core.dra.allocation_of(entry.key) == entry.allocation
    assert len(core.dra.taken()) == 2


def test_assume_is_all_or_nothing_with_the_placements(monkeypatch: pytest.MonkeyPatch) -> None:
    core = dra_core("node-1")

    def refuse(*args: Any) -> None:
        raise AssumeError("node gone meanwhile")

    monkeypatch.setattr(core.cache, "assume", refuse)
    feed(core, slice_obj("s", [device("gpu-0")]), class_obj(), claim_obj("c", [exactly()]))
    add_pods(core, claiming("p", "c", gang=None))
    attempt = core.schedule_next(0.0)
    assert attempt is not None and isinstance(attempt.result, Unschedulable)
    assert not core.dra.is_assumed("ns/c") and core.dra.taken() == frozenset()


def test_a_claim_held_by_another_plan_makes_the_assume_fail_whole() -> None:
    core = dra_core("node-1")
    feed(core, slice_obj("s", [device("gpu-0")]), class_obj(), claim_obj("c", [exactly()]))
    add_pods(core, claiming("p", "c", gang=None))
    # Someone else's claim takes the device between planning and assuming.
    original = core._plan

    def plan_then_race(gang: Any) -> Any:
        result = original(gang)
        feed(
            core,
            claim_obj(
                "other",
                [exactly()],
                allocation={
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": DRIVER,
                                "pool": "node-1",
                                "device": "gpu-0",
                            }
                        ]
                    }
                },
            ),
        )
        return result

    core._plan = plan_then_race  # type: ignore[method-assign]
    attempt = core.schedule_next(0.0)
    assert attempt is not None and isinstance(attempt.result, Unschedulable)
    assert not core.cache.is_assumed("uid-ns-p")
    assert not core.dra.is_assumed("ns/c")


def test_a_dra_change_requeues_only_gangs_with_claims() -> None:
    core = dra_core("node-1")
    feed(core, class_obj(), claim_obj("c", [exactly()]))
    add_pods(core, claiming("p", "c", gang=None))
    attempt = core.schedule_next(0.0)
    assert attempt is not None and isinstance(attempt.result, Unschedulable)
    assert core.schedule_next(1.0) is None  # waits: nothing changed
    feed(core, slice_obj("s", [device("gpu-0")]))
    plan = _plan(core, 100.0)
    assert [p.node for p in plan.placements] == ["node-1"]


@pytest.mark.parametrize("kind", ["resourceslices", "deviceclasses", "resourceclaims"])
def test_a_hostile_dra_object_never_raises_and_a_relist_forgets_what_is_gone(kind: str) -> None:
    core = dra_core("node-1")
    hostile: dict[str, Any] = {"metadata": {"name": "x", "namespace": "ns"}, "spec": [1, {}]}
    core.apply_dra_object(kind, "ADDED", hostile, 0.0)
    objs = {
        "resourceslices": slice_obj("s", [device("gpu-0")]),
        "deviceclasses": class_obj(),
        "resourceclaims": claim_obj("c", [exactly()]),
    }
    core.apply_dra_object(kind, "ADDED", objs[kind], 0.0)
    reconciliation = core.relist_dra_objects(kind)
    reconciliation.add([], 1.0)
    reconciliation.finish(1.0)
    assert not core.dra.slices and not core.dra.classes and not core.dra.claims
