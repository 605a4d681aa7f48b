"""A gang's one requirement from its PodGroup and its members (cache/gang_topology.py):
merged field by field; a disagreement is a problem naming both sources, never a pick."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from cache.gang_topology import gang_topology
from cache.pod import PodInfo
from cache.podgroup import PodGroupInfo
from cache.topology_checks import requirement_problems
from cache.topology_requirement import TopologyRequirement

RACK, BLOCK, CLIQUE = "example.com/rack", "example.com/block", "nvidia.com/gpu.clique"
GROUP = "PodGroup ns/g (scheduling.run.ai) spec.topologyConstraint"
KUEUE = "Kueue annotations (kueue.x-k8s.io/podset-*)"


def pod(name: str, topology: TopologyRequirement | None = None) -> PodInfo:
    return PodInfo(uid=name, namespace="ns", name=name, gang_name="g", topology=topology)


def group(topology: TopologyRequirement | None) -> PodGroupInfo:
    return PodGroupInfo(namespace="ns", name="g", min_member=4, topology=topology)


def test_nothing_stated_is_no_requirement() -> None:
    assert gang_topology(None, [pod("a"), pod("b")]) == (None, [])
    assert gang_topology(group(None), [pod("a")], 4) == (None, [])


def test_one_source_is_the_gangs_requirement() -> None:
    stated = TopologyRequirement(required_key=RACK, source=GROUP)
    assert gang_topology(group(stated), [pod("a"), pod("b")], 4) == (stated, [])
    kueue = TopologyRequirement(required_key=RACK, source=KUEUE)
    # Members that state nothing follow those that do.
    assert gang_topology(None, [pod("a", kueue), pod("b")], 4) == (kueue, [])


def test_the_podgroup_and_the_pods_merge_field_by_field() -> None:
    required = TopologyRequirement(required_key=BLOCK, source=GROUP)
    slices = TopologyRequirement(slice_size=4, slice_key=CLIQUE, source=KUEUE)
    merged, problems = gang_topology(group(required), [pod("a", slices)], 8)
    assert problems == []
    assert merged == TopologyRequirement(
        required_key=BLOCK,
        slice_size=4,
        slice_key=CLIQUE,
        source=f"{GROUP} and its members' {KUEUE}",
    )
    # The same stated twice is the PodGroup's, unchanged.
    same = replace(required, source=KUEUE)
    assert gang_topology(group(required), [pod("a", same)], 8) == (required, [])


def test_the_podgroup_and_the_pods_disagreeing_is_a_problem_naming_both() -> None:
    merged, problems = gang_topology(
        group(TopologyRequirement(required_key=RACK, source=GROUP)),
        [pod("a", TopologyRequirement(required_key=BLOCK, source=KUEUE))],
        4,
    )
    assert merged is None
    assert problems == [
        f"{GROUP} and its members' {KUEUE} disagree on the required level: "
        f"one {RACK} required against one {BLOCK} required"
    ]


def test_members_disagreeing_is_a_problem_naming_them() -> None:
    rack = TopologyRequirement(required_key=RACK, source=KUEUE)
    block = TopologyRequirement(required_key=BLOCK, source=KUEUE)
    merged, problems = gang_topology(None, [pod("a", rack), pod("b", rack), pod("c", block)], 3)
    assert merged is None
    assert problems == [
        f"its members state different topologies: pod ns/a states one {RACK} required "
        f"({KUEUE}); pod ns/c states one {BLOCK} required ({KUEUE})"
    ]


def test_a_slice_larger_than_the_gang_is_refused() -> None:
    slices = TopologyRequirement(slice_size=9, slice_key=CLIQUE, source=KUEUE)
    merged, problems = gang_topology(None, [pod("a", slices)], 8)
    assert merged is None
    assert problems == ["the slice size 9 is larger than the gang (8 members)"]
    assert gang_topology(None, [pod("a", slices)], 9)[0] == slices


_KEYS = st.sampled_from([None, RACK, BLOCK, CLIQUE])
_REQUIREMENTS = st.builds(
    lambda required, preferred, sliced, source: TopologyRequirement(
        required_key=required,
        preferred_keys=preferred,
        slice_size=sliced[0] if sliced else None,
        slice_key=sliced[1] if sliced else None,
        source=source,
    ),
    _KEYS,
    st.sampled_from([(), (RACK,), (CLIQUE, RACK)]),
    st.none() | st.tuples(st.integers(1, 6), st.sampled_from([RACK, CLIQUE])),
    st.sampled_from([GROUP, KUEUE]),
)


@given(
    st.none() | _REQUIREMENTS,
    st.lists(st.none() | _REQUIREMENTS, max_size=5),
    st.none() | st.integers(1, 8),
)
def test_whatever_is_stated_is_kept_or_refused_never_dropped(
    from_group: TopologyRequirement | None,
    from_pods: list[TopologyRequirement | None],
    size: int | None,
) -> None:
    pods = [pod(f"p{i}", stated) for i, stated in enumerate(from_pods)]
    merged, problems = gang_topology(group(from_group), pods, size)
    assert (merged is None) or not problems
    # What the gang gets is never a contradiction (the checks every source gets).
    assert merged is None or requirement_problems(merged, size) == []
    stated = [s for s in [from_group, *from_pods] if s is not None]
    if problems or not stated:
        return
    assert merged is not None
    for source in stated:
        # Every field any source states is in the gang's requirement, as stated.
        if source.required_key is not None:
            assert merged.required_key == source.required_key
        if source.preferred_keys:
            assert merged.preferred_keys == source.preferred_keys
        if source.slice_key is not None:
            assert (merged.slice_size, merged.slice_key) == (source.slice_size, source.slice_key)
