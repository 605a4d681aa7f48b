"""NetworkTopology: a gang's members prefer the domains the gang already uses."""

from __future__ import annotations

import pytest

from policies.interface import GangContext
from policies.scores.network_topology import NetworkTopology, domain_of
from tests.factories import make_node, make_pod

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
pod = make_pod("worker")


def test_domain_of_reads_the_label_or_none() -> None:
    node = make_node("n1", labels={ZONE: "a"})
    assert domain_of(node, ZONE) == "a"
    assert domain_of(node, HOST) == "n1"
    assert domain_of(node, "topology.kubernetes.io/region") is None


def test_identity_and_default_keys() -> None:
    score = NetworkTopology()
    assert score.name == "network-topology"
    assert score.candidate_order is None
    assert score.keys == (ZONE, HOST)


def test_first_member_is_neutral_everywhere() -> None:
    score = NetworkTopology()
    for node in (make_node("n1", labels={ZONE: "a"}), make_node("bare")):
        assert score.score(pod, node, (), GangContext()) == 50.0


def test_same_host_beats_same_zone_beats_elsewhere() -> None:
    score = NetworkTopology()
    gang = GangContext()
    gang.record(make_node("n1", labels={ZONE: "a"}), score.keys)
    same_host = score.score(pod, make_node("n1", labels={ZONE: "a"}), (), gang)
    same_zone = score.score(pod, make_node("n2", labels={ZONE: "a"}), (), gang)
    elsewhere = score.score(pod, make_node("n3", labels={ZONE: "b"}), (), gang)
    assert same_host == 100.0
    assert same_zone == pytest.approx(200 / 3)
    assert elsewhere == 0.0


def test_a_missing_label_does_not_match() -> None:
    score = NetworkTopology()
    gang = GangContext()
    gang.record(make_node("n1", labels={ZONE: "a"}), score.keys)
    # Same host name but no zone label: only the host level matches.
    assert score.score(pod, make_node("n1"), (), gang) == pytest.approx(100 / 3)


def test_any_domain_already_used_matches() -> None:
    score = NetworkTopology()
    gang = GangContext()
    gang.record(make_node("n1", labels={ZONE: "a"}), score.keys)
    gang.record(make_node("n2", labels={ZONE: "b"}), score.keys)
    assert score.score(pod, make_node("n4", labels={ZONE: "b"}), (), gang) == pytest.approx(200 / 3)
    assert score.score(pod, make_node("n5", labels={ZONE: "c"}), (), gang) == 0.0


def test_a_broader_level_outweighs_all_narrower_ones_together() -> None:
    keys = ("region", "rack", HOST)
    score = NetworkTopology(keys)
    gang = GangContext()
    gang.record(make_node("n1", labels={"region": "eu", "rack": "r1"}), keys)
    region_only = score.score(pod, make_node("n2", labels={"region": "eu", "rack": "r9"}), (), gang)
    rack_and_host = score.score(
        pod, make_node("n1", labels={"region": "us", "rack": "r1"}), (), gang
    )
    assert region_only == pytest.approx(100 * 4 / 7)
    assert rack_and_host == pytest.approx(100 * 3 / 7)
    assert region_only > rack_and_host
