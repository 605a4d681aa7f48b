"""Counting devices before a revisit (policies/dra/shortage.py) never says "cannot"
where the search finds allocations for every member: over random nodes, devices held
by others, requests (counts, All, firstAvailable, selectors, matchAttribute, admin
access) and claims shared by members, each "cannot" is checked against an exhaustive
search."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from cache.dra.store import DraCache
from policies.dra.allocator import ClaimAllocator
from policies.dra.gang import GangMember, Tentative
from policies.dra.shortage import too_few_devices
from tests.dra_builders import (
    DRIVER,
    allocated,
    claim_obj,
    class_obj,
    device,
    exactly,
    first_available,
    slice_obj,
    sub,
)

MEMORY = f'device.attributes["{DRIVER}"].memory'
NODES = ("n0", "n1")
SAME_ROOT = {"matchAttribute": f"{DRIVER}/root"}


def _cache(*objs: dict[str, Any]) -> DraCache:
    cache = DraCache()
    for obj in objs:
        if obj["kind"] == "ResourceSlice":
            cache.apply_slice("ADDED", obj)
        elif obj["kind"] == "DeviceClass":
            cache.apply_class("ADDED", obj)
        else:
            cache.apply_claim("ADDED", obj)
    return cache


def _all_fit(
    allocator: ClaimAllocator, members: Sequence[GangMember], tentative: Tentative
) -> bool:
    """Whether some allocation of every member exists, in order (an unbounded search)."""
    if not members:
        return True
    first, rest = members[0], members[1:]
    for choice in allocator.alternatives(first, tentative):
        tentative.take(first.uid, choice)
        try:
            if _all_fit(allocator, rest, tentative):
                return True
        finally:
            tentative.release(first.uid)
    return False


requests = st.one_of(
    st.builds(
        lambda count, memory: exactly(count=count, selectors=(f"{MEMORY} >= {memory}",)),
        st.integers(1, 3),
        st.sampled_from((16, 40, 80)),
    ),
    st.just(exactly(count=None, allocationMode="All", selectors=(f"{MEMORY} >= 80",))),
    st.builds(
        lambda big, small: first_available(
            "gpu",
            sub("big", count=big, selectors=(f"{MEMORY} >= 80",)),
            sub("small", count=small),
        ),
        st.integers(1, 3),
        st.integers(1, 2),
    ),
    st.just(exactly(count=1, adminAccess=True)),
)
members = st.lists(
    st.tuples(
        st.integers(0, len(NODES) - 1),  # the member's node
        requests,
        st.booleans(),  # its devices on one root
        st.booleans(),  # it also uses the gang's shared claim
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(
    memories=st.lists(st.lists(st.sampled_from((16, 40, 80)), max_size=5), min_size=2, max_size=2),
    running=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 4)), max_size=4),
    others=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 4)), max_size=2),
    gang=members,
    admin_namespace=st.booleans(),
    shared_count=st.integers(1, 2),
)
def test_a_shortage_is_never_claimed_where_every_member_fits(
    memories: list[list[int]],
    running: list[tuple[int, int]],
    others: list[tuple[int, int]],
    gang: list[tuple[int, dict[str, Any], bool, bool]],
    admin_namespace: bool,
    shared_count: int,
) -> None:
    objs: list[dict[str, Any]] = [class_obj()]
    for node, sizes in zip(NODES, memories, strict=True):
        devices = [device(f"gpu-{i}", memory=m, root=f"r{i // 2}") for i, m in enumerate(sizes)]
        objs.append(slice_obj(f"s-{node}", devices, node=node))
    for number, (node, index) in enumerate(running):
        if index < len(memories[node]):
            status = allocated((DRIVER, NODES[node], f"gpu-{index}"))
            objs.append(claim_obj(f"run-{number}", [exactly()], allocation=status))
    objs.append(claim_obj("shared", [exactly(count=shared_count)]))
    for number, (_, request, same_root, _) in enumerate(gang):
        constraints = [SAME_ROOT] if same_root else None
        objs.append(claim_obj(f"c{number}", [request], constraints=constraints))
    cache = _cache(*objs)
    labels = {"ns": {"resource.kubernetes.io/admin-access": "true"}} if admin_namespace else {}
    allocator = ClaimAllocator(cache, labels)
    # Devices earlier members outside the search hold (one-device claims of their own).
    tentative = Tentative()
    for number, (node, index) in enumerate(others):
        cache.apply_claim("ADDED", claim_obj(f"other-{number}", [exactly()]))
        holder = GangMember(f"other-{number}", "ns", (f"ns/other-{number}",), NODES[node])
        for choice in allocator.alternatives(holder, tentative):
            if index == 0:
                tentative.take(holder.uid, choice)
                break
            index -= 1
    sequence = [
        GangMember(
            f"m{number}",
            "ns",
            (f"ns/c{number}", "ns/shared") if shared else (f"ns/c{number}",),
            NODES[node],
        )
        for number, (node, _, _, shared) in enumerate(gang)
    ]
    short = too_few_devices(allocator, sequence, tentative)
    event(f"shortage: {short}")
    if short:
        assert not _all_fit(allocator, sequence, tentative)


def test_members_on_a_node_needing_more_devices_than_are_free_there_are_short() -> None:
    """Three one-GPU members and a two-GPU one on a node with four free GPUs (of five, one
    held by a running claim): no search can place them, and the count says so; with
    one member fewer it says they might fit."""
    cache = _cache(
        class_obj(),
        slice_obj("s", [device(f"gpu-{i}", memory=80) for i in range(5)], node="n0"),
        claim_obj("run", [exactly()], allocation=allocated((DRIVER, "n0", "gpu-4"))),
        *(claim_obj(f"c{i}", [exactly()]) for i in range(3)),
        claim_obj("pair", [exactly(count=2)]),
    )
    allocator = ClaimAllocator(cache, {})
    ones = [GangMember(f"m{i}", "ns", (f"ns/c{i}",), "n0") for i in range(3)]
    pair = GangMember("p", "ns", ("ns/pair",), "n0")
    assert too_few_devices(allocator, [*ones, pair], Tentative())
    assert not _all_fit(allocator, [*ones, pair], Tentative())
    assert not too_few_devices(allocator, [*ones[:2], pair], Tentative())
    assert _all_fit(allocator, [*ones[:2], pair], Tentative())


def test_a_claim_shared_by_members_is_counted_once() -> None:
    """Two members sharing one two-GPU claim on a node with two GPUs: both fit (the
    second reuses the first's allocation), so no shortage."""
    cache = _cache(
        class_obj(),
        slice_obj("s", [device(f"gpu-{i}", memory=80) for i in range(2)], node="n0"),
        claim_obj("both", [exactly(count=2)]),
    )
    allocator = ClaimAllocator(cache, {})
    sequence = [GangMember(f"m{i}", "ns", ("ns/both",), "n0") for i in range(2)]
    assert not too_few_devices(allocator, sequence, Tentative())
    assert _all_fit(allocator, sequence, Tentative())


def test_admin_access_says_nothing() -> None:
    """A request with admin access takes devices in use: the count cannot tell."""
    cache = _cache(
        class_obj(),
        slice_obj("s", [device("gpu-0", memory=80)], node="n0"),
        claim_obj("run", [exactly()], allocation=allocated((DRIVER, "n0", "gpu-0"))),
        claim_obj("watch", [exactly(adminAccess=True)]),
    )
    allocator = ClaimAllocator(cache, {"ns": {"resource.kubernetes.io/admin-access": "true"}})
    sequence = [GangMember("m0", "ns", ("ns/watch",), "n0")]
    assert not too_few_devices(allocator, sequence, Tentative())
    assert _all_fit(allocator, sequence, Tentative())
