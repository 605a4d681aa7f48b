"""The DRA model: slices, pools, claims, and DraCache's events and holds."""

from __future__ import annotations

from fractions import Fraction

import pytest

from cache.cluster import AssumeError
from cache.dra.claims import Allocation, DeviceResult, claim_from_api
from cache.dra.fields import Attribute
from cache.dra.slices import DeviceId, slice_from_api
from cache.dra.store import DraCache, Hold
from tests.dra_builders import DRIVER, allocated, claim_obj, device, exactly, slice_obj

NODE_LABELS = {"rack": "r1"}


def dev(name: str) -> DeviceId:
    return DeviceId(DRIVER, "node-1", name)


def alloc(*names: str) -> Allocation:
    return Allocation(results=tuple(DeviceResult("gpu", DRIVER, "node-1", n) for n in names))


def test_slice_attributes_are_qualified_by_the_driver_and_capacity_is_exact() -> None:
    raw = device("gpu-0", model="a100", cores=108, ok=True, fw=("version", "1.2.3"))
    raw["attributes"]["other.io/x"] = {"string": "y"}
    raw["capacity"] = {"memory": {"value": "80Gi"}}
    record = slice_from_api(slice_obj("s", [raw]))
    assert not record.problems
    found = record.devices[0]
    assert found.attributes == {
        f"{DRIVER}/model": Attribute("string", "a100"),
        f"{DRIVER}/cores": Attribute("int", 108),
        f"{DRIVER}/ok": Attribute("bool", True),
        f"{DRIVER}/fw": Attribute("version", "1.2.3"),
        "other.io/x": Attribute("string", "y"),
    }
    assert found.capacity == {f"{DRIVER}/memory": Fraction(80 * 2**30)}


def test_duplicate_device_names_make_the_pool_invalid_and_count_nothing() -> None:
    cache = DraCache()
    cache.apply_slice("ADDED", slice_obj("s", [device("gpu-0"), device("gpu-0"), device("gpu-1")]))
    reached = cache.node_devices("node-1", {})
    assert reached.candidates == ()
    assert reached.unusable == (
        "pool gpu.example.com/node-1 is invalid: resourceslice 's': duplicate device name 'gpu-0'",
    )
    # Across two slices of one pool as well.
    cache = DraCache()
    cache.apply_slice("ADDED", slice_obj("a", [device("gpu-0")], count=2))
    cache.apply_slice("ADDED", slice_obj("b", [device("gpu-0")], count=2))
    assert cache.node_devices("node-1", {}).candidates == ()
    assert "duplicate device name 'gpu-0'" in cache.node_devices("node-1", {}).unusable[0]


def test_pool_counts_only_when_all_slices_of_the_newest_generation_are_seen() -> None:
    cache = DraCache()
    cache.apply_slice("ADDED", slice_obj("a", [device("gpu-0")], count=2, generation=1))
    assert cache.node_devices("node-1", {}).candidates == ()
    assert (
        "incomplete: 1 of 2 slices of generation 1" in cache.node_devices("node-1", {}).unusable[0]
    )
    cache.apply_slice("ADDED", slice_obj("b", [device("gpu-1")], count=2, generation=1))
    assert [c.device.name for c in cache.node_devices("node-1", {}).candidates] == [
        "gpu-0",
        "gpu-1",
    ]
    # A newer generation replaces the old one only once complete; the old is ignored.
    cache.apply_slice("ADDED", slice_obj("c", [device("gpu-9")], count=2, generation=2))
    assert cache.node_devices("node-1", {}).candidates == ()
    cache.apply_slice("ADDED", slice_obj("d", [device("gpu-8")], count=2, generation=2))
    names = [c.device.name for c in cache.node_devices("node-1", {}).candidates]
    assert names == ["gpu-9", "gpu-8"]  # slices by name: c, d


def test_which_devices_a_node_reaches() -> None:
    cache = DraCache()
    cache.apply_slice("ADDED", slice_obj("local", [device("l")], node="node-1"))
    cache.apply_slice("ADDED", slice_obj("elsewhere", [device("e")], node="node-2"))
    cache.apply_slice(
        "ADDED", slice_obj("all", [device("a")], node=None, pool="fabric", allNodes=True)
    )
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }
    cache.apply_slice(
        "ADDED", slice_obj("rack", [device("r")], node=None, pool="rack", nodeSelector=selector)
    )
    per_device = [dict(device("p1"), nodeName="node-1"), dict(device("p2"), nodeName="node-2")]
    cache.apply_slice(
        "ADDED", slice_obj("per", per_device, node=None, pool="per", perDeviceNodeSelection=True)
    )
    names = [c.device.name for c in cache.node_devices("node-1", NODE_LABELS).candidates]
    assert sorted(names) == ["a", "l", "p1", "r"]
    assert sorted(c.device.name for c in cache.node_devices("node-2", {}).candidates) == [
        "a",
        "e",
        "p2",
    ]


def test_allocated_claims_charge_their_devices_whoever_allocated_them() -> None:
    cache = DraCache()
    cache.apply_claim(
        "ADDED", claim_obj("c", [exactly()], allocation=allocated((DRIVER, "node-1", "gpu-0")))
    )
    cache.apply_claim(
        "ADDED",
        claim_obj(
            "admin", [exactly()], allocation=allocated((DRIVER, "node-1", "gpu-1"), admin=True)
        ),
    )
    assert cache.holder(dev("gpu-0")) == "ns/c"
    assert cache.holder(dev("gpu-1")) == ""  # admin access takes nothing
    cache.apply_claim("DELETED", claim_obj("c", [exactly()], rv="2"))
    assert cache.holder(dev("gpu-0")) == ""


def test_older_events_are_dropped() -> None:
    cache = DraCache()
    cache.apply_claim(
        "ADDED",
        claim_obj("c", [exactly()], rv="5", allocation=allocated((DRIVER, "node-1", "gpu-0"))),
    )
    cache.apply_claim("MODIFIED", claim_obj("c", [exactly()], rv="4"))
    assert cache.holder(dev("gpu-0")) == "ns/c"


def test_assume_confirm_forget() -> None:
    cache = DraCache()
    for name in ("a", "b"):
        cache.apply_claim("ADDED", claim_obj(name, [exactly()]))
    cache.assume([("ns/a", alloc("gpu-0"))])
    assert cache.holder(dev("gpu-0")) == "ns/a"
    with pytest.raises(AssumeError):
        cache.assume([("ns/b", alloc("gpu-0"))])  # never one device twice
    with pytest.raises(AssumeError):
        cache.assume([("ns/b", alloc("gpu-1", "gpu-1"))])
    assert cache.holder(dev("gpu-1")) == ""  # whole or nothing
    cache.forget("ns/a")
    assert cache.holder(dev("gpu-0")) == ""
    cache.assume([("ns/a", alloc("gpu-0"))])
    cache.mark_written("ns/a")
    cache.forget("ns/a")  # the API accepted it: never forgotten
    assert cache.hold_state("ns/a") == Hold.WRITTEN
    # The claim's event showing the allocation replaces the hold.
    cache.apply_claim(
        "MODIFIED",
        claim_obj("a", [exactly()], rv="2", allocation=allocated((DRIVER, "node-1", "gpu-0"))),
    )
    assert not cache.is_assumed("ns/a") and cache.holder(dev("gpu-0")) == "ns/a"
    cache.assume([("ns/b", alloc("gpu-1"))])
    cache.confirm("ns/b")
    assert not cache.is_assumed("ns/b")
    assert cache.claims["ns/b"].allocation == alloc("gpu-1")


def test_a_hold_ends_when_its_claim_is_replaced_or_deleted() -> None:
    cache = DraCache()
    cache.apply_claim("ADDED", claim_obj("a", [exactly()]))
    cache.assume([("ns/a", alloc("gpu-0"))])
    cache.apply_claim("MODIFIED", claim_obj("a", [exactly()], rv="2"))  # write still in flight
    assert cache.is_assumed("ns/a")
    cache.apply_claim("ADDED", claim_obj("a", [exactly()], rv="3", uid="another"))
    assert not cache.is_assumed("ns/a") and cache.holder(dev("gpu-0")) == ""


def test_claim_fields() -> None:
    claim = claim_from_api(
        claim_obj(
            "c",
            [
                exactly(
                    count=2,
                    adminAccess=True,
                    tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                )
            ],
            constraints=[{"matchAttribute": f"{DRIVER}/pcieRoot", "requests": ["gpu"]}],
        )
    )
    assert not claim.problems
    request = claim.requests[0].exactly
    assert request is not None and request.count == 2 and request.admin_access
    assert request.tolerations[0].key == "k"
    assert claim.constraints[0].attribute == f"{DRIVER}/pcieRoot"


def test_nodes_changed_since_a_clock_are_named_latest_first_each_once() -> None:
    """The change log the planner's DRA reach catches up from: a node changed twice
    is named once, at its latest change; nodes changed before the clock read are not."""
    cache = DraCache()
    for node in ("a", "b", "c"):
        cache.apply_slice("ADDED", slice_obj(f"s-{node}", [device("gpu-0")], node=node))
    clock = cache.change_clock
    assert list(cache.nodes_changed_since(clock)) == []
    cache.apply_claim(
        "ADDED", claim_obj("x", [exactly()], allocation=allocated((DRIVER, "a", "gpu-0")))
    )
    cache.apply_claim(
        "ADDED", claim_obj("y", [exactly()], allocation=allocated((DRIVER, "b", "gpu-0")))
    )
    cache.apply_claim("DELETED", claim_obj("x", [exactly()], rv="2"))
    assert list(cache.nodes_changed_since(clock)) == ["a", "b"]
    assert cache.node_stamp("c")[1] <= clock < cache.node_stamp("a")[1]
