"""DRA-backed extended resources through the scheduling core (docs/dra.md, "Extended
resources"): a pod asking `nvidia.com/gpu: N` where a DeviceClass names that resource
gets, on a node without it as allocatable, a claim of its own allocated with the
gang's other claims; on a node that advertises it, the device plugin as ever."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.dra.claims import Consumer
from cache.pod import pod_from_api
from scheduler.planner.extended_claims import build
from scheduler.planner.result import ClaimAllocation, Plan, Unschedulable
from tests.dra_builders import DRIVER, class_obj, device, slice_obj
from tests.factories import node_obj, pod_obj
from tests.scheduler.dra_cores import add_pods, dra_core, feed, taken_twice

GPU = "nvidia.com/gpu"


def _gpu_class(name: str = DRIVER, created: str = "2026-01-01T00:00:00Z", **spec: Any) -> Any:
    obj = class_obj(name, extendedResourceName=GPU, **spec)
    obj["metadata"]["creationTimestamp"] = created
    return obj


def _gpu_slice(node: str, count: int = 4) -> dict[str, Any]:
    return slice_obj(f"{node}-gpus", [device(f"gpu-{i}") for i in range(count)], node=node)


def _members(size: int, gpus: int = 2) -> list[dict[str, Any]]:
    return [
        pod_obj(f"w{i}", namespace="ns", gang="g", min_member=size, gpus=gpus) for i in range(size)
    ]


def _extended(plan: Plan) -> dict[str, ClaimAllocation]:
    """Pod name -> the extended-resource claim the plan creates for it."""
    found = {}
    for claim in plan.claims:
        if claim.extended is not None:
            found[claim.extended.pod_name] = claim
    return found


def test_a_gang_of_four_asking_two_gpus_each_gets_dra_devices_on_dra_only_nodes() -> None:
    core = dra_core("node-1", "node-2")  # no nvidia.com/gpu allocatable on either
    feed(core, _gpu_class(), _gpu_slice("node-1"), _gpu_slice("node-2"))
    add_pods(core, *_members(4))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    assert isinstance(plan, Plan), plan
    assert len(plan.placements) == 4
    claims = _extended(plan)
    assert sorted(claims) == ["w0", "w1", "w2", "w3"]
    node_of = {p.pod_uid: p.node for p in plan.placements}
    for name, claim in claims.items():
        assert claim.extended is not None and claim.allocation is not None
        # kube-scheduler's request: container 0, the resource's index among the
        # container's sorted requests (cpu, memory, nvidia.com/gpu -> 2 is... sorted:
        # cpu, memory, nvidia.com/gpu), ExactCount of the class that names it.
        assert claim.extended.requests == (("container-0-request-2", DRIVER, 2),)
        assert claim.extended.mappings == (("main", GPU, "container-0-request-2"),)
        assert len(claim.allocation.results) == 2
        uid = f"uid-ns-{name}"
        assert claim.reserved_for == (Consumer("pods", name, uid),)
        # node-local devices: the allocation pins the member's node.
        assert {r.pool for r in claim.allocation.results} == {node_of[uid]}
        # No GPU of the device plugin's is assigned on a DRA node.
        assert next(p for p in plan.placements if p.pod_uid == uid).shares == ()
        assert core.dra.is_assumed(claim.key)
    assert not taken_twice(core)
    held = [d for c in claims.values() if c.allocation for d in c.allocation.charged()]
    assert len(set(held)) == 8


def test_a_fifth_member_waits_when_the_dra_devices_are_gone() -> None:
    core = dra_core("node-1", "node-2")
    feed(core, _gpu_class(), _gpu_slice("node-1"), _gpu_slice("node-2"))
    add_pods(core, *_members(5))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    result = attempt.result
    assert isinstance(result, Unschedulable), result
    # The made-up claim reads as kube-scheduler names it in memory.
    assert (
        "cannot allocate all claims: claim ns/<extended-resources> request "
        "container-0-request-2: 0 of 2 devices" in result.message
    )


def test_a_gang_mixes_device_plugin_and_dra_only_nodes() -> None:
    core = dra_core()
    from cache.cluster import EventType

    core.apply_node(EventType.ADDED, node_obj("plugin-1", gpus=4), 0.0)
    core.apply_node(EventType.ADDED, node_obj("dra-1"), 0.0)
    feed(core, _gpu_class(), _gpu_slice("dra-1"))
    add_pods(core, *_members(4))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    assert isinstance(plan, Plan), plan
    by_node: dict[str, list[str]] = {}
    for placement in plan.placements:
        by_node.setdefault(placement.node, []).append(placement.pod_uid)
    assert sorted(len(v) for v in by_node.values()) == [2, 2]
    claims = _extended(plan)
    # Only the members on the DRA node got a claim; the others got device-plugin GPUs.
    assert {f"uid-ns-{n}" for n in claims} == set(by_node["dra-1"])
    for placement in plan.placements:
        if placement.node == "plugin-1":
            assert len(placement.shares) == 2
        else:
            assert placement.shares == ()
    assert not taken_twice(core)


def test_without_a_class_naming_the_resource_a_dra_only_node_is_short() -> None:
    core = dra_core("node-1")
    feed(core, class_obj(), _gpu_slice("node-1"))
    add_pods(core, *_members(1))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    result = attempt.result
    assert isinstance(result, Unschedulable)
    assert f"Insufficient {GPU}" in result.message


def test_two_classes_naming_one_resource_the_newer_wins_then_the_lower_name() -> None:
    core = dra_core("node-1")
    older = _gpu_class("a-old", created="2026-01-01T00:00:00Z")
    newer = _gpu_class("z-new", created="2026-02-01T00:00:00Z")
    feed(core, older, newer)
    assert core.dra.extended_resources()[GPU] == "z-new"
    tie = _gpu_class("b-tie", created="2026-02-01T00:00:00Z")
    feed(core, tie)
    assert core.dra.extended_resources()[GPU] == "b-tie"
    # Every class also stands for its implicit name.
    assert core.dra.extended_resources()["deviceclass.resource.kubernetes.io/a-old"] == "a-old"


def test_a_class_naming_a_native_resource_takes_nothing_over() -> None:
    """The API server refuses such a class; read anyway, it maps nothing: cpu stays
    the node's."""
    core = dra_core("node-1")
    for name, resource in (("c1", "cpu"), ("c2", "example.kubernetes.io/thing")):
        obj = class_obj(name, extendedResourceName=resource)
        feed(core, obj)
    mapped = core.dra.extended_resources()
    assert "cpu" not in mapped and "example.kubernetes.io/thing" not in mapped
    add_pods(core, pod_obj("p", namespace="ns", cpu="1"))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    assert isinstance(plan, Plan) and not plan.claims


def test_a_count_that_is_not_a_whole_number_of_devices_is_refused_by_name() -> None:
    core = dra_core("node-1")
    feed(core, class_obj(), _gpu_slice("node-1"))
    obj = pod_obj("p", namespace="ns")
    implicit = f"deviceclass.resource.kubernetes.io/{DRIVER}"
    obj["spec"]["containers"][0]["resources"]["requests"][implicit] = "1500m"
    add_pods(core, obj)
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    result = attempt.result
    assert isinstance(result, Unschedulable)
    assert "1.5 is not a whole number of devices" in result.message


def test_requests_and_mappings_as_kube_scheduler_builds_them() -> None:
    """Init containers reuse the long-lived containers' requests after them; of two
    init containers only the larger request stays; requests sorted by name."""
    spec = {
        "initContainers": [
            {"name": "init-a", "resources": {"requests": {GPU: "1"}}},
            {"name": "init-b", "resources": {"requests": {GPU: "3", "cpu": "1"}}},
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {GPU: "1"}}},
        ],
        "containers": [{"name": "main", "resources": {"requests": {GPU: "1"}}}],
    }
    pod = pod_from_api({"metadata": {"name": "p", "uid": "u", "namespace": "ns"}, "spec": spec})
    claim = build(pod, frozenset({GPU}), {GPU: "gpu"})
    # init-a: 1 covered by side's request; init-b: 3 - (1 + 1) = 1 of its own.
    assert claim.requests == (
        ("container-1-request-1", "gpu", 1),
        ("container-2-request-0", "gpu", 1),
        ("container-3-request-0", "gpu", 1),
    )
    assert claim.mappings == (
        ("side", GPU, "container-2-request-0"),
        ("main", GPU, "container-3-request-0"),
        ("init-a", GPU, "container-2-request-0"),
        ("init-b", GPU, "container-2-request-0"),
        ("init-b", GPU, "container-3-request-0"),
        ("init-b", GPU, "container-1-request-1"),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plugin_gpus=st.lists(st.integers(0, 4), min_size=0, max_size=2),
    dra_devices=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    asks=st.lists(st.integers(1, 3), min_size=1, max_size=5),
)
def test_property_members_get_what_they_ask_from_one_source_and_no_device_twice(
    plugin_gpus: list[int], dra_devices: list[int], asks: list[int]
) -> None:
    """Whatever the mix of device-plugin and DRA-only nodes: a placed member on a
    DRA-only node has exactly one claim of its count of devices and no device-plugin
    GPU; on a device-plugin node, its count of GPUs and no claim; no device is taken
    twice, no GPU of a node given twice; a gang that does not fit holds nothing."""
    from cache.cluster import EventType

    core = dra_core()
    for i, gpus in enumerate(plugin_gpus):
        core.apply_node(EventType.ADDED, node_obj(f"plugin-{i}", gpus=gpus), 0.0)
    feed(core, _gpu_class())
    for i, count in enumerate(dra_devices):
        core.apply_node(EventType.ADDED, node_obj(f"dra-{i}"), 0.0)
        if count:
            feed(core, _gpu_slice(f"dra-{i}", count))
    pods = [
        pod_obj(f"w{i}", namespace="ns", gang="g", min_member=len(asks), gpus=n)
        for i, n in enumerate(asks)
    ]
    add_pods(core, *pods)
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    if not isinstance(plan, Plan):
        assert core.dra.taken() == frozenset()
        return
    asked = {f"uid-ns-w{i}": n for i, n in enumerate(asks)}
    claims = {c.reserved_for[0].uid: c for c in plan.claims if c.extended is not None}
    given: set[tuple[str, int]] = set()
    for placement in plan.placements:
        uid = placement.pod_uid
        if placement.node.startswith("dra-"):
            claim = claims[uid]
            assert claim.allocation is not None
            assert len(claim.allocation.results) == asked[uid]
            assert placement.shares == ()
        else:
            assert uid not in claims
            assert len(placement.shares) == asked[uid]
            for index, _ in placement.shares:
                assert (placement.node, index) not in given
                given.add((placement.node, index))
    assert not taken_twice(core)
    devices = [d for c in claims.values() if c.allocation for d in c.allocation.charged()]
    assert len(devices) == len(set(devices))


def test_a_waiting_gang_is_retried_when_devices_appear() -> None:
    """A gang asking only extended resources (no claims of its own) is woken by a
    ResourceSlice event, as a gang with claims is."""
    core = dra_core("node-1")
    feed(core, _gpu_class())
    add_pods(core, *_members(2))
    attempt = core.schedule_next(0.0)
    assert attempt is not None and isinstance(attempt.result, Unschedulable)
    assert core.schedule_next(1.0) is None  # waits: nothing changed
    feed(core, _gpu_slice("node-1"))
    attempt = core.schedule_next(100.0)  # after the backoff, before any periodic flush
    assert attempt is not None and isinstance(attempt.result, Plan), attempt
