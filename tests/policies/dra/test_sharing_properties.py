"""Properties of consumable capacity and partitionable devices, over random devices
(shared ones under random request policies, partitions of random sizes on one counter
set, a shared partition), random claims other schedulers allocated first, and random
gangs allocated on top and held in the cache:

- no device's capacity is over-committed: the shares of one device, ours and others',
  never consume more than it has, and a device taken whole is used by nothing else;
- no counter set is over-committed: the devices in use never draw more than it holds;
- every share has its own shareID;
- the cache accepts (assume) whatever the allocator found.

The invariants are recomputed here from the claims' allocations and the slices, not
read from the code under test."""

from __future__ import annotations

import uuid
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.dra.slices import DeviceId
from cache.dra.store import DraCache
from policies.dra.allocator import ClaimAllocator
from policies.dra.gang import PodAllocation, allocate_gang
from tests.dra_builders import (
    DRIVER,
    claim_obj,
    class_obj,
    counter_slice,
    exactly,
    first_available,
    partition,
    shared_device,
    slice_obj,
    sub,
)
from tests.policies.dra.test_allocator import member

POOL = "node-1"
COUNTER_SET = "gpu-0"
KIND = f'device.attributes["{DRIVER}"].kind'

# Valid request policies for a capacity of 40 (the API server would accept each).
POLICIES: list[dict[str, Any] | None] = [
    None,
    {"default": "10"},
    {"default": "10", "validValues": ["5", "10", "20", "40"]},
    {"default": "8", "validRange": {"min": "4", "max": "32", "step": "4"}},
    {"default": "4", "validRange": {"min": "4"}},
    {"default": "6", "validRange": {"min": "2", "step": "2"}},
]


@st.composite
def layouts(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The node's slices: shared devices, partitions of one counter set of 80, and a
    shared partition drawing 40 of it."""
    shared = []
    for i in range(draw(st.integers(0, 2))):
        policy = draw(st.sampled_from(POLICIES))
        body = shared_device(f"shared-{i}", {"memory": policy} if policy else None, memory="40")
        body["attributes"] = {"kind": {"string": "shared"}}
        shared.append(body)
    parts = []
    for i, size in enumerate(draw(st.lists(st.sampled_from(["80", "40", "20", "60"]), max_size=5))):
        body = partition(f"part-{i}", memory=size)
        body["attributes"] = {"kind": {"string": "part"}}
        parts.append(body)
    if draw(st.booleans()):
        both = shared_device("shared-part", memory="40")
        both["consumesCounters"] = [
            {"counterSet": COUNTER_SET, "counters": {"memory": {"value": "40"}}}
        ]
        both["attributes"] = {"kind": {"string": "shared"}}
        parts.append(both)
    devices = shared + parts
    if not devices:
        devices = [partition("part-x", memory="80")]
    return [
        counter_slice("counters", {COUNTER_SET: {"memory": "80"}}, node=POOL, count=2),
        slice_obj("devices", devices, node=POOL, count=2),
        class_obj(),
    ]


ASKS = st.sampled_from([None, "1", "3", "5", "8", "12", "20", "40", "50"])


@st.composite
def requests(draw: st.DrawFn) -> list[dict[str, Any]]:
    """One request: a share of a shared device, a partition, or either (firstAvailable)."""
    shape = draw(st.sampled_from(["shared", "part", "either"]))
    ask = draw(ASKS)
    capacity = {"capacity": {"requests": {"memory": ask}}} if ask else {}
    if shape == "either":
        first = sub("shared", selectors=(f'{KIND} == "shared"',))
        first.update(capacity)
        return [first_available("gpu", first, sub("part", selectors=(f'{KIND} == "part"',)))]
    return [exactly(selectors=(f'{KIND} == "{shape}"',), **capacity)]


def _apply(cache: DraCache, objs: list[dict[str, Any]]) -> None:
    for obj in objs:
        if obj["kind"] == "ResourceSlice":
            cache.apply_slice("ADDED", obj)
        else:
            cache.apply_class("ADDED", obj)


def _write_as_others(cache: DraCache, key: str, found: PodAllocation) -> None:
    """The allocation as another scheduler writes it: in the claim's status, with its
    own random shareIDs."""
    [choice] = found.claims
    body = choice.allocation.to_api()
    for result in body["devices"]["results"]:
        if "shareID" in result:
            result["shareID"] = str(uuid.uuid4())
    claim = cache.claims[key]
    obj = claim_obj(claim.name, [], rv="2", allocation=body)
    cache.apply_claim("MODIFIED", obj)


def _check_invariants(cache: DraCache, layout: list[dict[str, Any]]) -> None:
    devices = {d["name"]: d for d in layout[1]["spec"]["devices"]}
    whole: dict[str, int] = {}
    shares: dict[str, int] = {}
    consumed: dict[str, Fraction] = {}
    share_ids: list[tuple[str, str]] = []
    for key in cache.claims:
        allocation = cache.allocation_of(key)
        if allocation is None:
            continue
        for result in allocation.results:
            if result.share_id:
                shares[result.device] = shares.get(result.device, 0) + 1
                share_ids.append((result.device, result.share_id))
                for _, amount in result.consumed:
                    consumed[result.device] = consumed.get(result.device, Fraction(0)) + amount
            else:
                whole[result.device] = whole.get(result.device, 0) + 1
    assert len(set(share_ids)) == len(share_ids), "a shareID twice"
    for name, count in whole.items():
        assert count == 1 and name not in shares, f"device {name} taken whole and used again"
    for name, amount in consumed.items():
        assert devices[name].get("allowMultipleAllocations") is True
        assert amount <= Fraction(40), f"device {name}: {amount} consumed of 40"
    drawn = Fraction(0)
    for name in set(whole) | set(shares):
        for consumption in devices[name].get("consumesCounters", []):
            drawn += Fraction(consumption["counters"]["memory"]["value"])
    assert drawn <= 80, f"counter set drawn {drawn} of 80"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=layouts(),
    others=st.lists(requests(), max_size=4),
    gang=st.lists(requests(), min_size=1, max_size=4),
)
def test_nothing_is_over_committed_across_others_claims_and_a_gang(
    layout: list[dict[str, Any]],
    others: list[list[dict[str, Any]]],
    gang: list[list[dict[str, Any]]],
) -> None:
    cache = DraCache()
    _apply(cache, layout)
    allocator = ClaimAllocator(cache, {})
    for i, request in enumerate(others):
        cache.apply_claim("ADDED", claim_obj(f"other-{i}", request))
        found = allocator.allocate(member(f"other-{i}", uid=f"other-{i}"))
        if isinstance(found, PodAllocation):
            _write_as_others(cache, f"ns/other-{i}", found)
    _check_invariants(cache, layout)
    for i, request in enumerate(gang):
        cache.apply_claim("ADDED", claim_obj(f"g-{i}", request))
    members = [member(f"g-{i}", uid=f"pod-{i}") for i in range(len(gang))]
    found = allocate_gang(allocator, members)
    if isinstance(found, dict):
        held = [a for choice in found.values() for a in choice.new_allocations()]
        cache.assume(held)  # never refused: the allocator over-commits nothing
    _check_invariants(cache, layout)
    # And a later gang sees what this one holds.
    for i, request in enumerate(gang):
        cache.apply_claim("ADDED", claim_obj(f"h-{i}", request))
    members = [member(f"h-{i}", uid=f"later-{i}") for i in range(len(gang))]
    found = allocate_gang(allocator, members)
    if isinstance(found, dict):
        cache.assume([a for choice in found.values() for a in choice.new_allocations()])
    _check_invariants(cache, layout)


def test_share_ids_are_unique_per_claim_result_and_allocation() -> None:
    from cache.dra.claims import claim_from_api
    from policies.dra.results import share_id

    device = DeviceId(DRIVER, POOL, "shared-0")
    a = claim_from_api(claim_obj("a", [exactly()], uid="u-a"))
    b = claim_from_api(claim_obj("b", [exactly()], uid="u-b"))
    again = claim_from_api(claim_obj("a", [exactly()], uid="u-a", rv="7"))
    ids = {share_id(c, p, device) for c in (a, b, again) for p in (0, 1)}
    assert len(ids) == 6
    assert all(str(uuid.UUID(i)) == i for i in ids)
