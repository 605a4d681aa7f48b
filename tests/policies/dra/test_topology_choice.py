"""The allocator's topology preference among devices that all satisfy a request
(policies/dra/topology.py): tight sets first, kube-scheduler's order without facts,
never a change in which allocations exist."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cache.dra.store import DraCache
from cache.dra.topology import NVLINK_CLIQUE_LABEL, PCIE_ROOT, DeviceTopology
from policies.dra import allocator as allocator_module
from policies.dra.allocator import ClaimAllocator
from policies.dra.gang import GangMember, PodAllocation, Tentative, allocate_gang
from policies.dra.topology import pair_score, preferred_set, set_score
from tests.dra_builders import DRIVER, claim_obj, class_obj, device, exactly, slice_obj


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


def on_roots(*roots: str | None, numa: tuple[int | None, ...] = ()) -> list[dict[str, Any]]:
    """Devices gpu-0.. with the standard PCIe root attribute (None: none published)."""
    found = []
    for i, root in enumerate(roots):
        attrs: dict[str, Any] = {} if root is None else {PCIE_ROOT: root}
        if i < len(numa) and numa[i] is not None:
            attrs["numaNode"] = numa[i]
        found.append(device(f"gpu-{i}", **attrs))
    return found


def member(*claims: str, uid: str = "pod-1", labels: dict[str, str] | None = None) -> GangMember:
    return GangMember(uid, "ns", tuple(f"ns/{c}" for c in claims), "node-1", labels or {})


def devices_of(found: PodAllocation | str) -> list[str]:
    assert isinstance(found, PodAllocation), found
    return [r.device for c in found.claims for r in c.allocation.results]


def test_two_device_request_gets_both_from_one_pcie_root() -> None:
    """Four free devices, listed alternating between two roots: kube-scheduler's first
    fit takes gpu-0 and gpu-1 (two roots); the preference takes one root's pair."""
    cache = cache_with(
        slice_obj("s", on_roots("pci0000:00", "pci0000:80", "pci0000:00", "pci0000:80")),
        class_obj(),
        claim_obj("c", [exactly(count=2)]),
    )
    assert devices_of(ClaimAllocator(cache, {}).allocate(member("c"))) == ["gpu-0", "gpu-2"]


def test_without_topology_facts_the_order_is_kube_schedulers() -> None:
    cache = cache_with(
        slice_obj("s", on_roots(None, None, None, None)),
        class_obj(),
        claim_obj("c", [exactly(count=2)]),
    )
    assert devices_of(ClaimAllocator(cache, {}).allocate(member("c"))) == ["gpu-0", "gpu-1"]


def test_one_device_goes_where_it_breaks_the_fewest_tight_pairs() -> None:
    """A lone device on its root is taken before one of a well-joined pair."""
    cache = cache_with(
        slice_obj("s", on_roots("pci0000:00", "pci0000:00", "pci0000:80")),
        class_obj(),
        claim_obj("c", [exactly(count=1)]),
    )
    assert devices_of(ClaimAllocator(cache, {}).allocate(member("c"))) == ["gpu-2"]


def test_a_pods_second_request_joins_its_first() -> None:
    """Two requests of one device each: the second goes next to the first."""
    cache = cache_with(
        slice_obj("s", on_roots("pci0000:00", "pci0000:80", "pci0000:80", "pci0000:00")),
        class_obj(),
        claim_obj("c", [exactly("a", count=1), exactly("b", count=1)]),
    )
    found = devices_of(ClaimAllocator(cache, {}).allocate(member("c")))
    roots = {"gpu-0": 0, "gpu-3": 0, "gpu-1": 80, "gpu-2": 80}
    assert len({roots[d] for d in found}) == 1, found


def test_gang_members_on_one_node_fill_a_root_before_opening_another() -> None:
    """Two members of two devices each on a node of two roots with four devices each:
    the second member takes the rest of the first member's root."""
    roots = ["pci0000:00", "pci0000:80"] * 4
    cache = cache_with(
        slice_obj("s", on_roots(*roots)),
        class_obj(),
        claim_obj("a", [exactly(count=2)]),
        claim_obj("b", [exactly(count=2)]),
    )
    found = allocate_gang(
        ClaimAllocator(cache, {}), [member("a", uid="pod-a"), member("b", uid="pod-b")]
    )
    assert isinstance(found, dict), found
    taken = devices_of(found["pod-a"]) + devices_of(found["pod-b"])
    assert {roots[int(d.split("-")[1])] for d in taken} == {"pci0000:00"}, taken


def test_match_attribute_still_decides_hard() -> None:
    """The preferred pair (gpu-0, gpu-1: one PCIe root) spans two NUMA nodes; the
    claim's matchAttribute on NUMA refuses it, and a pair on one NUMA node is taken."""
    layout = on_roots("pci0000:00", "pci0000:00", "pci0000:80", "pci0000:80", numa=(0, 1, 1, 1))
    cache = cache_with(
        slice_obj("s", layout),
        class_obj(),
        claim_obj(
            "c",
            [exactly(count=2)],
            constraints=[{"matchAttribute": f"{DRIVER}/numaNode"}],
        ),
    )
    found = devices_of(ClaimAllocator(cache, {}).allocate(member("c")))
    assert len(found) == 2 and "gpu-0" not in found, found


def test_pair_scores_follow_the_link_levels() -> None:
    nvlink = DeviceTopology("pci0000:00", 0, "clique")
    assert pair_score(nvlink, DeviceTopology("pci0000:80", 1, "clique")) == 100
    assert pair_score(DeviceTopology("r", 0), DeviceTopology("r", 1)) == 30
    assert pair_score(DeviceTopology("r", 0), DeviceTopology("s", 0)) == 20
    assert pair_score(DeviceTopology("r", 0), DeviceTopology("s", 1)) == 10
    assert pair_score(DeviceTopology(), DeviceTopology()) == 10


def test_set_score_rates_a_tight_pair_over_a_split_one_and_unknown_as_neutral() -> None:
    tops = [DeviceTopology(root) for root in ("r0", "r1", "r0", "r1")]
    free = [True] * 4
    tight, split = set_score(tops, free, [0, 2]), set_score(tops, free, [0, 1])
    assert tight is not None and split is not None and tight > split
    assert set_score([DeviceTopology()] * 4, free, [0, 1]) is None
    assert set_score(tops, free, []) is None


def test_clique_label_makes_every_nvidia_pair_nvlink() -> None:
    """On a multi-node NVLink node all GPUs share the domain: no root is preferred."""
    tops = (DeviceTopology("r0", None, "c"), DeviceTopology("r1", None, "c"))
    assert pair_score(*tops) == 100
    assert NVLINK_CLIQUE_LABEL == "nvidia.com/gpu.clique"


def test_preferred_set_states_no_preference_without_facts_or_choice() -> None:
    assert preferred_set((DeviceTopology(),) * 4, 2) is None
    assert preferred_set((DeviceTopology("r0"),) * 2, 2) is None
    assert preferred_set((DeviceTopology("r0"),) * 2, 0) is None


def test_large_free_sets_use_the_bounded_greedy() -> None:
    tops = tuple(DeviceTopology(f"r{i % 4}") for i in range(40))
    chosen = preferred_set(tops, 5)
    assert chosen is not None and len(chosen) == 5
    assert len({tops[i].pcie_root for i in chosen}) <= 2


# --- the preference never changes feasibility ---------------------------------------------
_roots = st.sampled_from([None, "pci0000:00", "pci0000:40", "pci0000:80"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    roots=st.lists(_roots, min_size=1, max_size=7),
    numa=st.lists(st.one_of(st.none(), st.integers(0, 1)), max_size=7),
    members=st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from(["", "root", "numa"])),
        min_size=1,
        max_size=3,
    ),
    used=st.sets(st.integers(0, 6), max_size=2),
)
def test_a_gang_placeable_without_the_preference_is_placeable_with_it(
    roots: list[str | None],
    numa: list[int | None],
    members: list[tuple[int, str]],
    used: set[int],
) -> None:
    constraint = {"root": PCIE_ROOT, "numa": f"{DRIVER}/numaNode"}
    objs: list[dict[str, Any]] = [
        slice_obj("s", on_roots(*roots, numa=tuple(numa))),
        class_obj(),
    ]
    for i, (count, kind) in enumerate(members):
        constraints = [{"matchAttribute": constraint[kind]}] if kind else None
        objs.append(claim_obj(f"c{i}", [exactly(count=count)], constraints=constraints))
    for j in sorted(used):
        if j < len(roots):
            allocation = {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": "node-1", "device": f"gpu-{j}"}
                    ]
                }
            }
            objs.append(claim_obj(f"other-{j}", [exactly()], allocation=allocation))
    cache = cache_with(*objs)
    gang = [member(f"c{i}", uid=f"pod-{i}") for i in range(len(members))]

    with_preference = allocate_gang(ClaimAllocator(cache, {}), gang)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(allocator_module, "preferred_set", lambda *args: None)
        without = allocate_gang(ClaimAllocator(cache, {}), gang)
    assert isinstance(with_preference, dict) == isinstance(without, dict), (
        with_preference,
        without,
    )
    if isinstance(with_preference, dict):
        taken = [d for choice in with_preference.values() for d in choice.taken()]
        assert len(taken) == len(set(taken))
        assert not any(cache.holder(d) for d in taken)


def test_the_allocator_reads_node_labels_for_the_clique() -> None:
    """NVIDIA devices on a clique-labelled node all share one domain: with every pair
    NVLink, the order is kube-scheduler's again."""
    nvidia = "gpu.nvidia.com"
    devs = on_roots("pci0000:00", "pci0000:80", "pci0000:00", "pci0000:80")
    cache = cache_with(
        slice_obj("s", devs, driver=nvidia),
        class_obj(nvidia, selectors=(f'device.driver == "{nvidia}"',)),
        claim_obj("c", [exactly(device_class=nvidia, count=2)]),
    )
    alone = devices_of(ClaimAllocator(cache, {}).allocate(member("c")))
    assert alone == ["gpu-0", "gpu-2"]
    labelled = member("c", labels={NVLINK_CLIQUE_LABEL: "cluster.1"})
    assert devices_of(ClaimAllocator(cache, {}).allocate(labelled)) == ["gpu-0", "gpu-1"]
    assert Tentative().held() == {}
