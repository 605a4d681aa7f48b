"""A gang's topology requirement in the planner (scheduler/planner/required_domain.py):
a required level holds the whole gang in one domain or it waits, bound members fix the
domain, nodes without the label are out, the domain chosen keeps large domains for
large gangs; preferred levels gather the gang in the fewest domains."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.topology_requirement import TopologyRequirement
from policies.profile import build_profile
from scheduler.gangs.gang import Gang, assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, PlanResult, Unschedulable
from tests.factories import node_obj, pod_obj

RACK = "topology.kubernetes.io/rack"
CLIQUE = "nvidia.com/gpu.clique"
REQUIRED = TopologyRequirement(required_key=RACK, source="test")


def node(name: str, gpus: int, **labels: str) -> dict[str, Any]:
    return node_obj(name, gpus=gpus, labels=labels)


def in_rack(name: str, rack: str, gpus: int) -> dict[str, Any]:
    return node_obj(name, gpus=gpus, labels={RACK: rack})


def members(count: int, gpus: int, bound: dict[int, str] | None = None) -> list[dict[str, Any]]:
    pods = [pod_obj(f"g-{i}", gang="g", min_member=count, gpus=gpus) for i in range(count)]
    for index, where in (bound or {}).items():
        pods[index]["spec"]["nodeName"] = where
    return pods


def plan(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    topology: TopologyRequirement | None = REQUIRED,
    planner: Planner | None = None,
) -> PlanResult:
    cache = ClusterCache()
    for obj in nodes:
        cache.apply_node(EventType.ADDED, obj)
    for obj in pods:
        cache.apply_pod(EventType.ADDED, obj)
    gang: Gang = assemble_gangs(cache.pods(), cache.podgroups(), "gang-scheduler").gangs[
        "default/g"
    ]
    gang.topology = topology
    return (planner or Planner(build_profile())).plan(gang, cache.snapshot())


def racks_of(result: PlanResult, nodes: list[dict[str, Any]]) -> set[str]:
    assert isinstance(result, Plan), result
    rack = {n["metadata"]["name"]: n["metadata"]["labels"].get(RACK) for n in nodes}
    return {rack[p.node] for p in result.placements}


def test_the_gang_goes_whole_into_the_one_rack_that_holds_it() -> None:
    nodes = [in_rack("a1", "r1", 4), in_rack("a2", "r1", 4)]
    nodes += [in_rack(f"b{i}", "r2", 4) for i in range(4)]
    result = plan(nodes, members(4, gpus=4))
    assert racks_of(result, nodes) == {"r2"}


def test_split_over_two_racks_it_waits_and_says_why() -> None:
    nodes = [in_rack("a", "r1", 8), in_rack("b", "r2", 8)]
    result = plan(nodes, members(3, gpus=4))
    assert isinstance(result, Unschedulable)
    assert result.message.startswith(
        f"gang default/g: needs 12 GPUs in one {RACK}; the fullest rack has 8 free"
    ), result.message
    assert all(RACK in why for why in result.reasons.values())


def test_nodes_without_the_label_are_no_domain() -> None:
    nodes = [node("free", 16), in_rack("a", "r1", 4)]
    result = plan(nodes, members(2, gpus=4))
    assert isinstance(result, Unschedulable)
    assert "the fullest rack has 4 free" in result.message
    unlabelled = plan([node("free", 16)], members(2, gpus=4))
    assert isinstance(unlabelled, Unschedulable)
    assert f"no node carries the label {RACK}" in unlabelled.message


def test_one_member_gangs_are_held_to_the_level_too() -> None:
    nodes = [node("free", 16), in_rack("a", "r1", 4)]
    result = plan(nodes, members(1, gpus=4))
    assert racks_of(result, nodes) == {"r1"}


def test_bound_members_fix_the_domain() -> None:
    # r2 is the tighter fit for the two members left, but two are bound in r1.
    nodes = [in_rack("a1", "r1", 8), in_rack("a2", "r1", 8), in_rack("b1", "r2", 4)]
    pods = members(4, gpus=2, bound={0: "a1", 1: "a1"})
    result = plan(nodes, pods)
    assert racks_of(result, nodes) == {"r1"}


def test_bound_members_in_a_full_domain_keep_the_gang_waiting() -> None:
    nodes = [in_rack("a1", "r1", 4), in_rack("b1", "r2", 16)]
    result = plan(nodes, members(4, gpus=2, bound={0: "a1", 1: "a1"}))
    assert isinstance(result, Unschedulable)
    assert f"in {RACK}=r1, where its bound members run; it has 0 free" in result.message


def test_bound_members_split_over_domains_keep_the_gang_waiting() -> None:
    nodes = [in_rack("a1", "r1", 8), in_rack("b1", "r2", 8)]
    result = plan(nodes, members(3, gpus=2, bound={0: "a1", 1: "b1"}))
    assert isinstance(result, Unschedulable)
    assert "its bound members are split" in result.message


def test_the_tightest_domain_that_holds_the_gang_is_chosen() -> None:
    nodes = [in_rack(f"a{i}", "big", 8) for i in range(4)]
    nodes += [in_rack(f"b{i}", "small", 8) for i in range(2)]
    result = plan(nodes, members(2, gpus=8))
    assert racks_of(result, nodes) == {"small"}


def test_learnt_demand_keeps_a_domain_whole_for_the_gangs_that_need_it() -> None:
    # Gangs of 16 GPUs keep coming: "exact" (16 free) is the only rack that holds one
    # whole besides "roomy" (40); an 8-GPU gang best-fit would break "exact".
    nodes = [in_rack(f"e{i}", "exact", 8) for i in range(2)]
    nodes += [in_rack(f"r{i}", "roomy", 8) for i in range(5)]
    planner = Planner(build_profile())
    planner.domain_choice = "learnt"
    for i in range(20):
        planner.domain_demand.observe(f"default/past-{i}", RACK, 16_000)
    result = plan(nodes, members(1, gpus=8), planner=planner)
    assert racks_of(result, nodes) == {"roomy"}
    fresh = plan(nodes, members(1, gpus=8))  # no history: best fit
    assert racks_of(fresh, nodes) == {"exact"}


def test_preferred_level_gathers_the_gang_in_fewest_domains() -> None:
    nodes = [node("a", 4, **{CLIQUE: "c1"}), node("b", 4, **{CLIQUE: "c2"})]
    nodes.append(node("c", 4, **{CLIQUE: "c2"}))
    preferred = TopologyRequirement(preferred_keys=(CLIQUE,), source="test")
    result = plan(nodes, members(2, gpus=4), topology=preferred)
    assert isinstance(result, Plan)
    assert {p.node for p in result.placements} == {"b", "c"}
    # A preference never makes the gang wait.
    split = plan(nodes[:2], members(2, gpus=4), topology=preferred)
    assert isinstance(split, Plan)


def test_preferred_levels_inside_the_required_domain() -> None:
    nodes = [
        node("a", 4, **{RACK: "r1", CLIQUE: "c1"}),
        node("b", 4, **{RACK: "r1", CLIQUE: "c2"}),
        node("c", 4, **{RACK: "r1", CLIQUE: "c2"}),
        node("d", 16, **{CLIQUE: "c2"}),  # in no rack
    ]
    both = TopologyRequirement(required_key=RACK, preferred_keys=(CLIQUE,), source="test")
    result = plan(nodes, members(2, gpus=4), topology=both)
    assert isinstance(result, Plan)
    assert {p.node for p in result.placements} == {"b", "c"}


def test_every_slice_of_members_goes_into_one_clique() -> None:
    # Two cliques of two 4-GPU nodes in one rack; four 2-GPU members in slices of 2
    # could fill one node each, but each slice must be inside one clique.
    nodes = [
        node("a1", 4, **{RACK: "r1", CLIQUE: "c1"}),
        node("a2", 2, **{RACK: "r1", CLIQUE: "c2"}),
        node("b1", 2, **{RACK: "r1", CLIQUE: "c3"}),
        node("b2", 4, **{RACK: "r1", CLIQUE: "c4"}),
    ]
    sliced = TopologyRequirement(required_key=RACK, slice_size=2, slice_key=CLIQUE, source="test")
    result = plan(nodes, members(4, gpus=2), topology=sliced)
    assert isinstance(result, Plan), result
    where = {p.pod_uid.removeprefix("uid-default-"): p.node for p in result.placements}
    clique = {"a1": "c1", "a2": "c2", "b1": "c3", "b2": "c4"}
    # Member order g-0..g-3: slices {g-0, g-1} and {g-2, g-3}.
    assert clique[where["g-0"]] == clique[where["g-1"]]
    assert clique[where["g-2"]] == clique[where["g-3"]]


def test_a_last_slice_shorter_than_the_others_needs_room_only_for_its_members() -> None:
    # Three members in slices of 2: {g-0, g-1} and {g-2}. Clique c1 holds two, c2 one:
    # room for one whole slice of 2 only, and that is all the gang needs.
    nodes = [node("a", 2, **{RACK: "r1", CLIQUE: "c1"}), node("b", 1, **{RACK: "r1", CLIQUE: "c2"})]
    sliced = TopologyRequirement(required_key=RACK, slice_size=2, slice_key=CLIQUE, source="test")
    result = plan(nodes, members(3, gpus=1), topology=sliced)
    assert isinstance(result, Plan), result
    where = {p.pod_uid.removeprefix("uid-default-"): p.node for p in result.placements}
    assert where == {"g-0": "a", "g-1": "a", "g-2": "b"}


def test_with_a_member_bound_the_slices_of_the_members_left_are_placed() -> None:
    # g-0 runs in c1; the three left are sliced {g-1, g-2}, {g-3} (bound members are not
    # re-sliced): c2 holds the first, c1 or c3 the second.
    nodes = [
        node("s1", 2, **{RACK: "s", CLIQUE: "c1"}),
        node("s2", 3, **{RACK: "s", CLIQUE: "c2"}),
        node("s3", 1, **{RACK: "s", CLIQUE: "c3"}),
    ]
    sliced = TopologyRequirement(required_key=RACK, slice_size=2, slice_key=CLIQUE, source="test")
    result = plan(nodes, members(4, gpus=1, bound={0: "s1"}), topology=sliced)
    assert isinstance(result, Plan), result
    where = {p.pod_uid.removeprefix("uid-default-"): p.node for p in result.placements}
    assert where["g-1"] == where["g-2"] == "s2"


def test_a_slice_no_clique_holds_keeps_the_gang_waiting() -> None:
    nodes = [node(f"n{i}", 2, **{CLIQUE: f"c{i}"}) for i in range(4)]
    sliced = TopologyRequirement(slice_size=2, slice_key=CLIQUE, source="test")
    result = plan(nodes, members(4, gpus=2), topology=sliced)
    assert isinstance(result, Unschedulable)
    assert f"needs every 2 consecutive members in one {CLIQUE}" in result.message
    unsliced = plan(nodes, members(4, gpus=2), topology=None)
    assert isinstance(unsliced, Plan)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["r1", "r2", "r3", None]), st.integers(1, 8)),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 6),
    st.integers(1, 4),
    st.lists(st.integers(0, 7), max_size=2),
)
def test_a_plan_never_leaves_the_one_domain(
    layout: list[tuple[str | None, int]], count: int, gpus: int, bound_on: list[int]
) -> None:
    nodes = [
        node_obj(f"n{i}", gpus=free, labels={RACK: rack} if rack else {})
        for i, (rack, free) in enumerate(layout)
    ]
    bound = {i: f"n{where % len(nodes)}" for i, where in enumerate(bound_on[: count - 1])}
    result = plan(nodes, members(count, gpus=gpus, bound=bound))
    if isinstance(result, Plan):
        rack = {f"n{i}": r for i, (r, _) in enumerate(layout)}
        used = {rack[p.node] for p in result.placements} | {rack[n] for n in bound.values()}
        assert len(used) == 1 and None not in used
    else:
        assert RACK in result.message


def slices_could_fit(room: list[int], sizes: list[int]) -> bool:
    """Whether slices of `sizes` members can each go into one clique of `room` members'
    room, by trying every clique for each slice (small cases only)."""
    if not sizes:
        return True
    first, rest = sizes[0], sizes[1:]
    for i, have in enumerate(room):
        if have >= first:
            left = [*room[:i], have - first, *room[i + 1 :]]
            if slices_could_fit(left, rest):
                return True
    return False


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=2), min_size=1, max_size=3),
    st.integers(1, 6),
    st.integers(1, 4),
    st.integers(1, 2),
    st.booleans(),
)
@example(cliques=[[2], [1]], count=3, size=2, gpus=1, required=True)
def test_slices_are_placed_whenever_some_placement_exists(
    cliques: list[list[int]], count: int, size: int, gpus: int, required: bool
) -> None:
    """Exactly when the slices (the last one shorter where `size` does not divide the
    gang) could each sit in one clique, the planner places them so."""
    size = min(size, count)
    nodes = [
        node(f"n{c}-{j}", free, **{RACK: "r", CLIQUE: f"c{c}"})
        for c, frees in enumerate(cliques)
        for j, free in enumerate(frees)
    ]
    room = [sum(free // gpus for free in frees) for frees in cliques]
    full, last = divmod(count, size)
    sizes = [size] * full + ([last] if last else [])
    sliced = TopologyRequirement(
        required_key=RACK if required else None, slice_size=size, slice_key=CLIQUE, source="t"
    )
    result = plan(nodes, members(count, gpus=gpus), topology=sliced)
    assert isinstance(result, Plan) == slices_could_fit(room, sizes), result
    if isinstance(result, Plan):
        clique = {n["metadata"]["name"]: n["metadata"]["labels"][CLIQUE] for n in nodes}
        where = {
            p.pod_uid.removeprefix("uid-default-g-"): clique[p.node] for p in result.placements
        }
        for i in range(count):
            assert where[str(i)] == where[str(i // size * size)]
