"""Invariants of the DRA model over random event streams (hypothesis)."""

from __future__ import annotations

import contextlib
import copy
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import AssumeError
from cache.dra.claims import Allocation, DeviceResult
from cache.dra.store import DraCache
from tests.dra_builders import DRIVER, allocated, claim_obj, device, exactly, slice_obj

DEVICES = [f"gpu-{i}" for i in range(4)]
NODES = ["node-1", "node-2"]


def charged_twice(cache: DraCache) -> list[Any]:
    """Devices taken by two claims (allocations written by the API or held)."""
    counts: Counter[Any] = Counter()
    for key in cache.claims:
        allocation = cache.allocation_of(key)
        if allocation is not None:
            counts.update(set(allocation.charged()))
    return [d for d, n in counts.items() if n > 1]


def allocation_of(names: list[str]) -> Allocation:
    return Allocation(results=tuple(DeviceResult("gpu", DRIVER, "node-1", n) for n in names))


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["assume", "forget", "written", "unknown", "confirm", "event", "delete", "readd"]
        ),
        st.integers(0, 4),
        st.lists(st.sampled_from(DEVICES), min_size=1, max_size=3),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_no_device_is_allocated_twice(ops: list[tuple[str, int, list[str]]]) -> None:
    cache = DraCache()
    version = 1
    for i in range(5):
        cache.apply_claim("ADDED", claim_obj(f"c{i}", [exactly()], rv="1"))
    for op, which, names in ops:
        key = f"ns/c{which}"
        version += 1
        if op == "assume":
            with contextlib.suppress(AssumeError):
                cache.assume([(key, allocation_of(names))])
        elif op == "forget":
            cache.forget(key)
        elif op == "written":
            cache.mark_written(key)
        elif op == "unknown":
            cache.mark_unknown(key)
        elif op == "confirm":
            cache.confirm(key)
        elif op == "event":
            # The API shows what this scheduler held for the claim (its status write).
            held = cache.allocation_of(key)
            body = None if held is None else held.to_api()
            cache.apply_claim(
                "MODIFIED", claim_obj(f"c{which}", [exactly()], rv=str(version), allocation=body)
            )
        elif op == "delete":
            cache.apply_claim("DELETED", claim_obj(f"c{which}", [exactly()], rv=str(version)))
        else:
            cache.apply_claim(
                "ADDED", claim_obj(f"c{which}", [exactly()], rv=str(version), uid=f"u{version}")
            )
        assert charged_twice(cache) == []
        # What `taken` reports is exactly what the claims hold.
        held = {d for k in cache.claims if (a := cache.allocation_of(k)) for d in a.charged()}
        assert set(cache.taken()) == held


# --- relist --------------------------------------------------------------------------------
def _slices() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda name, node, pool, gen, count, devs: slice_obj(
            name, [device(d) for d in devs], node=node, pool=pool, generation=gen, count=count
        ),
        st.sampled_from(["s1", "s2", "s3", "s4"]),
        st.sampled_from(NODES),
        st.sampled_from(["p1", "p2"]),
        st.integers(1, 3),
        st.integers(1, 2),
        st.lists(st.sampled_from(DEVICES), max_size=3, unique=True),
    )


def _claims() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda name, devs: claim_obj(
            name,
            [exactly()],
            allocation=allocated(*[(DRIVER, "p1", d) for d in devs]) if devs else None,
        ),
        st.sampled_from(["a", "b", "c"]),
        st.lists(st.sampled_from(DEVICES), max_size=2, unique=True),
    )


def state(cache: DraCache) -> Any:
    return (
        cache.slices,
        cache.classes,
        cache.claims,
        cache.taken(),
        cache.pools(),
        [cache.node_devices(node, {}) for node in NODES],
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), _slices()), max_size=12),
    st.lists(st.tuples(st.booleans(), _claims()), max_size=8),
    st.lists(_slices(), max_size=5),
    st.lists(_claims(), max_size=4),
)
def test_a_relist_leaves_the_store_equal_to_a_fresh_one(
    slice_events: list[tuple[bool, dict[str, Any]]],
    claim_events: list[tuple[bool, dict[str, Any]]],
    listed_slices: list[dict[str, Any]],
    listed_claims: list[dict[str, Any]],
) -> None:
    cache = DraCache()
    version = 0
    for deleted, obj in slice_events:
        version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(version)
        cache.apply_slice("DELETED" if deleted else "ADDED", obj)
    for deleted, obj in claim_events:
        version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(version)
        cache.apply_claim("DELETED" if deleted else "ADDED", obj)
    cache.node_devices("node-1", {})  # remembered before the relist
    # The list is newer than every event seen (as a relist after 410 Gone is).
    for obj in listed_slices + listed_claims:
        version += 1
        obj["metadata"]["resourceVersion"] = str(version)
    cache.relist("slices", listed_slices)
    cache.relist("claims", listed_claims)
    fresh = DraCache()
    fresh.relist("slices", copy.deepcopy(listed_slices))
    fresh.relist("claims", copy.deepcopy(listed_claims))
    assert state(cache) == state(fresh)
