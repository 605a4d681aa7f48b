"""The what-if view of the devices (cache/dra/view.py), against random claims taking
devices whole, sharing devices (consumable capacity) and drawing partitions from a
counter set, with random devices kept for a gang: it answers as a DraCache built afresh
with the released claims deallocated would (who holds each device, what is left of
each device's capacity, what the counter set gives, and what the allocator finds on
it), and it never changes the DraCache it reads."""

from __future__ import annotations

import copy
import uuid
from itertools import islice
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.dra.claims import DELETE_PROTECTION
from cache.dra.slices import DeviceId, PoolId
from cache.dra.store import DraCache
from cache.dra.view import DeviceView, released_claims, without_pods
from policies.dra.allocator import ClaimAllocator
from policies.dra.gang import GangMember, Tentative
from tests.dra_builders import (
    DRIVER,
    class_obj,
    counter_slice,
    device,
    exactly,
    partition,
    shared_device,
    slice_obj,
)

NODE = "n1"
POOL = PoolId(DRIVER, NODE)
COUNTER_SET = "gpu-x"
KIND = f'device.attributes["{DRIVER}"].kind'
WHOLE = ["gpu-0", "gpu-1", "gpu-2"]
SHARED = ["shared-0", "shared-1", "shared-part"]  # allow multiple allocations (40 each)
PARTS = {"part-0": "80", "part-1": "40", "part-2": "40", "shared-part": "40"}  # draw of 80
NAMES = [*WHOLE, "shared-0", "shared-1", "part-0", "part-1", "part-2", "shared-part"]
PODS = [f"p{i}" for i in range(4)]
NON_POD = {"resource": "workloads", "apiGroup": "x.io", "name": "w", "uid": "w-uid"}


def layout() -> list[dict[str, Any]]:
    devices = []
    for name in NAMES:
        body = shared_device(name, memory="40") if name in SHARED else device(name)
        if name in PARTS:
            body["consumesCounters"] = partition(name, COUNTER_SET, memory=PARTS[name])[
                "consumesCounters"
            ]
        kind = "shared" if name in SHARED else "part" if name in PARTS else "whole"
        body["attributes"] = {"kind": {"string": kind}}
        devices.append(body)
    return [
        counter_slice("counters", {COUNTER_SET: {"memory": "80"}}, node=NODE, count=2),
        slice_obj("devices", devices, node=NODE, count=2),
        class_obj(),
    ]


claims_strategy = st.lists(
    st.fixed_dictionaries(
        {
            # (device, memory its share consumes: shared devices only)
            "results": st.lists(
                st.tuples(st.sampled_from(NAMES), st.sampled_from(["10", "20", "30"])),
                max_size=3,
            ),
            "consumers": st.sets(st.sampled_from(PODS), max_size=3),
            "non_pod": st.booleans(),
            "finalizer": st.booleans(),
            "owner": st.none() | st.sampled_from(PODS),
        }
    ),
    max_size=6,
)

# What a pending claim asks on top: a device whole, a share of a shared device, or a
# partition (a share of the shared partition among them).
wanted_strategy = st.sampled_from(
    [
        exactly(selectors=(f'{KIND} == "whole"',)),
        exactly(selectors=(f'{KIND} == "shared"',), capacity={"requests": {"memory": "20"}}),
        exactly(selectors=(f'{KIND} == "shared"',), capacity={"requests": {"memory": "40"}}),
        exactly(selectors=(f'{KIND} == "part"',)),
        exactly(count=2, selectors=(f'{KIND} != "whole"',)),
    ]
)


def results_of(index: int, picks: list[tuple[str, str]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    whole: set[str] = set()
    for position, (name, memory) in enumerate(picks):
        entry: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": name}
        if name in SHARED:
            entry["shareID"] = str(uuid.UUID(int=index * 16 + position + 1))
            entry["consumedCapacity"] = {"memory": memory}
        elif name in whole:
            continue  # a device whole once per claim
        else:
            whole.add(name)
        results.append(entry)
    return results


def claim(index: int, spec: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"c{index}",
        "namespace": "ns",
        "uid": f"claim-{index}",
        "resourceVersion": "1",
    }
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
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": [exactly()]}},
    }
    results = results_of(index, spec["results"])
    if results:
        consumers = [{"resource": "pods", "name": p, "uid": p} for p in sorted(spec["consumers"])]
        if spec["non_pod"]:
            consumers.append(NON_POD)
        obj["status"] = {"allocation": {"devices": {"results": results}}, "reservedFor": consumers}
    return obj


def pending_claim(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "want", "namespace": "ns", "uid": "want", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [request]}},
    }


def cache_of(claims: list[dict[str, Any]], kept: set[str]) -> DraCache:
    dra = DraCache()
    for obj in layout():
        if obj["kind"] == "ResourceSlice":
            dra.apply_slice("ADDED", obj)
        else:
            dra.apply_class("ADDED", obj)
    for obj in claims:
        dra.apply_claim("ADDED", obj)
    dra.keep("ns/other", [DeviceId(DRIVER, NODE, name) for name in kept])
    return dra


def controller_releases(spec: dict[str, Any], gone: set[str]) -> bool:
    """What the resourceclaim controller does once the pods `gone` are (its rules,
    written out again here): deallocate a protected claim nobody is left reserved for,
    delete one made for a pod gone."""
    if not spec["results"] or spec["non_pod"] or not spec["consumers"] <= gone:
        return False
    return spec["owner"] in gone or (bool(spec["consumers"]) and spec["finalizer"])


def answers(dra: DeviceView, keys: list[str]) -> tuple[Any, ...]:
    """Everything the planner reads of the devices, and what the allocator finds."""
    devices = [DeviceId(DRIVER, NODE, name) for name in NAMES]
    allocator = ClaimAllocator(dra, {})
    asking = GangMember("pod-want", "ns", ("ns/want",), NODE)
    found = list(islice(allocator.alternatives(asking, Tentative()), 8))
    return (
        [dra.holder(d) for d in devices],
        [dra.use(d) for d in devices],
        dra.counters_drawn(POOL),
        [dra.allocation_of(k) for k in keys],
        {k: dra.claims[k] for k in keys},
        found,
        allocator.why_none(asking, Tentative()) if not found else "",
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=claims_strategy,
    gone=st.sets(st.sampled_from(PODS)),
    kept=st.sets(st.sampled_from(NAMES), max_size=2),
    wanted=wanted_strategy,
)
def test_the_view_is_the_cache_with_the_released_claims_deallocated(
    specs: list[dict[str, Any]], gone: set[str], kept: set[str], wanted: dict[str, Any]
) -> None:
    objs = [claim(i, spec) for i, spec in enumerate(specs)] + [pending_claim(wanted)]
    base = cache_of(objs, kept)
    keys = [f"ns/c{i}" for i in range(len(specs))] + ["ns/want"]
    before = (base.generation, base.node_stamp(NODE), answers(base, keys))

    released = released_claims(base, frozenset(gone))
    expected = {k for k, s in zip(keys, specs, strict=False) if controller_releases(s, gone)}
    assert released == expected
    view = without_pods(base, frozenset(gone))

    fresh_objs = copy.deepcopy(objs)
    for key, obj in zip(keys, fresh_objs, strict=True):
        if key in released:
            obj.pop("status", None)
    fresh = cache_of(fresh_objs, kept)
    assert answers(view, keys) == answers(fresh, keys)
    # The DraCache is only read.
    assert (base.generation, base.node_stamp(NODE), answers(base, keys)) == before
