"""Partitionable devices (KEP-4815) in the allocator and the cache, rule by rule, against
kube-scheduler 1.36's incubating allocator (checkAvailableCounters) and pool assembly
(getAndValidateCounterSets, validateDeviceCounterConsumption)."""

from __future__ import annotations

from typing import Any

import pytest

from cache.cluster import AssumeError
from cache.dra.slices import DeviceId, PoolId
from policies.dra.allocator import ClaimAllocator
from policies.dra.gang import PodAllocation, allocate_gang
from tests.dra_builders import (
    DRIVER,
    allocated,
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
from tests.policies.dra.test_allocator import cache_with, devices_of, member

KIND = f'device.attributes["{DRIVER}"].kind'


def gpu_partitions(**extra: Any) -> list[dict[str, Any]]:
    """One 80 GB GPU published as partitions (pool node-1, two slices): the whole GPU
    (80), two halves (40) and four quarters (20), all drawing on counter set gpu-0."""
    devices = [partition("whole", memory="80"), partition("half-0", memory="40")]
    devices += [partition("half-1", memory="40")]
    devices += [partition(f"quarter-{i}", memory="20") for i in range(4)]
    for d in devices:
        d["attributes"] = {"kind": {"string": d["name"].split("-")[0]}}
    return [
        counter_slice("counters", {"gpu-0": {"memory": "80"}}, count=2),
        slice_obj("parts", devices, count=2, **extra),
        class_obj(),
    ]


def kind(name: str, wanted: str) -> dict[str, Any]:
    return claim_obj(name, [exactly(selectors=(f'{KIND} == "{wanted}"',))])


def test_a_partition_in_use_leaves_only_what_the_counters_still_hold() -> None:
    cache = cache_with(
        *gpu_partitions(), kind("w", "whole"), kind("h", "half"), kind("q", "quarter")
    )
    allocator = ClaimAllocator(cache, {})
    half = allocator.allocate(member("h"))
    assert devices_of(half) == ["half-0"]
    assert isinstance(half, PodAllocation)
    cache.assume(half.new_allocations())
    why = allocator.allocate(member("w"))
    assert isinstance(why, str)
    assert (
        "without room left (pool gpu.example.com/node-1: counter memory of counter set gpu-0" in why
    )
    # Half is left: two quarters fit, a third does not.
    for name in ("q1", "q2"):
        cache.apply_claim("ADDED", kind(name, "quarter"))
        found = allocator.allocate(member(name))
        assert isinstance(found, PodAllocation), found
        cache.assume(found.new_allocations())
    cache.apply_claim("ADDED", kind("q3", "quarter"))
    assert isinstance(allocator.allocate(member("q3")), str)


def test_counters_drawn_by_claims_someone_else_allocated_count() -> None:
    cache = cache_with(
        *gpu_partitions(),
        kind("w", "whole"),
        kind("h", "half"),
        claim_obj("theirs", [exactly()], allocation=allocated((DRIVER, "node-1", "quarter-3"))),
    )
    allocator = ClaimAllocator(cache, {})
    assert isinstance(allocator.allocate(member("w")), str)
    assert devices_of(allocator.allocate(member("h"))) == ["half-0"]
    drawn, names = cache.counters_drawn(PoolId(DRIVER, "node-1"))
    assert drawn == {"gpu-0": {"memory": 20}} and names == {"quarter-3"}


def test_kubernetes_138765_with_real_partitions() -> None:
    """Two pods each asking "a whole GPU, or else half of one", on one GPU split into
    halves: pod by pod the first takes the whole GPU and the second finds nothing; the
    gang search moves the first to a half."""
    flexible = [
        first_available(
            "gpu",
            sub("whole", selectors=(f'{KIND} == "whole"',)),
            sub("half", selectors=(f'{KIND} == "half"',)),
        )
    ]
    cache = cache_with(*gpu_partitions(), claim_obj("a", flexible), claim_obj("b", flexible))
    allocator = ClaimAllocator(cache, {})
    assert devices_of(allocator.allocate(member("a"))) == ["whole"]
    found = allocate_gang(allocator, [member("a", uid="pod-a"), member("b", uid="pod-b")])
    assert isinstance(found, dict), found
    assert devices_of(found["pod-a"]) == ["half-0"]
    assert devices_of(found["pod-b"]) == ["half-1"]


def test_a_device_consuming_an_unknown_counter_set_makes_the_pool_invalid() -> None:
    objs = gpu_partitions()
    objs[1]["spec"]["devices"].append(partition("stray", counter_set="gpu-9", memory="1"))
    cache = cache_with(*objs, kind("h", "half"))
    why = ClaimAllocator(cache, {}).allocate(member("h"))
    assert isinstance(why, str)
    assert "pool gpu.example.com/node-1 is invalid: device stray: consumesCounters names" in why
    assert "counter set gpu-9 not found" in why


def test_a_device_consuming_an_unknown_counter_makes_the_pool_invalid() -> None:
    objs = gpu_partitions()
    objs[1]["spec"]["devices"].append(partition("stray", cores="1"))
    cache = cache_with(*objs, kind("h", "half"))
    why = ClaimAllocator(cache, {}).allocate(member("h"))
    assert isinstance(why, str)
    assert "names counter cores, which counter set gpu-0 does not have" in why


def test_a_counter_set_named_twice_makes_the_pool_invalid() -> None:
    objs = gpu_partitions()
    objs[0]["spec"]["sharedCounters"].append({"name": "gpu-0", "counters": {"x": {"value": "1"}}})
    cache = cache_with(*objs, kind("h", "half"))
    why = ClaimAllocator(cache, {}).allocate(member("h"))
    assert isinstance(why, str) and "names a counter set twice" in why


@pytest.mark.parametrize(
    ("amount", "reason"),
    [
        ("-40", "is negative (-40): counters that do not add up"),
        (
            "81",
            "consumesCounters[gpu-0].counters[memory] is 81, more than counter set gpu-0 "
            "holds (80)",
        ),
    ],
)
def test_a_device_drawing_a_negative_or_excessive_amount_is_never_allocated(
    amount: str, reason: str
) -> None:
    objs = gpu_partitions()
    odd = partition("odd", memory=amount)
    odd["attributes"] = {"kind": {"string": "odd"}}
    objs[1]["spec"]["devices"].append(odd)
    cache = cache_with(*objs, kind("o", "odd"), kind("h", "half"))
    allocator = ClaimAllocator(cache, {})
    why = allocator.allocate(member("o"))
    assert isinstance(why, str) and "1 not supported" in why
    assert reason in cache.device(DeviceId(DRIVER, "node-1", "odd")).refusal  # type: ignore[union-attr]
    # The others still are.
    assert devices_of(allocator.allocate(member("h"))) == ["half-0"]


def test_a_shared_device_draws_its_counters_once_for_all_its_shares() -> None:
    shared = shared_device("slice-0", memory="40Gi")
    shared["consumesCounters"] = [{"counterSet": "gpu-0", "counters": {"memory": {"value": "40"}}}]
    other = partition("slice-1", memory="40")
    cache = cache_with(
        counter_slice("counters", {"gpu-0": {"memory": "80"}}, count=2),
        slice_obj("parts", [shared, other], count=2),
        class_obj(),
    )
    allocator = ClaimAllocator(cache, {})
    for name in ("a", "b", "c"):
        cache.apply_claim(
            "ADDED", claim_obj(name, [exactly(capacity={"requests": {"memory": "10Gi"}})])
        )
        found = allocator.allocate(member(name))
        assert devices_of(found) == ["slice-0"]
        assert isinstance(found, PodAllocation)
        cache.assume(found.new_allocations())
    drawn, _ = cache.counters_drawn(PoolId(DRIVER, "node-1"))
    assert drawn == {"gpu-0": {"memory": 40}}
    cache.apply_claim("ADDED", claim_obj("e", [exactly(count=1)]))
    # slice-1 still fits: 40 + 40 = 80.
    found = ClaimAllocator(cache, {}).allocate(member("e"))
    assert devices_of(found) == ["slice-1"]


def test_holding_partitions_beyond_the_counters_is_refused_by_the_cache() -> None:
    cache = cache_with(*gpu_partitions(), kind("w", "whole"), kind("h", "half"))
    allocator = ClaimAllocator(cache, {})
    whole, half = allocator.allocate(member("w")), allocator.allocate(member("h"))
    assert isinstance(whole, PodAllocation) and isinstance(half, PodAllocation)
    cache.assume(whole.new_allocations())
    with pytest.raises(AssumeError, match="counter memory of counter set gpu-0"):
        cache.assume(half.new_allocations())


def test_a_counter_set_holding_a_negative_amount_gives_nothing() -> None:
    objs = gpu_partitions()
    objs[0]["spec"]["sharedCounters"][0]["counters"]["memory"]["value"] = "-1"
    cache = cache_with(*objs, kind("q", "quarter"))
    why = ClaimAllocator(cache, {}).allocate(member("q"))
    assert isinstance(why, str) and "7 not supported" in why
    quarter = cache.device(DeviceId(DRIVER, "node-1", "quarter-0"))
    assert quarter is not None and "more than counter set gpu-0 holds (-1)" in quarter.refusal
