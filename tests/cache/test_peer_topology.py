"""The peers' PodGroups read as topology requirements: Volcano's spec.networkTopology
(tiers mapped to node label keys) and KAI's spec.topologyConstraint. A value that
cannot be followed is a refusal naming the field (the gang waits), never a raise and
never read as "no constraint"."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache.kai import kai_podgroup_from_api
from cache.topology_requirement import TopologyRequirement
from cache.volcano import volcano_podgroup_from_api
from cache.volcano_tiers import DEFAULT_VOLCANO_TIERS, VolcanoTiers, tiers_from_hierarchy

TOR = "volcano.sh/tor"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
TIERS = VolcanoTiers(keys=(TOR, ZONE), names=(("rack", 1), ("zone", 2)))
VOLCANO_SOURCE = "PodGroup default/job (scheduling.volcano.sh) spec.networkTopology"


def volcano(network: Any, tiers: VolcanoTiers = TIERS, **spec: Any) -> Any:
    obj = {"metadata": {"name": "job", "namespace": "default"}, "spec": {"minMember": 4, **spec}}
    if network is not ...:
        obj["spec"]["networkTopology"] = network
    return volcano_podgroup_from_api(obj, tiers)


# --- Volcano: tiers ---------------------------------------------------------------------------
def test_tiers_derive_from_the_hierarchy_as_volcanos_label_discoverer_builds_them() -> None:
    # Broadest first, the hostname last: the hostname names the nodes, no tier.
    assert tiers_from_hierarchy(("block", "rack", HOST)).keys == ("rack", "block")
    assert tiers_from_hierarchy(("block", "rack")).keys == ("rack", "block")
    assert DEFAULT_VOLCANO_TIERS.keys == (ZONE,)
    assert tiers_from_hierarchy(()).keys == ()


def test_hard_mode_requires_the_tier_and_prefers_the_tiers_below() -> None:
    group = volcano({"mode": "hard", "highestTierAllowed": 2})
    assert group.topology == TopologyRequirement(
        required_key=ZONE, preferred_keys=(TOR,), source=VOLCANO_SOURCE
    )
    assert group.refusals == ()
    # mode defaults to hard (the CRD's default); a tier by its name.
    assert volcano({"highestTierName": "rack"}).topology == TopologyRequirement(
        required_key=TOR, source=VOLCANO_SOURCE
    )


def test_soft_mode_prefers_every_tier_and_requires_none() -> None:
    group = volcano({"mode": "soft", "highestTierAllowed": 1})
    assert group.topology == TopologyRequirement(preferred_keys=(TOR, ZONE), source=VOLCANO_SOURCE)
    assert volcano({"mode": "soft"}, VolcanoTiers()).topology is None


def test_no_network_topology_states_nothing() -> None:
    group = volcano(...)
    assert (group.topology, group.refusals, group.problems) == (None, (), ())
    assert volcano(None).topology is None


@pytest.mark.parametrize(
    ("network", "named"),
    [
        ({"mode": "hard", "highestTierAllowed": 3}, "asks for tier 3, but no node label key"),
        ({"mode": "hard"}, "spec.networkTopology.mode hard needs highestTierAllowed"),
        ({"mode": "strict", "highestTierAllowed": 1}, "spec.networkTopology.mode must be"),
        ({"highestTierAllowed": 0}, "spec.networkTopology.highestTierAllowed must be"),
        ({"highestTierAllowed": -1}, "spec.networkTopology.highestTierAllowed must be"),
        ({"highestTierAllowed": "1"}, "spec.networkTopology.highestTierAllowed must be"),
        ({"highestTierAllowed": True}, "spec.networkTopology.highestTierAllowed must be"),
        ({"highestTierAllowed": 10**5000}, "spec.networkTopology.highestTierAllowed must be"),
        ({"highestTierAllowed": 1, "highestTierName": "rack"}, "sets both highestTierAllowed"),
        ({"highestTierName": "spine"}, "highestTierName 'spine' names no tier"),
        ({"highestTierName": "x" * 300}, "spec.networkTopology.highestTierName must be"),
        ({"highestTierName": ["rack"]}, "spec.networkTopology.highestTierName must be"),
        ({"highestTierAllowed": 1, "tiers": [1]}, "spec.networkTopology.'tiers' is not supported"),
        ("hard", "spec.networkTopology must be an object"),
        ([1], "spec.networkTopology must be an object"),
    ],
)
def test_volcano_values_that_cannot_be_followed_are_refused(network: Any, named: str) -> None:
    group = volcano(network)
    assert group.topology is None
    assert any(named in refusal for refusal in group.refusals), group.refusals
    assert set(group.refusals) <= set(group.problems)
    assert group.min_member == 4  # the gang's size is still read


def test_a_volcano_subgroup_topology_is_refused_not_ignored() -> None:
    group = volcano(..., subGroupPolicy=[{"name": "a", "networkTopology": {"mode": "hard"}}])
    assert group.refusals == (
        "spec.subGroupPolicy[0].networkTopology (a topology per subgroup) is not supported "
        "by this scheduler",
    )
    assert volcano(..., subGroupPolicy=[{"name": "a", "subGroupSize": 2}]).refusals == ()


# --- KAI ----------------------------------------------------------------------------------------
KAI_SOURCE = "PodGroup default/pg (scheduling.run.ai) spec.topologyConstraint"


def kai(constraint: Any, **spec: Any) -> Any:
    body: dict[str, Any] = {"minMember": 3, **spec}
    if constraint is not ...:
        body["topologyConstraint"] = constraint
    return kai_podgroup_from_api({"metadata": {"name": "pg", "namespace": "default"}, "spec": body})


def test_kai_levels_are_label_keys_read_as_they_are() -> None:
    group = kai(
        {
            "topology": "cluster-topology",
            "requiredTopologyLevel": ZONE,
            "preferredTopologyLevel": "topology.kubernetes.io/rack",
        }
    )
    assert group.topology == TopologyRequirement(
        required_key=ZONE,
        preferred_keys=("topology.kubernetes.io/rack",),
        source=f"{KAI_SOURCE} (Topology 'cluster-topology')",
    )
    assert group.refusals == ()
    # Without a Topology's name the stated level is followed all the same.
    assert kai({"requiredTopologyLevel": ZONE}).topology == TopologyRequirement(
        required_key=ZONE, source=KAI_SOURCE
    )


def test_an_empty_kai_constraint_states_nothing() -> None:
    for constraint in (..., None, {}, {"topology": "t"}, {"requiredTopologyLevel": ""}):
        group = kai(constraint)
        assert (group.topology, group.refusals) == (None, ()), constraint


@pytest.mark.parametrize(
    ("constraint", "named"),
    [
        ({"requiredTopologyLevel": "not a key"}, "spec.topologyConstraint.requiredTopologyLevel"),
        ({"requiredTopologyLevel": 7}, "spec.topologyConstraint.requiredTopologyLevel"),
        ({"preferredTopologyLevel": "/x"}, "spec.topologyConstraint.preferredTopologyLevel"),
        ({"requiredTopologyLevel": "r" * 100_000}, "spec.topologyConstraint.requiredTopologyLevel"),
        ({"topology": 5, "requiredTopologyLevel": ZONE}, "spec.topologyConstraint.topology"),
        ({"requiredTopologyLevel": ZONE, "segmentSize": 4}, "'segmentSize' is not supported"),
        ("rack", "spec.topologyConstraint must be an object"),
    ],
)
def test_kai_values_that_cannot_be_followed_are_refused(constraint: Any, named: str) -> None:
    group = kai(constraint)
    assert group.topology is None
    assert any(named in refusal for refusal in group.refusals), group.refusals
    assert all(len(refusal) < 400 for refusal in group.refusals)
    assert group.min_member == 3


def test_a_kai_subgroup_topology_is_refused_not_ignored() -> None:
    subgroups = [
        {"name": "a", "minMember": 2, "topologyConstraint": {"requiredTopologyLevel": ZONE}}
    ]
    group = kai(..., subGroups=subgroups)
    assert group.refusals == (
        "spec.subGroups[0].topologyConstraint (a topology per subgroup) is not supported by "
        "this scheduler",
    )
    assert kai(..., subGroups=[{"name": "a", "minMember": 2}]).refusals == ()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=20), inner),
    max_leaves=10,
)


@given(
    st.dictionaries(
        st.sampled_from(["mode", "highestTierAllowed", "highestTierName", "other"]), _JSON
    )
    | _JSON
)
def test_any_network_topology_is_read_or_refused_never_raises(network: Any) -> None:
    group = volcano(network)
    assert group.topology is None or not group.refusals


@given(
    st.dictionaries(
        st.sampled_from(["topology", "requiredTopologyLevel", "preferredTopologyLevel", "x"]),
        _JSON,
    )
    | _JSON,
    _JSON,
)
def test_any_topology_constraint_is_read_or_refused_never_raises(
    constraint: Any, subgroups: Any
) -> None:
    group = kai(constraint, subGroups=subgroups)
    assert group.topology is None or not group.refusals or "subGroups" in group.refusals[0]
