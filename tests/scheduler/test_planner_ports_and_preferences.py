"""The planner with host ports, preferred node affinity, PreferNoSchedule taints,
refused fields and pods the API placed: the gang as a whole honours them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.ports import conflicts, take_ports
from cache.volumes import VolumeCache
from policies.profile import POLICIES, USER_PREFERENCES, build_profile
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import Planner, plan_gang
from scheduler.planner.result import Plan, Unschedulable
from scheduler.planner.volume_claims import plan_with_claims
from tests.factories import node_obj, pod_obj
from tests.scheduler.test_planner import members, nodes_of, plan, setup
from tests.scheduler.test_planner_properties import clusters, workloads

PORTS_REASON = "node(s) didn't have free ports for the requested pod ports"


def with_host_port(obj: dict[str, Any], number: int, ip: str = "") -> dict[str, Any]:
    entry: dict[str, Any] = {"containerPort": 80, "hostPort": number}
    if ip:
        entry["hostIP"] = ip
    obj["spec"]["containers"][0].setdefault("ports", []).append(entry)
    return obj


def port_gang(count: int, number: int = 8080) -> list[dict[str, Any]]:
    return [with_host_port(pod, number) for pod in members(count, cpu="1")]


# --- host ports inside one gang ------------------------------------------------------------
@pytest.mark.parametrize("limit", [128, 0], ids=["bounded", "exhaustive"])
def test_members_asking_one_host_port_go_to_distinct_nodes(limit: int) -> None:
    # Packing would put all four on one roomy node; the port allows one per node.
    nodes = [node_obj(f"n{i}", cpu="64") for i in range(4)]
    result = plan(nodes, port_gang(4), candidate_limit=limit)
    assert isinstance(result, Plan)
    assert len(set(nodes_of(result).values())) == 4


@pytest.mark.parametrize("limit", [128, 0], ids=["bounded", "exhaustive"])
def test_a_gang_needing_more_nodes_than_its_port_allows_places_nobody(limit: int) -> None:
    nodes = [node_obj(f"n{i}", cpu="64") for i in range(2)]
    result = plan(nodes, port_gang(4), candidate_limit=limit)
    assert isinstance(result, Unschedulable)
    assert result.placeable == 2
    assert "gang default/g: 2/4 members placeable" in result.message
    failed = [why for why in result.reasons.values() if PORTS_REASON in why]
    assert failed and all(
        why.startswith("0/2 nodes are available: 2 " + PORTS_REASON) for why in failed
    )


def test_a_running_pods_port_keeps_the_gang_off_its_node() -> None:
    nodes = [node_obj(f"n{i}", cpu="64") for i in range(3)]
    runner = with_host_port(
        pod_obj("web", node_name="n0", phase="Running", scheduler="default-scheduler"), 8080
    )
    result = plan(nodes, [runner, *port_gang(2)])
    assert isinstance(result, Plan)
    assert sorted(nodes_of(result).values()) == ["n1", "n2"]


def test_members_on_different_addresses_of_one_port_may_share_a_node() -> None:
    nodes = [node_obj("n0", cpu="64")]
    pods = members(2, cpu="1")
    with_host_port(pods[0], 8080, "10.0.0.1")
    with_host_port(pods[1], 8080, "10.0.0.2")
    result = plan(nodes, pods)
    assert isinstance(result, Plan) and len(result.placements) == 2


@st.composite
def port_scenarios(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    node_count = draw(st.integers(1, 5))
    nodes = [node_obj(f"n{i}", cpu=draw(st.sampled_from(["4", "64"]))) for i in range(node_count)]
    addresses = st.sampled_from(["", "0.0.0.0", "10.0.0.1", "10.0.0.2"])
    numbers = st.sampled_from([80, 443, 8080])
    pods = []
    for i in range(draw(st.integers(0, 6))):
        runner = pod_obj(
            f"run-{i}",
            node_name=f"n{draw(st.integers(0, node_count - 1))}",
            phase="Running",
            scheduler="default-scheduler",
        )
        if draw(st.booleans()):
            with_host_port(runner, draw(numbers), draw(addresses))
        pods.append(runner)
    size = draw(st.integers(1, 6))
    min_member = draw(st.integers(1, size))
    for i in range(size):
        member = pod_obj(f"g-{i}", gang="g", min_member=min_member, cpu="1")
        for _ in range(draw(st.integers(0, 2))):
            with_host_port(member, draw(numbers), draw(addresses))
        pods.append(member)
    return nodes, pods


@settings(max_examples=200, deadline=None)
@given(
    scenario=port_scenarios(),
    policy=st.sampled_from(sorted(POLICIES)),
    limit=st.sampled_from([0, 4]),
)
def test_no_placement_violates_host_port_uniqueness_even_inside_one_gang(
    scenario: tuple[list[dict[str, Any]], list[dict[str, Any]]], policy: str, limit: int
) -> None:
    nodes, pods = scenario
    cache, gangs = setup(nodes, pods)
    gang = gangs["default/g"]
    result = plan_gang(build_profile(policy, candidate_limit=limit), gang, cache.snapshot())
    if not isinstance(result, Plan):
        return
    by_uid = {pod.uid: pod for pod in gang.pending}
    # Start from what running pods hold (their own clashes are not ours to judge), then
    # add every member where the plan puts it: none may clash with what is there.
    held = {node.name: {k: dict(v) for k, v in node.used_ports.items()} for node in cache.nodes()}
    for placement in result.placements:
        used = held[placement.node]
        for wanted in by_uid[placement.pod_uid].host_ports:
            assert not conflicts(used, wanted), (placement, wanted, used)
        take_ports(used, by_uid[placement.pod_uid].host_ports)


# --- soft preferences -------------------------------------------------------------------
def test_preferred_node_affinity_outweighs_packing() -> None:
    # Packing alone picks the fuller node n-full; the pod prefers zone b.
    nodes = [
        node_obj("n-full", cpu="8", labels={"zone": "a"}),
        node_obj("n-b", cpu="64", labels={"zone": "b"}),
    ]
    filler = pod_obj("filler", cpu="6", node_name="n-full", phase="Running")
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]
                    },
                }
            ]
        }
    }
    plain = plan(nodes, [filler, *members(1, cpu="1")])
    assert isinstance(plain, Plan) and nodes_of(plain) == {"g-0": "n-full"}
    steered = plan(nodes, [filler, *members(1, cpu="1", affinity=affinity)])
    assert isinstance(steered, Plan) and nodes_of(steered) == {"g-0": "n-b"}


def test_prefer_no_schedule_taints_outweigh_packing() -> None:
    taint = {"key": "spot", "value": "", "effect": "PreferNoSchedule"}
    nodes = [
        node_obj("n-full", cpu="8", taints=[taint]),
        node_obj("n-clean", cpu="64"),
    ]
    filler = pod_obj("filler", cpu="6", node_name="n-full", phase="Running")
    result = plan(nodes, [filler, *members(1, cpu="1")])
    assert isinstance(result, Plan) and nodes_of(result) == {"g-0": "n-clean"}
    tolerant = members(1, cpu="1", tolerations=[{"key": "spot", "operator": "Exists"}])
    result = plan(nodes, [filler, *tolerant])
    assert isinstance(result, Plan) and nodes_of(result) == {"g-0": "n-full"}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_without_preferences_the_policies_place_as_before(data: st.DataObject) -> None:
    """Pods and nodes with no preferred terms and no PreferNoSchedule taints get the
    same plan from each named policy with and without the new scores."""
    nodes = data.draw(clusters())
    pods = data.draw(workloads(nodes))
    policy = data.draw(st.sampled_from(sorted(POLICIES)))
    without = {k: w for k, w in POLICIES[policy].items() if k not in USER_PREFERENCES}
    cache = ClusterCache()
    for node in nodes:
        cache.apply_node(EventType.ADDED, node)
    for pod in pods:
        cache.apply_pod(EventType.ADDED, pod)
    gang = assemble_gangs(cache.pods(), cache.podgroups(), "gang-scheduler").gangs["default/g"]
    new = plan_gang(build_profile(policy, candidate_limit=4), gang, cache.snapshot())
    old = plan_gang(
        build_profile(policy, weights=without, candidate_limit=4), gang, cache.snapshot()
    )
    assert type(new) is type(old)
    if isinstance(new, Plan) and isinstance(old, Plan):
        assert new.placements == old.placements


# --- refused fields and pods the API placed -------------------------------------------------
def test_a_member_whose_dra_claim_is_unknown_waits_and_the_gang_with_it() -> None:
    pods = members(2, cpu="1")
    pods[1]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "a100"}]
    cache, gangs = setup([node_obj("n0")], pods)
    gang = gangs["default/g"]
    assert gang.ready  # a claim is no spec problem: it is resolved when planned
    waiting = plan_with_claims(
        Planner(build_profile()), gang, cache.snapshot(), VolumeCache(), cache
    )
    assert isinstance(waiting, Unschedulable)
    assert (
        "waiting for ResourceClaim default/a100 to be created"
        in (waiting.reasons["uid-default-g-1"])
    )


def test_a_pod_of_ours_with_a_node_name_is_counted_never_planned() -> None:
    # A member the user pinned with spec.nodeName is the API's: it is part of the
    # gang's running part and takes its resources, and only the rest is planned.
    pinned = pod_obj("g-0", gang="g", min_member=3, cpu="60", node_name="n0")
    rest = [pod_obj(f"g-{i}", gang="g", min_member=3, cpu="60") for i in (1, 2)]
    cache, gangs = setup([node_obj(f"n{i}", cpu="64") for i in range(3)], [pinned, *rest])
    gang = gangs["default/g"]
    assert [pod.name for pod in gang.bound] == ["g-0"]
    assert [pod.name for pod in gang.pending] == ["g-1", "g-2"]
    assert gang.needed == 2
    result = plan_gang(build_profile(), gang, cache.snapshot())
    assert isinstance(result, Plan)
    assert sorted(nodes_of(result)) == ["g-1", "g-2"]
    assert "n0" not in nodes_of(result).values()  # its cpu is taken by the pinned pod
    assert list(cache.pending_pods("gang-scheduler")) == [
        pod for pod in cache.pods() if pod.name != "g-0"
    ]
