"""The topology model's label-key check: what a node could carry as a label key."""

import pytest

from cache.topology_requirement import TopologyRequirement, label_key_problem


@pytest.mark.parametrize(
    "key",
    [
        "topology.kubernetes.io/rack",
        "kubernetes.io/hostname",
        "rack",
        "nvidia.com/gpu.clique",
        "a_b.c-d",
    ],
)
def test_label_keys_nodes_carry_are_accepted(key: str) -> None:
    assert label_key_problem(key, "spec.x") is None


@pytest.mark.parametrize(
    "key",
    [
        "",
        None,
        7,
        "/rack",
        "Example.com/rack",
        "a/b/c",
        "-rack",
        "x" * 64,
        "ex..ample.com/r",
        "rack/",
    ],
)
def test_other_keys_are_refused_naming_the_field(key: object) -> None:
    problem = label_key_problem(key, "spec.x")
    assert problem is not None and problem.startswith("spec.x")


def test_only_required_levels_and_slices_constrain() -> None:
    assert not TopologyRequirement(preferred_keys=("rack",)).constrains
    assert TopologyRequirement(required_key="rack").constrains
    assert TopologyRequirement(slice_size=4, slice_key="clique").constrains
