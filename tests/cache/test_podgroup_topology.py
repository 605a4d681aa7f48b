"""This project's PodGroup topology fields (cache/podgroup_topology.py): read into the
gang-level model, and every hostile value refused with its field named, never read as
"no constraint"."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache.pod import pod_from_api
from cache.podgroup import podgroup_from_api
from cache.topology_checks import broader_or_same
from cache.topology_requirement import TopologyRequirement
from scheduler.gangs.gang import build_gang
from tests.factories import gang_pods

RACK = "topology.kubernetes.io/rack"
CLIQUE = "nvidia.com/gpu.clique"
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def group(topology: object, min_member: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"minMember": min_member, "topology": topology},
    }


def test_every_field_is_read() -> None:
    read = podgroup_from_api(
        group(
            {
                "requiredKey": RACK,
                "preferredKeys": [CLIQUE, HOST],
                "sliceSize": 4,
                "sliceKey": CLIQUE,
            }
        )
    )
    assert read.topology == TopologyRequirement(
        required_key=RACK,
        preferred_keys=(CLIQUE, HOST),
        slice_size=4,
        slice_key=CLIQUE,
        source="PodGroup default/train spec.topology",
    )
    assert read.refusals == () and read.problems == ()


def test_no_topology_is_no_requirement() -> None:
    for topology in (None, {}):
        read = podgroup_from_api(group(topology))
        assert read.topology is None and read.refusals == ()


@pytest.mark.parametrize(
    ("topology", "named"),
    [
        ("rack", "spec.topology must be an object"),
        ({"requiredKey": ""}, "spec.topology.requiredKey"),
        ({"requiredKey": "a b"}, "spec.topology.requiredKey"),
        ({"requiredKey": "-rack"}, "spec.topology.requiredKey"),
        ({"requiredKey": "x" * 64}, "spec.topology.requiredKey"),
        ({"requiredKey": ["rack"]}, "spec.topology.requiredKey"),
        ({"requiredKey": "Bad.Prefix/rack"}, "invalid prefix"),
        ({"preferredKeys": "rack"}, "spec.topology.preferredKeys must be a list"),
        ({"preferredKeys": ["rack", 3]}, "spec.topology.preferredKeys[1]"),
        ({"preferredKeys": [None]}, "spec.topology.preferredKeys[0]"),
        ({"preferredKeys": ["r"] * 9}, "at most 8"),
        ({"preferredKeys": [CLIQUE, CLIQUE]}, "names nvidia.com/gpu.clique twice"),
        ({"requiredKey": RACK, "preferredKeys": [RACK]}, "not narrower than the required"),
        ({"requiredKey": HOST, "preferredKeys": [ZONE]}, "not narrower than the required"),
        ({"sliceSize": 0, "sliceKey": CLIQUE}, "sliceSize must be a positive"),
        ({"sliceSize": -4, "sliceKey": CLIQUE}, "sliceSize must be a positive"),
        ({"sliceSize": "4", "sliceKey": CLIQUE}, "sliceSize must be a positive"),
        ({"sliceSize": True, "sliceKey": CLIQUE}, "sliceSize must be a positive"),
        ({"sliceSize": 2**40, "sliceKey": CLIQUE}, "sliceSize must be a positive"),
        ({"sliceSize": 9, "sliceKey": CLIQUE}, "larger than the gang (8 members)"),
        ({"sliceSize": 4}, "sliceSize is set without spec.topology.sliceKey"),
        ({"sliceKey": CLIQUE}, "sliceKey is set without spec.topology.sliceSize"),
        ({"requiredKey": RACK, "sliceSize": 4, "sliceKey": RACK}, "not a level narrower"),
        ({"requiredKey": HOST, "sliceSize": 4, "sliceKey": CLIQUE}, "not a level narrower"),
        (
            {"requiredKey": ZONE, "sliceSize": 4, "sliceKey": "topology.kubernetes.io/region"},
            "not a level narrower",
        ),
        ({"requiredKey": RACK, "required": RACK}, "'required' is not a field"),
    ],
)
def test_hostile_values_are_refused_by_name(topology: object, named: str) -> None:
    read = podgroup_from_api(group(topology))
    assert read.topology is None
    assert read.refusals and any(named in text for text in read.refusals), read.refusals
    assert set(read.refusals) <= set(read.problems)


def test_a_refused_topology_keeps_the_gang_waiting_on_its_pods() -> None:
    pods = [pod_from_api(p) for p in gang_pods("train", 8, gpus=1)]
    read = podgroup_from_api(group({"sliceSize": 0, "sliceKey": CLIQUE}))
    gang = build_gang("default/train", pods, read, "gang-scheduler")
    assert gang is not None and not gang.ready
    assert gang.waiting_message is not None and "spec.topology.sliceSize" in gang.waiting_message
    events = [p for p in gang.problems if p.reason == "InvalidPodGroup"]
    assert events and "the gang waits until it is fixed" in events[0].message


def test_levels_known_to_nest_are_ordered() -> None:
    assert broader_or_same(ZONE, HOST) and broader_or_same(RACK, HOST)
    assert broader_or_same(HOST, RACK) is False
    assert broader_or_same("topology.kubernetes.io/region", ZONE)
    assert broader_or_same(RACK, CLIQUE) is None  # a site's own levels: not knowable


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=70),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=16,
)


@given(
    st.dictionaries(
        st.sampled_from(["requiredKey", "preferredKeys", "sliceSize", "sliceKey", "x"]), _json
    )
    | _json
)
def test_any_value_is_a_requirement_or_a_refusal(topology: object) -> None:
    read = podgroup_from_api(group(topology))
    # An empty list of preferred levels states nothing, as written.
    stated = isinstance(topology, dict) and any(v not in (None, []) for v in topology.values())
    if read.topology is None and stated:
        assert read.refusals, topology  # never a silent "no constraint"
    if read.topology is not None:
        assert read.refusals == ()
