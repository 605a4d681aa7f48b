"""Devices kept for a gang (DraCache.keep: a preemptor, or a starvation reservation)
with consumable capacity and partitions: a kept device is taken whole for everyone
else, even where the gang planned only a share of it. No share of a kept shared device
is found or held, and a kept partition draws its counters, so no partition that would
overdraw them with it is found or held either."""

from __future__ import annotations

import pytest

from cache.cluster import AssumeError
from cache.dra.slices import DeviceId, PoolId
from policies.dra.allocator import ClaimAllocator
from policies.dra.gang import PodAllocation
from tests.dra_builders import (
    DRIVER,
    capacity_request,
    claim_obj,
    class_obj,
    counter_slice,
    exactly,
    partition,
    slice_obj,
)
from tests.policies.dra.test_allocator import cache_with, member
from tests.policies.dra.test_capacity import allocate, hold, one_gpu

KIND = f'device.attributes["{DRIVER}"].kind'
PREEMPTOR = "ns/high"


def gpu(name: str) -> DeviceId:
    return DeviceId(DRIVER, "node-1", name)


def test_no_share_of_a_kept_shared_device_is_found_or_held() -> None:
    cache = one_gpu()
    first = allocate(cache, capacity_request(memory="10Gi"), name="a")
    hold(cache, first)  # 10Gi of 40Gi taken: a share still fits
    cache.keep(PREEMPTOR, [gpu("gpu-0")])
    assert cache.use(gpu("gpu-0")).whole
    later = allocate(cache, capacity_request(memory="10Gi"), name="b")
    assert isinstance(later, str) and "in use" in later

    cache.release_kept(PREEMPTOR)
    found = allocate(cache, capacity_request(memory="10Gi"), name="b")
    assert isinstance(found, PodAllocation)
    cache.keep(PREEMPTOR, [gpu("gpu-0")])  # kept again after the share was planned
    taken = f"device {gpu('gpu-0')} of claim ns/b is taken by gang {PREEMPTOR}"
    with pytest.raises(AssumeError, match=taken):
        cache.assume(found.new_allocations())
    cache.release_kept(PREEMPTOR)
    hold(cache, found)


def _partitioned() -> list[dict[str, object]]:
    parts = [partition("whole", memory="80"), partition("half-0", memory="40")]
    parts.append(partition("half-1", memory="40"))
    for part in parts:
        part["attributes"] = {"kind": {"string": str(part["name"]).split("-")[0]}}
    return [
        counter_slice("counters", {"gpu-0": {"memory": "80"}}, count=2),
        slice_obj("parts", parts, count=2),
        class_obj(),
    ]


def test_a_kept_partition_draws_its_counters() -> None:
    cache = cache_with(*_partitioned())
    cache.keep(PREEMPTOR, [gpu("half-0")])
    drawn, names = cache.counters_drawn(PoolId(DRIVER, "node-1"))
    assert names == {"half-0"} and drawn == {"gpu-0": {"memory": 40}}
    whole = allocate(cache, exactly(selectors=(f'{KIND} == "whole"',)), name="w")
    assert isinstance(whole, str) and "counter memory of counter set gpu-0" in whole
    half = allocate(cache, exactly(selectors=(f'{KIND} == "half"',)), name="h")
    assert isinstance(half, PodAllocation)
    assert [r.device for c in half.claims for r in c.allocation.results] == ["half-1"]

    # The whole GPU planned while nothing was kept is refused once half of it is.
    cache.release_kept(PREEMPTOR)
    cache.apply_claim("ADDED", claim_obj("w2", [exactly(selectors=(f'{KIND} == "whole"',))]))
    found = ClaimAllocator(cache, {}).allocate(member("w2"))
    assert isinstance(found, PodAllocation)
    cache.keep(PREEMPTOR, [gpu("half-0")])
    with pytest.raises(AssumeError, match="counter memory of counter set gpu-0"):
        cache.assume(found.new_allocations())
