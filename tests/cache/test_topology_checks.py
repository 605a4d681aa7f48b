"""One set of contradiction checks for every source of a topology requirement
(cache/topology_checks.py): the same contradiction is refused in the same words,
naming the source's own fields, whether this project's PodGroup, KAI's, Volcano's,
Kueue's annotations or a gang's PodGroup and members together state it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from cache import kueue_topology as kueue
from cache.gang_topology import gang_topology
from cache.kai import kai_podgroup_from_api
from cache.native_gang import native_podgroup_from_api
from cache.pod import pod_from_api
from cache.podgroup_topology import read_topology
from cache.volcano import volcano_podgroup_from_api
from cache.volcano_tiers import VolcanoTiers
from tests.factories import pod_obj
from tests.integrations.controllers import native_podgroup_obj

ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
RACK = "topology.kubernetes.io/rack"


def preferred_not_narrower(preferred: str, required: str) -> str:
    """The words for a preferred level as broad as the required one."""
    return (
        f"^{re.escape(preferred)} names {ZONE}, not narrower than the required "
        f"{re.escape(required)} {HOST}: the whole gang is inside one {HOST} already$"
    )


def slice_not_narrower(slice_key: str, required: str) -> str:
    return (
        f"^{re.escape(slice_key)} {ZONE} is not a level narrower than {re.escape(required)} "
        f"{HOST}: a slice must sit inside the gang's domain$"
    )


def native_group(key: str) -> Any:
    obj = native_podgroup_obj("g", 4)
    obj["spec"]["schedulingConstraints"] = {"topology": [{"key": key}]}
    return native_podgroup_from_api(obj)


def kueue_pods(annotations: dict[str, str], count: int = 4) -> list[Any]:
    return [pod_from_api(pod_obj(f"g-{i}", annotations=annotations)) for i in range(count)]


def merged_problems(podgroup: Any, pods: list[Any], size: int = 4) -> list[str]:
    requirement, problems = gang_topology(podgroup, pods, size)
    assert requirement is None
    return problems


NATIVE_KEY = "spec.schedulingConstraints.topology[0].key"
KUEUE_PREFERRED = f"annotation {kueue.PREFERRED_ANNOTATION}"
KUEUE_SLICE_KEY = f"annotation {kueue.SLICE_REQUIRED_ANNOTATION}"
KUEUE_SLICE_SIZE = f"annotation {kueue.SLICE_SIZE_ANNOTATION}"


def own_crd(topology: dict[str, Any]) -> list[str]:
    requirement, refusals = read_topology({"topology": topology}, 4, "PodGroup ns/g")
    assert requirement is None
    return refusals


def kai_constraint(constraint: dict[str, Any]) -> list[str]:
    obj = {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 4}}
    obj["spec"]["topologyConstraint"] = constraint
    group = kai_podgroup_from_api(obj)
    assert group.topology is None
    return list(group.refusals)


def volcano_tier(tiers: tuple[str, ...], network: dict[str, Any]) -> list[str]:
    obj = {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 4}}
    obj["spec"]["networkTopology"] = network
    group = volcano_podgroup_from_api(obj, VolcanoTiers(keys=tiers))
    assert group.topology is None
    return list(group.refusals)


@pytest.mark.parametrize(
    ("refusals", "pattern"),
    [
        pytest.param(
            lambda: own_crd({"requiredKey": HOST, "preferredKeys": [ZONE]}),
            preferred_not_narrower("spec.topology.preferredKeys", "spec.topology.requiredKey"),
            id="own-crd",
        ),
        pytest.param(
            lambda: kai_constraint({"requiredTopologyLevel": HOST, "preferredTopologyLevel": ZONE}),
            preferred_not_narrower(
                "spec.topologyConstraint.preferredTopologyLevel",
                "spec.topologyConstraint.requiredTopologyLevel",
            ),
            id="kai",
        ),
        pytest.param(
            # An operator's tiers in the wrong order: tier 1 broader than tier 2.
            lambda: volcano_tier((ZONE, HOST), {"mode": "hard", "highestTierAllowed": 2}),
            preferred_not_narrower(
                "spec.networkTopology.highestTierAllowed (the label keys of the tiers below 2)",
                "spec.networkTopology.highestTierAllowed (tier 2's label key)",
            ),
            id="volcano",
        ),
        pytest.param(
            # Each source sound alone; the gang's PodGroup and its members contradict.
            lambda: merged_problems(
                native_group(HOST), kueue_pods({kueue.PREFERRED_ANNOTATION: ZONE})
            ),
            preferred_not_narrower(KUEUE_PREFERRED, NATIVE_KEY),
            id="native-with-kueue-members",
        ),
    ],
)
def test_a_preferred_level_as_broad_as_the_required_one_is_refused_alike(
    refusals: Any, pattern: str
) -> None:
    found = refusals()
    assert len(found) == 1, found
    assert re.match(pattern, found[0]), found[0]


@pytest.mark.parametrize(
    ("refusals", "pattern"),
    [
        pytest.param(
            lambda: own_crd({"requiredKey": HOST, "sliceSize": 2, "sliceKey": ZONE}),
            slice_not_narrower("spec.topology.sliceKey", "spec.topology.requiredKey"),
            id="own-crd",
        ),
        pytest.param(
            lambda: kueue.kueue_topology(
                {
                    kueue.REQUIRED_ANNOTATION: HOST,
                    kueue.SLICE_REQUIRED_ANNOTATION: ZONE,
                    kueue.SLICE_SIZE_ANNOTATION: "2",
                }
            )[1],
            slice_not_narrower(KUEUE_SLICE_KEY, f"annotation {kueue.REQUIRED_ANNOTATION}"),
            id="kueue",
        ),
        pytest.param(
            lambda: merged_problems(
                native_group(HOST),
                kueue_pods(
                    {kueue.SLICE_REQUIRED_ANNOTATION: ZONE, kueue.SLICE_SIZE_ANNOTATION: "2"}
                ),
            ),
            slice_not_narrower(KUEUE_SLICE_KEY, NATIVE_KEY),
            id="native-with-kueue-members",
        ),
    ],
)
def test_a_slice_level_as_broad_as_the_required_one_is_refused_alike(
    refusals: Any, pattern: str
) -> None:
    found = refusals()
    assert len(found) == 1, found
    assert re.match(pattern, found[0]), found[0]


def test_a_slice_larger_than_the_gang_is_refused_alike_whoever_states_it() -> None:
    slices = {"requiredKey": RACK, "sliceSize": 5, "sliceKey": "nvidia.com/gpu.clique"}
    own = own_crd(slices)
    members = kueue_pods(
        {kueue.SLICE_REQUIRED_ANNOTATION: "nvidia.com/gpu.clique", kueue.SLICE_SIZE_ANNOTATION: "5"}
    )
    from_members = merged_problems(None, members)
    assert own == ["spec.topology.sliceSize 5 is larger than the gang (4 members)"]
    assert from_members == [f"{KUEUE_SLICE_SIZE} 5 is larger than the gang (4 members)"]


def test_a_slice_level_without_its_size_is_refused_alike() -> None:
    own = own_crd({"sliceKey": RACK})
    annotations = kueue.kueue_topology({kueue.SLICE_REQUIRED_ANNOTATION: RACK})[1]
    assert own == [
        "spec.topology.sliceKey is set without spec.topology.sliceSize; set both or neither"
    ]
    assert annotations == [
        f"{KUEUE_SLICE_KEY} is set without {KUEUE_SLICE_SIZE}; set both or neither"
    ]
