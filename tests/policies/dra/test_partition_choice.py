"""Which partition first (policies/dra/partitions.py): the one leaving the largest useful
remainder. kube-scheduler 1.36 takes the first that fits in listing order; each test
shows where that would cut a GPU that could have stayed whole, or block a larger
partition."""

from __future__ import annotations

from typing import Any

from policies.dra.allocator import ClaimAllocator
from tests.dra_builders import (
    DRIVER,
    allocated,
    claim_obj,
    class_obj,
    counter_slice,
    exactly,
    partition,
    slice_obj,
)
from tests.policies.dra.test_allocator import cache_with, devices_of, member

KIND = f'device.attributes["{DRIVER}"].kind'


def _part(name: str, counter_set: str, **counters: str) -> dict[str, Any]:
    body = partition(name, counter_set=counter_set, **counters)
    body["attributes"] = {"kind": {"string": name.split("-")[0]}}
    return body


def kind(name: str, wanted: str) -> dict[str, Any]:
    return claim_obj(name, [exactly(selectors=(f'{KIND} == "{wanted}"',))])


def two_gpus_one_cut(*claims: dict[str, Any]) -> Any:
    """Two GPUs g0, g1 of 80 memory, each as one whole partition or four quarters
    (listed g0 first); another allocator's claim holds quarter 0 of g1."""
    devices = []
    for gpu in ("g0", "g1"):
        devices.append(_part(f"whole-{gpu}", gpu, memory="80"))
        devices += [_part(f"quarter-{gpu}-{i}", gpu, memory="20") for i in range(4)]
    return cache_with(
        counter_slice("counters", {"g0": {"memory": "80"}, "g1": {"memory": "80"}}, count=2),
        slice_obj("parts", devices, count=2),
        class_obj(),
        claim_obj("theirs", [], allocation=allocated((DRIVER, "node-1", "quarter-g1-0"))),
        *claims,
    )


def test_a_partition_goes_to_the_gpu_already_cut_keeping_the_other_whole() -> None:
    cache = two_gpus_one_cut(kind("q", "quarter"), kind("w", "whole"))
    allocator = ClaimAllocator(cache, {})
    # First fit in listing order would cut g0; g1 is cut already.
    found = allocator.allocate(member("q"))
    assert devices_of(found) == ["quarter-g1-1"]
    assert devices_of(allocator.allocate(member("w"))) == ["whole-g0"]


def test_within_a_gpu_the_slice_that_keeps_the_larger_neighbour_free() -> None:
    """Positional counters as MIG lays memory out: four slices s0..s3; a half draws two
    neighbours, a quarter one. Quarter 0 is taken; first fit (listed q2, q3, q1) would
    take q2 and block both halves; q1 keeps half 1 allocatable."""
    slices = {f"s{i}": "1" for i in range(4)}
    devices = [
        _part("half-0", "gpu", s0="1", s1="1"),
        _part("half-1", "gpu", s2="1", s3="1"),
        *(_part(f"quarter-{i}", "gpu", **{f"s{i}": "1"}) for i in (2, 3, 1, 0)),
    ]
    cache = cache_with(
        counter_slice("counters", {"gpu": slices}, count=2),
        slice_obj("parts", devices, count=2),
        class_obj(),
        claim_obj("theirs", [], allocation=allocated((DRIVER, "node-1", "quarter-0"))),
        kind("q", "quarter"),
        kind("h", "half"),
    )
    allocator = ClaimAllocator(cache, {})
    found = allocator.allocate(member("q"))
    assert devices_of(found) == ["quarter-1"]
    assert not isinstance(found, str)
    cache.assume(found.new_allocations())
    assert devices_of(allocator.allocate(member("h"))) == ["half-1"]


def test_judging_is_bounded_then_listing_order_is_kept(monkeypatch: Any) -> None:
    from policies.dra import partitions

    monkeypatch.setattr(partitions, "MAX_LOOKS", 5)
    cache = two_gpus_one_cut(kind("q", "quarter"))
    assert devices_of(ClaimAllocator(cache, {}).allocate(member("q"))) == ["quarter-g0-0"]
