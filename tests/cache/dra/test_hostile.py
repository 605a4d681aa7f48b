"""Hostile ResourceSlices, ResourceClaims and DeviceClasses: reading them, indexing them
and allocating against them never raises, never builds anything sized by a number in
them, and never counts a device twice."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.dra.claims import claim_from_api
from cache.dra.slices import slice_from_api
from cache.dra.store import DraCache
from policies.dra.allocator import ClaimAllocator
from policies.dra.gang import GangMember
from tests.dra_builders import (
    DRIVER,
    claim_obj,
    class_obj,
    device,
    exactly,
    first_available,
    slice_obj,
    sub,
)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
BIG = st.sampled_from(
    [10**5000, -1, 2**63, "x" * 100_000, [{}] * 10_000, {"k": 1}, True, 1e308, float("nan")]
)
VALUES = JSON | BIG

SLICE_PATHS = [
    "spec",
    "spec.driver",
    "spec.pool",
    "spec.pool.name",
    "spec.pool.generation",
    "spec.pool.resourceSliceCount",
    "spec.nodeName",
    "spec.nodeSelector",
    "spec.allNodes",
    "spec.perDeviceNodeSelection",
    "spec.devices",
    "spec.devices.0",
    "spec.devices.0.name",
    "spec.devices.0.attributes",
    "spec.devices.0.attributes.model",
    "spec.devices.0.capacity",
    "spec.devices.0.taints",
    "spec.devices.0.consumesCounters",
    "spec.sharedCounters",
    "metadata",
    "metadata.name",
    "metadata.resourceVersion",
]
CLAIM_PATHS = [
    "spec",
    "spec.devices",
    "spec.devices.requests",
    "spec.devices.requests.0",
    "spec.devices.requests.0.exactly",
    "spec.devices.requests.0.exactly.count",
    "spec.devices.requests.0.exactly.selectors",
    "spec.devices.requests.0.exactly.tolerations",
    "spec.devices.requests.0.exactly.allocationMode",
    "spec.devices.requests.1.firstAvailable",
    "spec.devices.constraints",
    "spec.devices.config",
    "status",
    "status.allocation",
    "status.allocation.devices.results",
    "status.reservedFor",
    "metadata.namespace",
]
CLASS_PATHS = ["spec", "spec.selectors", "spec.config", "spec.extendedResourceName", "metadata"]


def put(obj: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    here: Any = obj
    for part in parents:
        here = here[int(part)] if isinstance(here, list) else here.setdefault(part, {})
        if not isinstance(here, (dict, list)):
            return obj
    if isinstance(here, list):
        here[int(last)] = value
    else:
        here[last] = value
    return obj


BASE_SLICE = slice_obj("s", [device("gpu-0", model="a"), device("gpu-1", model="b")])
BASE_CLAIM = claim_obj(
    "c",
    [exactly(), first_available("alt", sub("one"), sub("two"))],
    constraints=[{"matchAttribute": f"{DRIVER}/model"}],
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(SLICE_PATHS),
    VALUES,
    st.sampled_from(CLAIM_PATHS),
    VALUES,
    st.sampled_from(CLASS_PATHS),
    VALUES,
)
def test_hostile_objects_never_raise(
    slice_path: str,
    slice_value: object,
    claim_path: str,
    claim_value: object,
    class_path: str,
    class_value: object,
) -> None:
    cache = DraCache()
    cache.apply_slice("ADDED", put(BASE_SLICE, slice_path, slice_value))
    cache.apply_slice("ADDED", slice_obj("t", [device("gpu-0")], pool="other"))
    cache.apply_claim("ADDED", put(BASE_CLAIM, claim_path, claim_value))
    cache.apply_class("ADDED", put(class_obj(), class_path, class_value))
    reached = cache.node_devices("node-1", {})
    ids = [c.device_id for c in reached.candidates]
    assert len(ids) == len(set(ids))  # never a device counted twice
    allocator = ClaimAllocator(cache, {})
    allocator.allocate(GangMember("pod", "ns", ("ns/c",), "node-1"))
    cache.relist("slices", [])
    cache.relist("claims", [])


def test_ten_thousand_devices_are_a_problem_on_the_slice() -> None:
    record = slice_from_api(slice_obj("s", [device(f"gpu-{i}") for i in range(10_000)]))
    assert record.devices == ()
    assert "spec.devices has 10000 entries, more than 128" in record.problems[0]


def test_wrong_types_are_problems_not_crashes() -> None:
    record = slice_from_api(put(BASE_SLICE, "spec.pool.resourceSliceCount", "2"))
    assert "resourceSliceCount must be an integer" in record.problems[0]
    claim = claim_from_api(put(BASE_CLAIM, "spec.devices.requests.0.exactly.count", 10**5000))
    assert claim.problems and "count" in claim.problems[0]


def test_metadata_of_a_hostile_type_reads_as_absent() -> None:
    # str() of a 5,000-digit int raises ValueError: names, uids and resourceVersions
    # that are not strings read as empty instead (hypothesis found it through a name).
    store = DraCache()
    for obj, apply in (
        (slice_obj("s", [device("gpu-0")]), store.apply_slice),
        (claim_obj("c", [exactly("gpu")]), store.apply_claim),
        (class_obj(), store.apply_class),
    ):
        for key in ("name", "namespace", "uid", "resourceVersion"):
            obj["metadata"][key] = 10**5000
        apply("ADDED", obj)
    assert claim_from_api({"metadata": {"name": [[[]]] * 3, "uid": 10**5000}}).name == ""
