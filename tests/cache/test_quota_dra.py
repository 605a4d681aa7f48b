"""ElasticQuota resource names for DRA devices (cache/dra/quota.py, docs/quotas.md "DRA
devices"): read from a tenant's quota, hostile names and quantities refused without
raising, and a claim's usage counted per DeviceClass."""

from __future__ import annotations

import contextlib
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from cache import resources as res
from cache.cluster import AssumeError
from cache.dra.claims import (
    Allocation,
    Claim,
    DeviceResult,
    ExactRequest,
    Request,
    claim_from_api,
)
from cache.dra.quota import capacity_resource, claim_usage, devices_resource
from cache.dra.store import DraCache
from cache.quota import (
    MAX_DRA_RESOURCES,
    QuotaLedger,
    as_resource_list,
    excess,
    quota_from_api,
)
from tests.cache.test_quota import quota_obj

GPUS = "gpu.deviceclass.resource.k8s.io/devices"
MEMORY = "gpu.deviceclass.resource.k8s.io/capacity.memory"


def test_the_names_are_kubernetes_resourcequota_names_per_device_class() -> None:
    assert devices_resource("gpu") == GPUS
    assert capacity_resource("gpu", "memory") == MEMORY
    quota = quota_from_api(quota_obj("a", {GPUS: 4, MEMORY: "80Gi", "cpu": "8"}, {GPUS: "1.5"}))
    assert quota.max == {GPUS: 4000, MEMORY: 80 * 2**30 * 1000, "cpu": 8000}
    assert quota.min == {GPUS: 1500}
    assert not quota.problems
    qualified = capacity_resource("mig.nvidia.com", "gpu.nvidia.com/memory")
    assert quota_from_api(quota_obj("a", {qualified: "1Gi"})).max == {qualified: 2**30 * 1000}


def test_malformed_names_are_problems_and_not_enforced() -> None:
    hostile = {
        ".deviceclass.resource.k8s.io/devices": 1,  # no class
        "GPU!.deviceclass.resource.k8s.io/devices": 1,  # not a DNS subdomain
        "gpu.deviceclass.resource.k8s.io/shares": 1,  # no such suffix
        "gpu.deviceclass.resource.k8s.io/capacity.": 1,  # no capacity name
        "gpu.deviceclass.resource.k8s.io/capacity.a/b/c": 1,  # not a qualified name
        ("x" * 300) + ".deviceclass.resource.k8s.io/devices": 1,  # too long
        GPUS: 2,
    }
    quota = quota_from_api(quota_obj("a", hostile))
    assert quota.max == {GPUS: 2000}
    assert len(quota.problems) == 1 and "not enforced" in quota.problems[0]


def test_absurd_quantities_leave_the_list_unenforced() -> None:
    for value in ("1e400", "-1", "lots", 10**30, "9" * 5000):
        quota = quota_from_api(quota_obj("a", {GPUS: value, "cpu": "1"}))
        assert quota.max == {}, value
        assert quota.problems, value


def test_a_quota_naming_thousands_of_classes_enforces_a_bounded_number() -> None:
    names = {devices_resource(f"c{i:05d}"): 1 for i in range(5000)}
    quota = quota_from_api(quota_obj("a", names))
    assert len(quota.max) == MAX_DRA_RESOURCES
    assert any("more than" in problem for problem in quota.problems)


def test_min_above_max_guarantees_max_and_the_excess_names_the_resource() -> None:
    quota = quota_from_api(quota_obj("a", {GPUS: 2}, {GPUS: 3}))
    assert quota.min == {GPUS: 2000}
    over = excess(quota, {GPUS: 1000}, {GPUS: 2000})
    assert over is not None
    assert over.describe() == f"exceeds max {GPUS}: 1 used + 2 asked > 2"


def test_status_used_lists_devices_and_capacity() -> None:
    listed = as_resource_list({GPUS: 3000, MEMORY: 20 * 2**30 * 1000})
    assert listed[GPUS] == "3" and listed[MEMORY] == "20Gi"


def _claim(*requests: Request) -> Claim:
    return Claim("ns", "c", requests=requests)


def test_a_claims_usage_counts_each_result_by_its_class_and_shares_by_capacity() -> None:
    claim = _claim(
        Request("whole", exactly=ExactRequest("whole", "gpu", count=2)),
        Request(
            "flex",
            first_available=(ExactRequest("big", "gpu"), ExactRequest("small", "mig")),
        ),
        Request("share", exactly=ExactRequest("share", "gpu")),
    )
    results = (
        DeviceResult("whole", "d", "p", "gpu-0"),
        DeviceResult("whole", "d", "p", "gpu-1"),
        DeviceResult("flex/small", "d", "p", "mig-0"),
        DeviceResult("share", "d", "p", "gpu-2", share_id="s", consumed=(("memory", Fraction(5)),)),
        DeviceResult("whole", "d", "p", "gpu-3", admin_access=True),
        DeviceResult("unknown", "d", "p", "gpu-4"),
    )
    assert claim_usage(claim, Allocation(results)) == {
        GPUS: 3000,
        devices_resource("mig"): 1000,
        MEMORY: 5000,
    }


@given(
    st.dictionaries(
        st.text(max_size=80) | st.sampled_from([GPUS, MEMORY]),
        st.integers() | st.text(max_size=20) | st.floats() | st.none(),
        max_size=8,
    )
)
def test_any_resource_list_is_read_without_raising(listed: dict[str, object]) -> None:
    quota = quota_from_api(quota_obj("a", listed, listed))
    for amount in (*quota.max.values(), *quota.min.values()):
        assert amount >= 0


_CLAIMS = [("a", "c0", "gpu"), ("a", "c1", "mig"), ("b", "c2", "gpu"), ("b", "c3", "gpu")]


def _claim_api(index: int, count: int, allocated_: bool) -> dict[str, object]:
    namespace, name, device_class = _CLAIMS[index]
    request = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    obj: dict[str, object] = {
        "metadata": {"namespace": namespace, "name": name, "uid": name},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": request}]}},
    }
    if allocated_:
        results = [
            {"request": "r", "driver": "d.example.com", "pool": "p", "device": f"{name}-{i}"}
            for i in range(count)
        ]
        obj["status"] = {"allocation": {"devices": {"results": results}}}
    return obj


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["allocated", "unallocated", "deleted", "assume", "forget"]),
            st.integers(0, len(_CLAIMS) - 1),
            st.integers(1, 3),
        ),
        max_size=30,
    )
)
def test_the_ledger_holds_each_claims_allocation_once_whatever_the_order(
    steps: list[tuple[str, int, int]],
) -> None:
    """Whatever the events, holds and releases, each namespace's usage is the sum of
    its claims' usage as they stand now, each claim once (charge and discharge exact)."""
    ledger = QuotaLedger()
    dra = DraCache(quota_ledger=ledger)
    for action, index, count in steps:
        namespace, name, _ = _CLAIMS[index]
        key = f"{namespace}/{name}"
        if action in ("allocated", "unallocated"):
            dra.apply_claim("MODIFIED", _claim_api(index, count, action == "allocated"))
        elif action == "deleted":
            dra.apply_claim("DELETED", _claim_api(index, count, False))
        elif action == "assume":
            allocation = claim_from_api(_claim_api(index, count, True)).allocation
            assert allocation is not None
            with contextlib.suppress(AssumeError):
                dra.assume([(key, allocation)])
        else:
            dra.forget(key)
        for space in ("a", "b"):
            expected: dict[str, int] = {}
            for claim_key, claim in dra.claims.items():
                allocation = dra.allocation_of(claim_key)
                if claim.namespace == space and allocation is not None:
                    res.add(expected, claim_usage(claim, allocation))
            assert dict(ledger.used(space)) == expected
