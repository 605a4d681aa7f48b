"""The what-if view of the devices (cache/dra/view.py), against random claims: it answers
as a DraCache built afresh with the released claims deallocated would, and it never
changes the DraCache it reads."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.dra.claims import DELETE_PROTECTION
from cache.dra.slices import DeviceId
from cache.dra.store import DraCache
from cache.dra.view import released_claims, without_pods
from tests.dra_objects import DRIVER, allocation, claim_obj, device_class_obj, slice_obj

DEVICES = 6
PODS = [f"p{i}" for i in range(4)]
NON_POD = {"resource": "workloads", "apiGroup": "x.io", "name": "w", "uid": "w-uid"}

claims_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "devices": st.sets(st.integers(0, DEVICES - 1), max_size=3),
            "consumers": st.sets(st.sampled_from(PODS), max_size=3),
            "non_pod": st.booleans(),
            "finalizer": st.booleans(),
            "owner": st.none() | st.sampled_from(PODS),
        }
    ),
    max_size=6,
)


def claim(index: int, spec: dict[str, Any]) -> dict[str, Any]:
    obj = claim_obj(f"c{index}", "ns")
    meta = obj["metadata"]
    meta.update(uid=f"claim-{index}", resourceVersion="1")
    if spec["finalizer"]:
        meta["finalizers"] = [DELETE_PROTECTION]
    if spec["owner"]:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": spec["owner"],
                "uid": spec["owner"],
                "controller": True,
            }
        ]
    if spec["devices"]:
        consumers = [{"resource": "pods", "name": p, "uid": p} for p in sorted(spec["consumers"])]
        if spec["non_pod"]:
            consumers.append(NON_POD)
        obj["status"] = {
            "allocation": allocation("n1", tuple(f"gpu-{d}" for d in sorted(spec["devices"]))),
            "reservedFor": consumers,
        }
    return obj


def cache_of(claims: list[dict[str, Any]], kept: set[int]) -> DraCache:
    dra = DraCache()
    dra.apply_slice("ADDED", slice_obj("n1", DEVICES))
    dra.apply_class("ADDED", device_class_obj())
    for obj in claims:
        dra.apply_claim("ADDED", obj)
    dra.keep("ns/other", [DeviceId(DRIVER, "n1", f"gpu-{d}") for d in kept])
    return dra


def controller_releases(spec: dict[str, Any], gone: set[str]) -> bool:
    """What the resourceclaim controller does once the pods `gone` are (its rules,
    written out again here): deallocate a protected claim nobody is left reserved for,
    delete one made for a pod gone."""
    if not spec["devices"] or spec["non_pod"] or not spec["consumers"] <= gone:
        return False
    return spec["owner"] in gone or (bool(spec["consumers"]) and spec["finalizer"])


@settings(max_examples=200, deadline=None)
@given(
    specs=claims_strategy,
    gone=st.sets(st.sampled_from(PODS)),
    kept=st.sets(st.integers(0, DEVICES - 1), max_size=2),
)
def test_the_view_is_the_cache_with_the_released_claims_deallocated(
    specs: list[dict[str, Any]], gone: set[str], kept: set[int]
) -> None:
    objs = [claim(i, spec) for i, spec in enumerate(specs)]
    base = cache_of(objs, kept)
    devices = [DeviceId(DRIVER, "n1", f"gpu-{d}") for d in range(DEVICES)]
    keys = [f"ns/c{i}" for i in range(len(specs))]
    before = (
        base.generation,
        base.node_stamp("n1"),
        [base.holder(d) for d in devices],
        [base.allocation_of(k) for k in keys],
        dict(base.claims),
    )

    released = released_claims(base, frozenset(gone))
    assert released == {k for k, s in zip(keys, specs, strict=True) if controller_releases(s, gone)}
    view = without_pods(base, frozenset(gone))

    fresh_objs = copy.deepcopy(objs)
    for key, obj in zip(keys, fresh_objs, strict=True):
        if key in released:
            obj.pop("status", None)
    fresh = cache_of(fresh_objs, kept)
    assert [view.holder(d) for d in devices] == [fresh.holder(d) for d in devices]
    assert [view.allocation_of(k) for k in keys] == [fresh.allocation_of(k) for k in keys]
    assert {k: view.claims[k] for k in keys} == {k: fresh.claims[k] for k in keys}
    after = (
        base.generation,
        base.node_stamp("n1"),
        [base.holder(d) for d in devices],
        [base.allocation_of(k) for k in keys],
        dict(base.claims),
    )
    assert after == before  # the DraCache is only read
