"""Gang assembly carries the gang's topology requirement (scheduler/gangs/gang.py via
cache/gang_topology.py); a requirement that cannot be followed keeps the gang waiting
and tells every pending member, like the other gang problems."""

from __future__ import annotations

from cache import kueue_topology as kueue
from cache.kai import kai_podgroup_from_api
from cache.kueue_topology import SOURCE
from cache.topology_requirement import TopologyRequirement
from cache.volcano import volcano_podgroup_from_api
from scheduler.gangs.gang import GangIndex, assemble_gangs
from tests.factories import make_pod

REQUIRED = kueue.REQUIRED_ANNOTATION
SLICE_REQUIRED = kueue.SLICE_REQUIRED_ANNOTATION
SLICE_SIZE = kueue.SLICE_SIZE_ANNOTATION

SCHED = "gang-scheduler"
RACK, BLOCK = "example.com/rack", "example.com/block"


def members(count: int, **annotations: str) -> list:
    return [
        make_pod(f"train-{i}", gang="train", min_member=count, annotations=annotations)
        for i in range(count)
    ]


def test_kueue_annotations_on_the_members_are_the_gangs_requirement() -> None:
    gangs = assemble_gangs(members(4, **{REQUIRED: RACK}), {}, SCHED)
    gang = gangs.gangs["default/train"]
    assert gang.topology == TopologyRequirement(required_key=RACK, source=SOURCE)
    assert gang.ready and gang.problems == []


def test_a_kai_podgroup_and_the_members_annotations_merge() -> None:
    group = kai_podgroup_from_api(
        {
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"minMember": 4, "topologyConstraint": {"requiredTopologyLevel": BLOCK}},
        }
    )
    pods = members(4, **{SLICE_REQUIRED: RACK, SLICE_SIZE: "2"})
    gang = assemble_gangs(pods, {"default/train": group}, SCHED).gangs["default/train"]
    assert gang.topology is not None
    assert (gang.topology.required_key, gang.topology.slice_key) == (BLOCK, RACK)
    assert gang.topology.slice_size == 2 and gang.ready


def test_a_podgroup_and_members_that_disagree_keep_the_gang_waiting() -> None:
    group = volcano_podgroup_from_api(
        {
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"minMember": 2, "networkTopology": {"highestTierAllowed": 1}},
        }
    )
    pods = members(2, **{REQUIRED: RACK})
    gang = assemble_gangs(pods, {"default/train": group}, SCHED).gangs["default/train"]
    assert gang.topology is None and not gang.ready
    assert gang.waiting_message is not None
    assert "disagree on the required level" in gang.waiting_message
    assert "topology.kubernetes.io/zone" in gang.waiting_message and RACK in gang.waiting_message
    assert {(p.key, p.reason) for p in gang.problems} == {
        ("default/train-0", "InvalidTopology"),
        ("default/train-1", "InvalidTopology"),
    }


def test_a_slice_larger_than_the_gang_keeps_it_waiting() -> None:
    gang = assemble_gangs(members(2, **{SLICE_REQUIRED: RACK, SLICE_SIZE: "3"}), {}, SCHED).gangs[
        "default/train"
    ]
    assert not gang.ready and gang.topology is None
    problem = f"annotation {SLICE_SIZE} 3 is larger than the gang (2 members)"
    assert problem in (gang.waiting_message or "")


def test_a_refused_podgroup_topology_keeps_the_gang_waiting_and_says_why() -> None:
    group = kai_podgroup_from_api(
        {
            "metadata": {"name": "train", "namespace": "default"},
            "spec": {"minMember": 2, "topologyConstraint": {"requiredTopologyLevel": "a b"}},
        }
    )
    gang = assemble_gangs(members(2), {"default/train": group}, SCHED).gangs["default/train"]
    assert not gang.ready
    assert "spec.topologyConstraint.requiredTopologyLevel 'a b'" in (gang.waiting_message or "")
    assert all(p.reason == "InvalidPodGroup" for p in gang.problems)
    assert all("the gang waits until it is fixed" in p.message for p in gang.problems)


def test_an_unreadable_annotation_refuses_its_pod() -> None:
    gang = assemble_gangs(members(2, **{REQUIRED: "???"}), {}, SCHED).gangs["default/train"]
    assert not gang.ready and gang.placeable == []
    assert any(f"annotation {REQUIRED}" in p.message for p in gang.problems)


def test_the_index_follows_a_member_whose_annotation_changes() -> None:
    index = GangIndex(SCHED)
    first, second = members(2, **{REQUIRED: RACK})
    index.upsert_pod(first)
    index.upsert_pod(second)
    assert index.assemble()[0].gangs["default/train"].topology is not None
    other = make_pod("train-1", gang="train", min_member=2, annotations={REQUIRED: BLOCK})
    index.upsert_pod(other)
    gang = index.assemble()[0].gangs["default/train"]
    assert gang.topology is None and not gang.ready
