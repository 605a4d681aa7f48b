"""Whole-gang DRA allocation through the scheduling core (docs/dra.md, "Whole-gang
allocation"): every claim of every member allocated in one plan with the node choice,
earlier members' device choices revisited when a later member finds none."""

from __future__ import annotations

from typing import Any

from cache.dra.claims import Consumer
from scheduler.planner.result import Plan, Unschedulable
from tests.dra_builders import (
    DRIVER,
    claim_obj,
    class_obj,
    device,
    exactly,
    kubernetes_138765_objects,
    slice_obj,
)
from tests.factories import node_obj
from tests.scheduler.dra_cores import (
    MEMORY,
    add_pods,
    claiming,
    devices,
    dra_core,
    feed,
    taken_twice,
)


def test_kubernetes_138765_gang_is_placed_by_revisiting_the_first_members_choice() -> None:
    """Two pods on one node ask "a whole big GPU, or else a part" and "a big GPU".
    Pod by pod (kube-scheduler) the first takes the big one and the second fails;
    the gang's plan moves the first to its next alternative (a part: the small one).
    Partitions are refused here, so "whole" and "part" are whole devices told apart
    by memory."""
    core = dra_core("node-1")
    feed(
        core,
        *kubernetes_138765_objects(),
    )
    add_pods(
        core, claiming("a-flexible", "flexible", size=2), claiming("b-strict", "strict", size=2)
    )
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    assert isinstance(plan, Plan), plan
    assert {p.node for p in plan.placements} == {"node-1"}
    assert devices(plan, "ns/flexible") == ["small"]
    assert devices(plan, "ns/strict") == ["big"]
    [flexible] = [c for c in plan.claims if c.key == "ns/flexible"]
    assert flexible.allocation is not None
    assert flexible.allocation.results[0].request == "gpu/part"
    assert flexible.reserved_for == (Consumer("pods", "a-flexible", "uid-ns-a-flexible"),)
    # Assumed in the DraCache: the devices are taken until the writes' outcome.
    assert core.dra.is_assumed("ns/flexible") and core.dra.is_assumed("ns/strict")
    assert not taken_twice(core)


def _pcie_gang() -> list[dict[str, Any]]:
    """One node, eight devices on two PCIe roots, four big and four small; four
    claims of two devices on one root each: two flexible, two asking for big ones."""
    layout = [
        ("d0", "r0", 80),
        ("d1", "r0", 80),
        ("d2", "r0", 40),
        ("d3", "r0", 40),
        ("d4", "r1", 80),
        ("d5", "r1", 80),
        ("d6", "r1", 40),
        ("d7", "r1", 40),
    ]
    objs = [
        slice_obj("s", [device(name, pcieRoot=root, memory=mem) for name, root, mem in layout]),
        class_obj(),
    ]
    same_root = [{"matchAttribute": f"{DRIVER}/pcieRoot"}]
    for i in range(4):
        selectors = (f"{MEMORY} >= 80",) if i >= 2 else ()
        objs.append(
            claim_obj(f"w-{i}", [exactly(count=2, selectors=selectors)], constraints=same_root)
        )
    return objs


def test_gang_of_four_on_one_pcie_root_each_needs_a_non_greedy_choice() -> None:
    """Greedily the two flexible members take the big pair of root r0 and the small
    pair of r0, the first strict one the big pair of r1, and the last finds nothing.
    Revisiting moves the flexible members onto the small pairs."""
    core = dra_core("node-1")
    feed(core, *_pcie_gang())
    add_pods(core, *(claiming(f"w-{i}", f"w-{i}", size=4) for i in range(4)))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    assert isinstance(plan, Plan), plan
    roots = {"d0": "r0", "d1": "r0", "d2": "r0", "d3": "r0"}
    used: list[str] = []
    for i in range(4):
        pair = devices(plan, f"ns/w-{i}")
        assert len(pair) == 2 and len({roots.get(d, "r1") for d in pair}) == 1, pair
        if i >= 2:
            assert set(pair) in ({"d0", "d1"}, {"d4", "d5"})
        used += pair
    assert len(set(used)) == 8
    assert not taken_twice(core)


def test_a_claim_shared_by_the_gang_is_allocated_once_and_reserved_for_each() -> None:
    core = dra_core("node-1", "node-2")
    feed(
        core,
        slice_obj("s1", [device("gpu-0")], node="node-1"),
        slice_obj("s2", [device("gpu-0")], node="node-2"),
        class_obj(),
        claim_obj("shared", [exactly()]),
    )
    add_pods(core, *(claiming(f"p-{i}", "shared", size=3) for i in range(3)))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    assert isinstance(plan, Plan), plan
    [shared] = plan.claims
    assert shared.allocation is not None and len(shared.allocation.results) == 1
    # Node-local devices: the allocation names one node, and every member goes there.
    node = {p.node for p in plan.placements}
    assert len(node) == 1
    assert shared.allocation.to_api()["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
        "values"
    ] == sorted(node)
    assert {c.name for c in shared.reserved_for} == {"p-0", "p-1", "p-2"}


def test_an_allocated_claim_only_constrains_the_node_and_gets_reserved_for() -> None:
    core = dra_core("node-1", "node-2")
    allocation = {
        "devices": {
            "results": [{"request": "gpu", "driver": DRIVER, "pool": "node-2", "device": "gpu-0"}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-2"]}]}
            ]
        },
    }
    feed(
        core,
        slice_obj("s2", [device("gpu-0")], node="node-2"),
        class_obj(),
        claim_obj("done", [exactly()], allocation=allocation, rv="7"),
    )
    add_pods(core, claiming("p", "done", gang=None))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    plan = attempt.result
    assert isinstance(plan, Plan), plan
    assert [p.node for p in plan.placements] == ["node-2"]
    [entry] = plan.claims
    assert entry.allocation is None and entry.resource_version == "7"
    assert [c.name for c in entry.reserved_for] == ["p"]
    assert not core.dra.is_assumed("ns/done")


def test_a_member_whose_claim_is_impossible_leaves_nothing_placed_or_assumed() -> None:
    core = dra_core("node-1")
    feed(
        core,
        slice_obj("s", [device(f"gpu-{i}") for i in range(4)]),
        class_obj(),
        claim_obj("c-0", [exactly()]),
        claim_obj("c-1", [exactly()]),
        claim_obj("c-2", [exactly(count=5)]),
    )
    add_pods(core, *(claiming(f"p-{i}", f"c-{i}", size=3) for i in range(3)))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    result = attempt.result
    assert isinstance(result, Unschedulable), result
    assert result.placeable == 2
    why = result.reasons["uid-ns-p-2"]
    assert why.startswith("0/1 nodes are available: 1 cannot allocate all claims.")
    assert "claim ns/c-2 request gpu: 4 of 5 devices" in why
    assert not any(core.dra.is_assumed(f"ns/c-{i}") for i in range(3))
    assert not any(core.cache.is_assumed(f"uid-ns-p-{i}") for i in range(3))
    assert core.dra.taken() == frozenset()


def test_a_device_taint_without_toleration_makes_the_pod_wait_with_the_reason() -> None:
    tainted = device("gpu-0")
    tainted["taints"] = [{"key": "broken", "value": "ecc", "effect": "NoSchedule"}]
    core = dra_core("node-1")
    feed(core, slice_obj("s", [tainted]), class_obj(), claim_obj("c", [exactly()]))
    add_pods(core, claiming("p", "c", gang=None))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    result = attempt.result
    assert isinstance(result, Unschedulable), result
    assert result.message.startswith("0/1 nodes are available: 1 cannot allocate all claims.")
    assert "1 with a taint not tolerated" in result.message
    # The toleration, added by a new claim, lets it through.
    feed(
        core,
        claim_obj("c", [exactly(tolerations=[{"key": "broken", "operator": "Exists"}])], rv="2"),
        event="MODIFIED",
    )
    attempt = core.schedule_next(100.0)
    assert attempt is not None and isinstance(attempt.result, Plan), attempt


def test_failures_are_counted_in_kube_schedulers_words_with_the_allocators_reason() -> None:
    """Three nodes: one has the device but too little cpu, two have no devices."""
    core = dra_core("node-1", "node-2")
    core.apply_node("ADDED", node_obj("node-0", cpu="1"), 0.0)
    feed(core, slice_obj("s", [device("gpu-0")], node="node-0"), class_obj())
    feed(core, claim_obj("c", [exactly()]))
    add_pods(core, claiming("p", "c", gang=None, cpu="2"))
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    result = attempt.result
    assert isinstance(result, Unschedulable), result
    assert result.message.startswith(
        "0/3 nodes are available: 2 cannot allocate all claims, 1 Insufficient cpu. On node "
        "node-1: cannot allocate all claims: claim ns/c request gpu: 0 of 1 devices of class "
        f"{DRIVER} match (0 devices, 0 in use)"
    ), result.message
