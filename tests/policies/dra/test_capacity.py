"""Consumable capacity (KEP-5075) in the allocator, rule by rule, against kube-scheduler
1.36's incubating allocator (consumable_capacity.go): shares of devices that allow
multiple allocations, each capacity's requestPolicy, and shares others allocated."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cache.dra.store import DraCache
from policies.dra.allocator import ClaimAllocator
from policies.dra.gang import PodAllocation, allocate_gang
from tests.dra_builders import (
    DRIVER,
    capacity_request,
    claim_obj,
    class_obj,
    device,
    exactly,
    first_available,
    share,
    shared_device,
    slice_obj,
    sub,
)
from tests.policies.dra.test_allocator import cache_with, member

GI = 2**30


def results(found: PodAllocation | str) -> list[dict[str, Any]]:
    assert isinstance(found, PodAllocation), found
    return [r.to_api() for c in found.claims for r in c.allocation.results]


def one_gpu(policies: dict[str, dict[str, Any]] | None = None, **capacity: str) -> DraCache:
    return cache_with(
        slice_obj("s", [shared_device("gpu-0", policies, **(capacity or {"memory": "40Gi"}))]),
        class_obj(),
    )


def allocate(cache: DraCache, *requests: dict[str, Any], name: str = "c") -> PodAllocation | str:
    cache.apply_claim("ADDED", claim_obj(name, list(requests)))
    return ClaimAllocator(cache, {}).allocate(member(name))


def hold(cache: DraCache, found: PodAllocation | str) -> None:
    assert isinstance(found, PodAllocation), found
    cache.assume(found.new_allocations())


def test_shares_of_one_device_fit_its_capacity_and_no_more() -> None:
    cache = one_gpu()
    first = allocate(cache, capacity_request(memory="20Gi"), name="a")
    [result] = results(first)
    assert result["device"] == "gpu-0"
    assert result["consumedCapacity"] == {"memory": str(20 * GI)}
    assert str(uuid.UUID(result["shareID"])) == result["shareID"]  # lowercase RFC 4122
    hold(cache, first)
    second = allocate(cache, capacity_request(memory="20Gi"), name="b")
    hold(cache, second)
    assert results(second)[0]["shareID"] != result["shareID"]
    third = allocate(cache, capacity_request(memory="1"), name="c")
    assert isinstance(third, str)
    assert "capacity memory of device gpu-0" in third and "more than its 42949672960" in third


def test_a_request_without_capacity_consumes_the_whole_capacity_or_the_default() -> None:
    cache = one_gpu()
    [whole] = results(allocate(cache, exactly(), name="a"))
    assert whole["consumedCapacity"] == {"memory": str(40 * GI)}
    policy = {"memory": {"default": "10Gi", "validRange": {"min": "1Gi"}}}
    cache = one_gpu(policy)
    [default] = results(allocate(cache, exactly(), name="a"))
    assert default["consumedCapacity"] == {"memory": str(10 * GI)}


@pytest.mark.parametrize(
    ("asked", "consumed"),
    [
        ("1", 4 * GI),  # below min: min
        ("4Gi", 4 * GI),  # at min
        ("5Gi", 8 * GI),  # rounded up to min + one step
        ("8Gi", 8 * GI),  # on a step
        ("36Gi", 36 * GI),  # at max
    ],
)
def test_valid_range_rounds_up_to_min_and_steps(asked: str, consumed: int) -> None:
    policy = {
        "memory": {"default": "4Gi", "validRange": {"min": "4Gi", "max": "36Gi", "step": "4Gi"}}
    }
    [result] = results(allocate(one_gpu(policy), capacity_request(memory=asked)))
    assert result["consumedCapacity"] == {"memory": str(consumed)}


def test_a_request_beyond_the_policy_is_refused_naming_the_field() -> None:
    policy = {
        "memory": {"default": "4Gi", "validRange": {"min": "4Gi", "max": "36Gi", "step": "4Gi"}}
    }
    why = allocate(one_gpu(policy), capacity_request(memory="37Gi"))
    assert isinstance(why, str)
    assert "spec.devices.requests[0].exactly.capacity.requests[memory]" in why
    assert "outside the requestPolicy of device gpu-0: validRange max is" in why


def test_valid_values_take_the_first_not_below_and_refuse_above_them_all() -> None:
    policy = {"memory": {"default": "10Gi", "validValues": ["10Gi", "20Gi", "40Gi"]}}
    [result] = results(allocate(one_gpu(policy), capacity_request(memory="11Gi")))
    assert result["consumedCapacity"] == {"memory": str(20 * GI)}
    policy = {"memory": {"default": "10Gi", "validValues": ["10Gi", "20Gi"]}}
    why = allocate(one_gpu(policy), capacity_request(memory="21Gi"))
    assert isinstance(why, str) and "validValues are" in why


def test_a_capacity_the_device_lacks_is_refused() -> None:
    why = allocate(one_gpu(), capacity_request(cores="1"))
    assert isinstance(why, str)
    assert "capacity.requests[cores]: device gpu-0 has no capacity cores" in why


def test_capacity_keys_match_as_written() -> None:
    """kube-scheduler compares capacity names literally: a bare request name does not
    match a device capacity written with its domain."""
    cache = cache_with(
        slice_obj("s", [shared_device("gpu-0", **{f"{DRIVER}/memory": "40Gi"})]), class_obj()
    )
    assert isinstance(allocate(cache, capacity_request(memory="1Gi")), str)
    found = allocate(cache, capacity_request(**{f"{DRIVER}/memory": "1Gi"}), name="d")
    assert results(found)[0]["consumedCapacity"] == {f"{DRIVER}/memory": str(GI)}


def test_shares_others_allocated_count_and_a_whole_result_takes_the_device() -> None:
    cache = one_gpu()
    other = uuid.uuid4()
    cache.apply_claim(
        "ADDED",
        claim_obj(
            "theirs",
            [exactly()],
            allocation={"devices": {"results": [share("gpu-0", str(other), memory="30Gi")]}},
        ),
    )
    assert isinstance(allocate(cache, capacity_request(memory="11Gi"), name="a"), str)
    assert results(allocate(cache, capacity_request(memory="10Gi"), name="b"))
    whole = one_gpu()
    whole.apply_claim(
        "ADDED",
        claim_obj(
            "theirs",
            [exactly()],
            allocation={
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": "gpu-0"}
                    ]
                }
            },
        ),
    )
    why = allocate(whole, capacity_request(memory="1"))
    assert isinstance(why, str) and "1 in use" in why


def test_first_available_sub_requests_ask_capacity_too() -> None:
    cache = one_gpu()
    big = sub("big")
    big["capacity"] = {"requests": {"memory": "50Gi"}}
    small = sub("small")
    small["capacity"] = {"requests": {"memory": "8Gi"}}
    [result] = results(allocate(cache, first_available("gpu", big, small)))
    assert result["request"] == "gpu/small"
    assert result["consumedCapacity"] == {"memory": str(8 * GI)}


def test_a_device_without_multiple_allocations_is_taken_whole_within_its_capacity() -> None:
    plain = device("gpu-0")
    plain["capacity"] = {"memory": {"value": "40Gi"}}
    cache = cache_with(slice_obj("s", [plain, device("gpu-1")]), class_obj())
    [result] = results(allocate(cache, capacity_request(memory="8Gi")))
    assert result["device"] == "gpu-0" and "shareID" not in result
    assert "consumedCapacity" not in result
    why = allocate(cache, capacity_request(memory="41Gi"), name="d")
    assert isinstance(why, str) and "more than device gpu-0 has" in why


@pytest.mark.parametrize(
    ("asked", "problem"),
    [
        ("-1Gi", "is negative"),
        ("1Gx", "is not a Kubernetes quantity"),
        (True, "is a boolean"),
    ],
)
def test_hostile_capacity_requests_are_a_problem_of_the_claim(asked: Any, problem: str) -> None:
    cache = one_gpu()
    why = allocate(cache, capacity_request(memory=asked))
    assert isinstance(why, str)
    assert "spec.devices.requests[0].exactly.capacity.requests[memory]" in why and problem in why


def test_one_pod_may_take_two_shares_of_one_device_in_two_requests() -> None:
    cache = one_gpu()
    found = allocate(
        cache, capacity_request("a", memory="10Gi"), capacity_request("b", memory="10Gi")
    )
    shares = results(found)
    assert [r["device"] for r in shares] == ["gpu-0", "gpu-0"]
    assert shares[0]["shareID"] != shares[1]["shareID"]
    # One request's devices are distinct (combinations): two shares need two devices.
    assert isinstance(allocate(cache, capacity_request(count=2, memory="1Gi"), name="d"), str)


def test_a_gang_of_members_each_asking_a_share_of_one_device() -> None:
    cache = one_gpu()
    for i in range(5):
        cache.apply_claim("ADDED", claim_obj(f"c-{i}", [capacity_request(memory="10Gi")]))
    allocator = ClaimAllocator(cache, {})
    four = [member(f"c-{i}", uid=f"pod-{i}") for i in range(4)]
    found = allocate_gang(allocator, four)
    assert isinstance(found, dict)
    ids = {r.share_id for a in found.values() for c in a.claims for r in c.allocation.results}
    assert len(ids) == 4
    five = [member(f"c-{i}", uid=f"pod-{i}") for i in range(5)]
    assert isinstance(allocate_gang(allocator, five), str)


def test_holding_shares_beyond_the_capacity_is_refused_by_the_cache() -> None:
    from cache.cluster import AssumeError

    cache = one_gpu()
    a = allocate(cache, capacity_request(memory="30Gi"), name="a")
    b = allocate(cache, capacity_request(memory="30Gi"), name="b")
    hold(cache, a)
    assert isinstance(b, PodAllocation)
    with pytest.raises(AssumeError, match="capacity memory of device gpu-0"):
        cache.assume(b.new_allocations())


def test_a_negative_consumed_capacity_written_by_others_never_makes_room() -> None:
    cache = one_gpu()
    results_written = [
        share("gpu-0", str(uuid.uuid4()), memory="40Gi"),
        share("gpu-0", str(uuid.uuid4()), memory="-40Gi"),
    ]
    cache.apply_claim(
        "ADDED",
        claim_obj("theirs", [exactly()], allocation={"devices": {"results": results_written}}),
    )
    assert isinstance(allocate(cache, capacity_request(memory="1Gi")), str)


def test_all_mode_leaves_out_a_shared_device_without_room() -> None:
    cache = cache_with(
        slice_obj(
            "s", [shared_device("gpu-0", memory="40Gi"), shared_device("gpu-1", memory="40Gi")]
        ),
        class_obj(),
    )
    hold(cache, allocate(cache, capacity_request(memory="35Gi"), name="a"))
    every = {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "allocationMode": "All"}}
    every["exactly"]["capacity"] = {"requests": {"memory": "10Gi"}}
    assert [r["device"] for r in results(allocate(cache, every, name="b"))] == ["gpu-1"]


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ({"default": "1Gi", "validValues": ["2Gi", "1Gi"]}, "must be sorted in ascending order"),
        ({"default": "1Gi", "validRange": {"min": "1Gi", "step": "0"}}, "step must be positive"),
        ({"default": "1Gi", "validValues": ["1Gi"], "validRange": {"min": "1Gi"}}, "sets both"),
        ({"default": "1Gi", "validRange": {"max": "2Gi"}}, "validRange.min is required"),
    ],
)
def test_a_policy_the_api_server_refuses_makes_the_pool_invalid(
    policy: dict[str, Any], problem: str
) -> None:
    """From a source that does not validate (the API server refuses these): the slice
    has a problem naming the field and no device of its pool is shared under a policy
    read wrongly."""
    why = allocate(one_gpu({"memory": policy}), capacity_request(memory="1Gi"))
    assert isinstance(why, str)
    assert "is invalid" in why and "capacity[memory].requestPolicy" in why and problem in why


def test_a_policy_without_multiple_allocations_makes_the_pool_invalid() -> None:
    plain = device("gpu-0")
    plain["capacity"] = {"memory": {"value": "40Gi", "requestPolicy": {"default": "1Gi"}}}
    cache = cache_with(slice_obj("s", [plain]), class_obj())
    why = allocate(cache, capacity_request(memory="1Gi"))
    assert isinstance(why, str) and "requestPolicy needs allowMultipleAllocations" in why
