"""The allocator, rule by rule, against kube-scheduler 1.36's structured allocator."""

from __future__ import annotations

from typing import Any

import pytest

from cache.dra.store import DraCache
from policies.dra.allocator import ClaimAllocator
from policies.dra.gang import GangMember, PodAllocation, Tentative, allocate_gang
from tests.dra_builders import (
    DRIVER,
    allocated,
    claim_obj,
    class_obj,
    device,
    exactly,
    first_available,
    kubernetes_138765_objects,
    slice_obj,
    sub,
)

MEM = f'device.attributes["{DRIVER}"].memory'


def cache_with(*objs: dict[str, Any]) -> DraCache:
    cache = DraCache()
    for obj in objs:
        kind = obj["kind"]
        if kind == "ResourceSlice":
            cache.apply_slice("ADDED", obj)
        elif kind == "DeviceClass":
            cache.apply_class("ADDED", obj)
        else:
            cache.apply_claim("ADDED", obj)
    return cache


def member(*claims: str, uid: str = "pod-1", node: str = "node-1", ns: str = "ns") -> GangMember:
    return GangMember(uid, ns, tuple(f"{ns}/{c}" for c in claims), node)


def devices_of(found: PodAllocation | str) -> list[str]:
    assert isinstance(found, PodAllocation), found
    return [r.device for c in found.claims for r in c.allocation.results]


def gpus(n: int, **attrs: Any) -> list[dict[str, Any]]:
    return [device(f"gpu-{i}", **attrs) for i in range(n)]


def test_first_allocation_is_kube_schedulers_first_fit_in_pool_slice_device_order() -> None:
    cache = cache_with(
        slice_obj("b-slice", gpus(2), pool="pool-b"),
        slice_obj("a-slice", [device("x-0"), device("x-1")], pool="pool-a"),
        class_obj(),
        claim_obj("c", [exactly(count=3)]),
    )
    found = ClaimAllocator(cache, {}).allocate(member("c"))
    # Pools sorted by name (pool-a before pool-b), devices as listed.
    assert devices_of(found) == ["x-0", "x-1", "gpu-0"]
    assert isinstance(found, PodAllocation)
    result = found.claims[0].allocation
    assert result.to_api()["devices"]["results"][0] == {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "pool-a",
        "device": "x-0",
    }
    # Node-local devices: the allocation is bound to the node by name.
    assert result.to_api()["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
        ]
    }


def test_class_and_request_selectors_both_apply() -> None:
    cache = cache_with(
        slice_obj("s", [device("a", model="t4", memory=16), device("b", model="a100", memory=80)]),
        class_obj(selectors=(f'device.attributes["{DRIVER}"].model == "a100"',)),
        claim_obj("c", [exactly(selectors=(f"{MEM} >= 40",))]),
        claim_obj("d", [exactly(selectors=(f"{MEM} >= 100",))]),
    )
    allocator = ClaimAllocator(cache, {})
    assert devices_of(allocator.allocate(member("c"))) == ["b"]
    why = allocator.allocate(member("d"))
    assert why == (
        "cannot allocate all claims: claim ns/d request gpu: 0 of 1 devices of class "
        f"{DRIVER} match (2 devices, 0 in use)"
    )


def test_reason_counts_devices_in_use() -> None:
    cache = cache_with(
        slice_obj("s", gpus(3)),
        class_obj(),
        claim_obj(
            "taken",
            [exactly(count=2)],
            allocation=allocated((DRIVER, "node-1", "gpu-0"), (DRIVER, "node-1", "gpu-1")),
        ),
        claim_obj("c", [exactly(count=2)]),
    )
    why = ClaimAllocator(cache, {}).allocate(member("c"))
    assert why == (
        "cannot allocate all claims: claim ns/c request gpu: 1 of 2 devices of class "
        f"{DRIVER} match (3 devices, 2 in use)"
    )


def test_all_mode_takes_every_matching_device_and_fails_if_one_is_in_use() -> None:
    objs = [
        slice_obj("s", gpus(3)),
        class_obj(),
        claim_obj("c", [exactly(count=None, allocationMode="All")]),
    ]
    cache = cache_with(*objs)
    assert devices_of(ClaimAllocator(cache, {}).allocate(member("c"))) == [
        "gpu-0",
        "gpu-1",
        "gpu-2",
    ]
    cache.apply_claim(
        "ADDED", claim_obj("other", [exactly()], allocation=allocated((DRIVER, "node-1", "gpu-1")))
    )
    why = ClaimAllocator(cache, {}).allocate(member("c"))
    assert isinstance(why, str) and "asks for all 3 devices" in why and "1 of them in use" in why


def test_all_mode_refused_while_a_pool_is_incomplete() -> None:
    cache = cache_with(
        slice_obj("s", gpus(2), count=2),  # one of two slices seen
        class_obj(),
        claim_obj("c", [exactly(count=None, allocationMode="All")]),
    )
    why = ClaimAllocator(cache, {}).allocate(member("c"))
    assert isinstance(why, str) and "incomplete: 1 of 2 slices" in why


def test_first_available_takes_the_first_sub_request_that_fits() -> None:
    cache = cache_with(
        slice_obj("s", [device("small", memory=40)]),
        class_obj(),
        claim_obj(
            "c",
            [
                first_available(
                    "gpu",
                    sub("big", selectors=(f"{MEM} >= 80",)),
                    sub("small", selectors=(f"{MEM} >= 40",)),
                )
            ],
            config=[
                {
                    "requests": ["gpu/small"],
                    "opaque": {"driver": DRIVER, "parameters": {"mode": "small"}},
                },
                {
                    "requests": ["gpu/big"],
                    "opaque": {"driver": DRIVER, "parameters": {"mode": "big"}},
                },
            ],
        ),
    )
    found = ClaimAllocator(cache, {}).allocate(member("c"))
    assert isinstance(found, PodAllocation)
    body = found.claims[0].allocation.to_api()
    assert body["devices"]["results"][0]["request"] == "gpu/small"
    # Only the config naming the chosen sub-request is passed through.
    assert body["devices"]["config"] == [
        {
            "source": "FromClaim",
            "requests": ["gpu/small"],
            "opaque": {"driver": DRIVER, "parameters": {"mode": "small"}},
        }
    ]


def test_class_config_then_claim_config_passed_through() -> None:
    cache = cache_with(
        slice_obj("s", gpus(1)),
        class_obj(config=[{"opaque": {"driver": DRIVER, "parameters": {"from": "class"}}}]),
        claim_obj(
            "c",
            [exactly()],
            config=[{"opaque": {"driver": DRIVER, "parameters": {"from": "claim"}}}],
        ),
    )
    found = ClaimAllocator(cache, {}).allocate(member("c"))
    assert isinstance(found, PodAllocation)
    assert found.claims[0].allocation.to_api()["devices"]["config"] == [
        {
            "source": "FromClass",
            "requests": ["gpu"],
            "opaque": {"driver": DRIVER, "parameters": {"from": "class"}},
        },
        {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"from": "claim"}}},
    ]


def test_match_attribute_keeps_devices_on_one_pcie_root() -> None:
    devs = [
        device("gpu-0", pcieRoot="r0"),
        device("gpu-1", pcieRoot="r1"),
        device("gpu-2", pcieRoot="r1"),
    ]
    cache = cache_with(
        slice_obj("s", devs),
        class_obj(),
        claim_obj("c", [exactly(count=2)], constraints=[{"matchAttribute": f"{DRIVER}/pcieRoot"}]),
    )
    assert devices_of(ClaimAllocator(cache, {}).allocate(member("c"))) == ["gpu-1", "gpu-2"]


def test_distinct_attribute() -> None:
    devs = [device("gpu-0", numa=0), device("gpu-1", numa=0), device("gpu-2", numa=1)]
    cache = cache_with(
        slice_obj("s", devs),
        class_obj(),
        claim_obj("c", [exactly(count=2)], constraints=[{"distinctAttribute": f"{DRIVER}/numa"}]),
        claim_obj("d", [exactly(count=3)], constraints=[{"distinctAttribute": f"{DRIVER}/numa"}]),
    )
    allocator = ClaimAllocator(cache, {})
    assert devices_of(allocator.allocate(member("c"))) == ["gpu-0", "gpu-2"]
    why = allocator.allocate(member("d"))
    assert isinstance(why, str) and "distinctAttribute" in why


def test_taint_without_toleration_blocks_and_toleration_allows() -> None:
    tainted = device("gpu-0")
    tainted["taints"] = [{"key": "broken", "value": "ecc", "effect": "NoSchedule"}]
    cache = cache_with(
        slice_obj("s", [tainted]),
        class_obj(),
        claim_obj("c", [exactly()]),
        claim_obj("t", [exactly(tolerations=[{"key": "broken", "operator": "Exists"}])]),
    )
    allocator = ClaimAllocator(cache, {})
    why = allocator.allocate(member("c"))
    assert isinstance(why, str) and "1 with a taint not tolerated" in why
    found = allocator.allocate(member("t"))
    assert devices_of(found) == ["gpu-0"]
    assert isinstance(found, PodAllocation)
    assert found.claims[0].allocation.to_api()["devices"]["results"][0]["tolerations"] == [
        {"key": "broken", "operator": "Exists"}
    ]


def test_admin_access_only_in_a_labelled_namespace_and_takes_devices_in_use() -> None:
    cache = cache_with(
        slice_obj("s", gpus(1)),
        class_obj(),
        claim_obj(
            "user", [exactly()], namespace="team", allocation=allocated((DRIVER, "node-1", "gpu-0"))
        ),
        claim_obj("watch", [exactly(adminAccess=True)], namespace="ops"),
    )
    refused = ClaimAllocator(cache, {"ops": {}}).allocate(member("watch", ns="ops"))
    assert refused == (
        "cannot allocate all claims: claim ops/watch request gpu: adminAccess requires the "
        "label resource.kubernetes.io/admin-access=true on namespace ops"
    )
    labelled = {"ops": {"resource.kubernetes.io/admin-access": "true"}}
    found = ClaimAllocator(cache, labelled).allocate(member("watch", ns="ops"))
    assert devices_of(found) == ["gpu-0"]
    assert isinstance(found, PodAllocation)
    assert found.claims[0].allocation.to_api()["devices"]["results"][0]["adminAccess"] is True
    assert found.taken() == ()  # admin access takes nothing from others


def test_unsupported_fields_are_refused_by_name() -> None:
    conditioned = device("gpu-0")
    conditioned["bindingConditions"] = ["ready"]
    cache = cache_with(slice_obj("s", [conditioned]), class_obj(), claim_obj("c", [exactly()]))
    why = ClaimAllocator(cache, {}).allocate(member("c"))
    assert isinstance(why, str) and "1 not supported" in why


def test_shared_claim_allocated_once_across_the_gang() -> None:
    cache = cache_with(
        slice_obj("s", gpus(2), node=None, pool="fabric", allNodes=True),
        class_obj(),
        claim_obj("shared", [exactly()]),
    )
    allocator = ClaimAllocator(cache, {})
    members = [member("shared", uid=f"pod-{i}", node=f"node-{i}") for i in range(3)]
    found = allocate_gang(allocator, members)
    assert isinstance(found, dict)
    first = found["pod-0"].claims[0]
    assert first.new and first.allocation.node_selector is None  # allNodes: any node
    for uid in ("pod-1", "pod-2"):
        again = found[uid].claims[0]
        assert not again.new and again.allocation == first.allocation
    assert sum(len(p.new_allocations()) for p in found.values()) == 1


def test_claim_allocated_elsewhere_is_reused_only_where_its_node_selector_allows() -> None:
    cache = cache_with(
        slice_obj("s", gpus(1)),
        class_obj(),
        claim_obj("c", [exactly()]),
    )
    allocator = ClaimAllocator(cache, {})
    found = allocator.allocate(member("c"))
    assert isinstance(found, PodAllocation)
    cache.assume(found.new_allocations())
    assert allocator.allocate(member("c", uid="pod-2", node="node-2")) == (
        "cannot allocate all claims: claim ns/c is allocated on devices node node-2 cannot use"
    )
    again = allocator.allocate(member("c", uid="pod-2"))
    assert isinstance(again, PodAllocation) and not again.claims[0].new


def test_kubernetes_138765_gang_revisits_an_earlier_members_choice() -> None:
    """Two pods ask "a big GPU, or else any"; the second only fits the big one. Pod by
    pod (kube-scheduler), the first takes the big GPU and the second fails; the gang
    search moves the first to its next alternative."""
    cache = cache_with(
        *kubernetes_138765_objects(),
    )
    allocator = ClaimAllocator(cache, {})
    one, two = member("flexible", uid="pod-1"), member("strict", uid="pod-2")
    # Greedy, as kube-scheduler: pod 1's first choice blocks pod 2.
    tentative = Tentative()
    first = allocator.allocate(one, tentative)
    assert devices_of(first) == ["big"]
    assert isinstance(first, PodAllocation)
    tentative.take("pod-1", first)
    assert isinstance(allocator.allocate(two, tentative), str)
    # Alternatives in order: the whole GPU, then a part (first the big, then the small).
    options = list(allocator.alternatives(one, Tentative()))
    assert [(o.claims[0].allocation.results[0].request, devices_of(o)[0]) for o in options] == [
        ("gpu/whole", "big"),
        ("gpu/part", "big"),
        ("gpu/part", "small"),
    ]
    found = allocate_gang(allocator, [one, two])
    assert isinstance(found, dict)
    assert devices_of(found["pod-1"]) == ["small"] and devices_of(found["pod-2"]) == ["big"]


def test_gang_of_four_each_two_devices_on_one_pcie_root() -> None:
    roots = ["r0", "r1", "r0", "r1", "r2", "r2", "r3", "r3"]
    devs = [device(f"gpu-{i}", pcieRoot=root) for i, root in enumerate(roots)]
    objs: list[dict[str, Any]] = [slice_obj("s", devs), class_obj()]
    for i in range(4):
        objs.append(
            claim_obj(
                f"w{i}",
                [exactly(count=2)],
                constraints=[{"matchAttribute": f"{DRIVER}/pcieRoot", "requests": ["gpu"]}],
            )
        )
    cache = cache_with(*objs)
    allocator = ClaimAllocator(cache, {})
    found = allocate_gang(allocator, [member(f"w{i}", uid=f"pod-{i}") for i in range(4)])
    assert isinstance(found, dict)
    used: list[str] = []
    for uid, choice in found.items():
        names = devices_of(choice)
        assert len(names) == 2
        assert len({roots[int(n.split("-")[1])] for n in names}) == 1, (uid, names)
        used += names
    assert len(set(used)) == 8
    # A fifth member finds nothing and says why.
    cache.apply_claim("ADDED", claim_obj("w4", [exactly(count=2)]))
    five = allocate_gang(allocator, [member(f"w{i}", uid=f"pod-{i}") for i in range(5)])
    assert isinstance(five, str) and five.startswith("cannot allocate all claims: claim ns/w4")


def test_search_is_bounded() -> None:
    # Six devices with distinct NUMA nodes out of 24 spread over five: impossible, and
    # the search would try thousands of combinations before knowing it.
    devs = [device(f"gpu-{i}", numa=i % 5) for i in range(24)]
    cache = cache_with(
        slice_obj("s", devs),
        class_obj(),
        claim_obj("c", [exactly(count=6)], constraints=[{"distinctAttribute": f"{DRIVER}/numa"}]),
    )
    why = ClaimAllocator(cache, {}, max_steps=500).allocate(member("c"))
    assert why == (
        "cannot allocate all claims: device search bound reached (500 devices tried on node node-1)"
    )


def test_cel_errors_refuse_with_who_wrote_the_selector() -> None:
    cache = cache_with(
        slice_obj("s", gpus(1)),
        class_obj(),
        claim_obj("c", [exactly(selectors=(f'device.attributes["{DRIVER}"].missing == 1',))]),
        claim_obj("bad", [exactly(selectors=("device.driver ==",))]),
    )
    allocator = ClaimAllocator(cache, {})
    why = allocator.allocate(member("c"))
    assert isinstance(why, str) and "claim ns/c request gpu: selector #0: CEL runtime error" in why
    why = allocator.allocate(member("bad"))
    assert isinstance(why, str) and "CEL compile error" in why


@pytest.mark.parametrize("missing", ["claim", "class"])
def test_missing_objects_refuse(missing: str) -> None:
    objs = [slice_obj("s", gpus(1))]
    if missing != "class":
        objs.append(class_obj())
    if missing != "claim":
        objs.append(claim_obj("c", [exactly()]))
    why = ClaimAllocator(cache_with(*objs), {}).allocate(member("c"))
    assert isinstance(why, str) and "does not exist" in why
