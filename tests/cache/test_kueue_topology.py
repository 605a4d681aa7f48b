"""Kueue's TAS annotations read on a pod (cache/kueue_topology.py, through pod_from_api):
each value Kueue's webhook accepts maps onto the requirement; each one it refuses is a
problem on the pod naming the annotation, never a crash and never dropped."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache import kueue_topology as kueue
from cache.kueue_topology import SOURCE, kueue_topology
from cache.pod import pod_from_api
from cache.topology_requirement import TopologyRequirement
from tests.factories import pod_obj

PODSET_GROUP = kueue.PODSET_GROUP_ANNOTATION
PREFERRED = kueue.PREFERRED_ANNOTATION
REQUIRED = kueue.REQUIRED_ANNOTATION
SLICE_CONSTRAINTS = kueue.SLICE_CONSTRAINTS_ANNOTATION
SLICE_REQUIRED = kueue.SLICE_REQUIRED_ANNOTATION
SLICE_SIZE = kueue.SLICE_SIZE_ANNOTATION
UNCONSTRAINED = kueue.UNCONSTRAINED_ANNOTATION

RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"
HOST = "kubernetes.io/hostname"


def read(annotations: dict[str, Any]) -> tuple[TopologyRequirement | None, tuple[str, ...]]:
    pod = pod_from_api(pod_obj("p", gang="g", annotations=annotations))
    return pod.topology, pod.problems


def test_a_pod_without_kueue_annotations_states_nothing() -> None:
    assert read({}) == (None, ())
    assert read({"kueue.x-k8s.io/queue-name": "team"}) == (None, ())


def test_required_preferred_and_slices_map_onto_the_model() -> None:
    assert read({REQUIRED: BLOCK, SLICE_REQUIRED: RACK, SLICE_SIZE: "4"}) == (
        TopologyRequirement(required_key=BLOCK, slice_size=4, slice_key=RACK, source=SOURCE),
        (),
    )
    assert read({PREFERRED: RACK}) == (
        TopologyRequirement(preferred_keys=(RACK,), source=SOURCE),
        (),
    )
    # Slices alone (Kueue admits them without a required level).
    assert read({SLICE_REQUIRED: HOST, SLICE_SIZE: "+2"})[0] == TopologyRequirement(
        slice_size=2, slice_key=HOST, source=SOURCE
    )


def test_one_layer_of_the_json_form_is_a_slice() -> None:
    layers = json.dumps([{"topology": RACK, "size": 8}])
    assert read({REQUIRED: BLOCK, SLICE_CONSTRAINTS: layers}) == (
        TopologyRequirement(required_key=BLOCK, slice_size=8, slice_key=RACK, source=SOURCE),
        (),
    )


def test_unconstrained_and_podset_group_state_no_requirement() -> None:
    assert read({UNCONSTRAINED: "true"}) == (None, ())
    assert read({UNCONSTRAINED: "False"}) == (None, ())
    # A PodSet group shares the level of its members: the gang's requirement already is.
    assert read({REQUIRED: RACK, PODSET_GROUP: "leader-workers"})[0] == TopologyRequirement(
        required_key=RACK, source=SOURCE
    )


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        (
            {REQUIRED: RACK, PREFERRED: BLOCK},
            f"annotations {REQUIRED} and {PREFERRED}",
        ),
        (
            {REQUIRED: RACK, UNCONSTRAINED: "true"},
            f"annotations {REQUIRED} and {UNCONSTRAINED}",
        ),
        ({REQUIRED: "not a key!"}, f"annotation {REQUIRED}"),
        ({REQUIRED: ""}, f"annotation {REQUIRED}"),
        ({PREFERRED: "a/b/c"}, f"annotation {PREFERRED}"),
        ({PREFERRED: "x" * 100_000}, f"annotation {PREFERRED}"),
        ({UNCONSTRAINED: "yes"}, f"annotation {UNCONSTRAINED}"),
        (
            {SLICE_REQUIRED: RACK},
            f"annotation {SLICE_REQUIRED} is set without annotation {SLICE_SIZE}",
        ),
        (
            {SLICE_SIZE: "4"},
            f"annotation {SLICE_SIZE} is set without annotation {SLICE_REQUIRED}",
        ),
        (
            {SLICE_REQUIRED: RACK, SLICE_SIZE: "0"},
            f"annotation {SLICE_SIZE}",
        ),
        (
            {SLICE_REQUIRED: RACK, SLICE_SIZE: "-3"},
            f"annotation {SLICE_SIZE}",
        ),
        (
            {SLICE_REQUIRED: RACK, SLICE_SIZE: "2.5"},
            f"annotation {SLICE_SIZE}",
        ),
        (
            {SLICE_REQUIRED: RACK, SLICE_SIZE: "9" * 5000},
            f"annotation {SLICE_SIZE}",
        ),
        (
            {SLICE_REQUIRED: RACK, SLICE_SIZE: "4294967296"},
            f"annotation {SLICE_SIZE}",
        ),
        (
            {SLICE_REQUIRED: "Bad Key", SLICE_SIZE: "4"},
            f"annotation {SLICE_REQUIRED}",
        ),
        (
            {SLICE_CONSTRAINTS: "[{"},
            f"annotation {SLICE_CONSTRAINTS} is not valid JSON",
        ),
        (
            {SLICE_CONSTRAINTS: "[]"},
            f"annotation {SLICE_CONSTRAINTS} must be a JSON list",
        ),
        (
            {SLICE_CONSTRAINTS: "[" * 3000 + "]" * 3000},
            f"annotation {SLICE_CONSTRAINTS}",
        ),
        (
            {SLICE_CONSTRAINTS: "x" * 10_000},
            f"annotation {SLICE_CONSTRAINTS} must be",
        ),
        (
            {SLICE_CONSTRAINTS: '[{"topology": "r", "size": 0}]'},
            f"{SLICE_CONSTRAINTS}[0].size",
        ),
        (
            {SLICE_CONSTRAINTS: '[{"topology": "r", "size": 1e999}]'},
            f"{SLICE_CONSTRAINTS}[0].size",
        ),
        (
            {SLICE_CONSTRAINTS: '[{"topology": 5, "size": 2}]'},
            f"{SLICE_CONSTRAINTS}[0].topology",
        ),
        (
            {SLICE_CONSTRAINTS: '[{"size": 2}]'},
            f"{SLICE_CONSTRAINTS}[0].topology",
        ),
        (
            {SLICE_CONSTRAINTS: '[{"topology": "r"}]'},
            f"[0].topology is set without annotation {SLICE_CONSTRAINTS}[0].size",
        ),
        (
            {SLICE_CONSTRAINTS: '[{"topology": "r", "size": 2, "x": 1}]'},
            "is not a field Kueue",
        ),
        (
            {SLICE_CONSTRAINTS: "[7]"},
            f"{SLICE_CONSTRAINTS}[0] must be an object",
        ),
        (
            {SLICE_CONSTRAINTS: json.dumps([{"topology": BLOCK, "size": 8}] * 2)},
            "states 2 slice layers; this scheduler places one slice level",
        ),
        (
            {
                SLICE_CONSTRAINTS: '[{"topology": "r", "size": 2}]',
                SLICE_SIZE: "2",
            },
            f"annotation {SLICE_CONSTRAINTS} may not be set with {SLICE_SIZE}",
        ),
    ],
)
def test_what_kueue_refuses_is_refused_on_the_pod_naming_the_annotation(
    annotations: dict[str, Any], named: str
) -> None:
    topology, problems = read(annotations)
    assert topology is None
    assert any(named in problem for problem in problems), problems
    assert all(len(problem) < 600 for problem in problems)  # a value is quoted short


@given(
    st.dictionaries(
        st.sampled_from(
            [
                REQUIRED,
                PREFERRED,
                UNCONSTRAINED,
                SLICE_REQUIRED,
                SLICE_SIZE,
            ]
        ),
        st.one_of(st.text(max_size=80), st.integers(), st.none(), st.lists(st.integers())),
    )
    | st.fixed_dictionaries(
        {SLICE_CONSTRAINTS: st.recursive(st.none() | st.integers() | st.text(), st.lists).map(str)}
    )
)
def test_any_values_give_a_requirement_or_problems_never_both_never_a_raise(
    annotations: dict[str, Any],
) -> None:
    requirement, problems = kueue_topology(annotations)
    assert requirement is None or not problems
    if requirement is not None:
        # What is stated is whole: a slice has both its level and a size of at least 1.
        assert (requirement.slice_key is None) == (requirement.slice_size is None)
        assert requirement.slice_size is None or requirement.slice_size >= 1
