"""Consumable capacity and partitionable devices through the scheduling core: gangs whose
members share one device, or split one GPU's partitions, planned whole and held in the
core's DraCache; the DRA reach memo follows capacity and counters as they change."""

from __future__ import annotations

from typing import Any

from scheduler.planner.result import Plan, Unschedulable
from tests.dra_builders import (
    DRIVER,
    allocated,
    capacity_request,
    claim_obj,
    class_obj,
    counter_slice,
    first_available,
    partition,
    shared_device,
    slice_obj,
    sub,
)
from tests.scheduler.dra_cores import add_pods, claiming, devices, dra_core, feed, taken_twice

KIND = f'device.attributes["{DRIVER}"].kind'


def _schedule(core: Any) -> Plan | Unschedulable:
    attempt = core.schedule_next(0.0)
    assert attempt is not None
    result = attempt.result
    assert isinstance(result, Plan | Unschedulable)
    return result


def test_a_gang_whose_members_each_ask_a_share_of_one_device() -> None:
    core = dra_core("node-1")
    feed(core, slice_obj("s", [shared_device("gpu-0", memory="40Gi")]), class_obj())
    feed(core, *(claim_obj(f"c-{i}", [capacity_request(memory="10Gi")]) for i in range(4)))
    add_pods(core, *(claiming(f"p-{i}", f"c-{i}", size=4) for i in range(4)))
    plan = _schedule(core)
    assert isinstance(plan, Plan), plan
    assert all(devices(plan, f"ns/c-{i}") == ["gpu-0"] for i in range(4))
    ids = {
        r.share_id for c in plan.claims if c.allocation is not None for r in c.allocation.results
    }
    assert len(ids) == 4 and "" not in ids
    assert not taken_twice(core)
    # The device is full: a fifth member's share waits, with the words why.
    feed(core, claim_obj("c-4", [capacity_request(memory="10Gi")]))
    add_pods(core, claiming("p-4", "c-4", gang="h"))
    waiting = _schedule(core)
    assert isinstance(waiting, Unschedulable)
    assert "capacity memory of device gpu-0" in waiting.reasons["uid-ns-p-4"]


def test_a_gang_too_big_for_one_devices_capacity_waits_whole() -> None:
    core = dra_core("node-1")
    feed(core, slice_obj("s", [shared_device("gpu-0", memory="40Gi")]), class_obj())
    feed(core, *(claim_obj(f"c-{i}", [capacity_request(memory="15Gi")]) for i in range(3)))
    add_pods(core, *(claiming(f"p-{i}", f"c-{i}", size=3) for i in range(3)))
    assert isinstance(_schedule(core), Unschedulable)
    assert not any(core.dra.is_assumed(f"ns/c-{i}") for i in range(3))


def _partitioned_gpu() -> list[dict[str, Any]]:
    parts = [partition("whole", memory="80"), partition("half-0", memory="40")]
    parts.append(partition("half-1", memory="40"))
    for part in parts:
        part["attributes"] = {"kind": {"string": part["name"].split("-")[0]}}
    return [
        counter_slice("counters", {"gpu-0": {"memory": "80"}}, count=2),
        slice_obj("parts", parts, count=2),
        class_obj(),
    ]


def test_kubernetes_138765_gang_with_real_partitions() -> None:
    """kubernetes#138765 as filed: two pods, each asking "a whole GPU, or else half of
    one", on one GPU that can be split into halves."""
    core = dra_core("node-1")
    flexible = [
        first_available(
            "gpu",
            sub("whole", selectors=(f'{KIND} == "whole"',)),
            sub("half", selectors=(f'{KIND} == "half"',)),
        )
    ]
    feed(core, *_partitioned_gpu(), claim_obj("a", flexible), claim_obj("b", flexible))
    add_pods(core, claiming("p-a", "a", size=2), claiming("p-b", "b", size=2))
    plan = _schedule(core)
    assert isinstance(plan, Plan), plan
    assert sorted(devices(plan, "ns/a") + devices(plan, "ns/b")) == ["half-0", "half-1"]


def test_the_reach_memo_follows_counters_drawn_by_others() -> None:
    """A gang refused because someone else's claim drew the GPU's counters is placed once
    that claim lets go: the reach kept per node is asked again when the counters change."""
    core = dra_core("node-1")
    theirs = claim_obj("theirs", [], allocation=allocated((DRIVER, "node-1", "whole")))
    mine = claim_obj("mine", [capacity_request()])
    mine["spec"]["devices"]["requests"][0]["exactly"] = {
        "deviceClassName": DRIVER,
        "selectors": [{"cel": {"expression": f'{KIND} == "half"'}}],
    }
    feed(core, *_partitioned_gpu(), theirs, mine)
    add_pods(core, claiming("p", "mine", gang=None))
    refused = _schedule(core)
    assert isinstance(refused, Unschedulable)
    assert "counter memory of counter set gpu-0" in refused.reasons["uid-ns-p"]
    freed = claim_obj("theirs", [], rv="2")
    feed(core, freed, event="MODIFIED")
    plan = core.schedule_next(1000.0)
    assert plan is not None and isinstance(plan.result, Plan), plan
    assert devices(plan.result, "ns/mine") == ["half-0"]


def test_a_rollback_knows_its_shares_by_share_id() -> None:
    """The writer's rollback removes only the allocation it wrote: the same shares of a
    device allocated again by someone else (other shareIDs) are not its own."""
    from cache.dra.claims import Allocation, DeviceResult
    from scheduler.kube.dra_claims import allocation_is

    ours = Allocation(
        results=(DeviceResult("gpu", DRIVER, "node-1", "gpu-0", share_id="a" * 8),),
    )
    assert allocation_is(ours.to_api(), ours)
    theirs = Allocation(
        results=(DeviceResult("gpu", DRIVER, "node-1", "gpu-0", share_id="b" * 8),),
    )
    assert not allocation_is(theirs.to_api(), ours)
