"""The planner: whole gangs or nothing, topology, search beyond greedy, reasons."""

from __future__ import annotations

from typing import Any

from cache.cluster import ClusterCache, EventType
from policies.profile import build_profile
from scheduler.gangs.gang import Gang, assemble_gangs
from scheduler.planner.planner import plan_gang
from scheduler.planner.result import Plan, Unschedulable
from tests.factories import dgx_links, node_obj, pcie_two_switch_links, pod_obj

PROFILE = build_profile()


def setup(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> tuple[ClusterCache, dict[str, Gang]]:
    cache = ClusterCache()
    for node in nodes:
        cache.apply_node(EventType.ADDED, node)
    for pod in pods:
        cache.apply_pod(EventType.ADDED, pod)
    gangs = assemble_gangs(cache.pods(), cache.podgroups(), "gang-scheduler").gangs
    return cache, gangs


def plan(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], gang: str = "default/g", **profile: Any
) -> Plan | Unschedulable:
    cache, gangs = setup(nodes, pods)
    chosen = build_profile(**profile) if profile else PROFILE
    return plan_gang(chosen, gangs[gang], cache.snapshot())


def members(count: int, gang: str = "g", **kwargs: Any) -> list[dict[str, Any]]:
    return [pod_obj(f"{gang}-{i}", gang=gang, min_member=count, **kwargs) for i in range(count)]


def nodes_of(plan_result: Plan) -> dict[str, str]:
    return {p.pod_uid.removeprefix("uid-default-"): p.node for p in plan_result.placements}


def test_whole_gang_is_placed() -> None:
    result = plan([node_obj(f"n{i}", gpus=1) for i in range(4)], members(4, gpus=1))
    assert isinstance(result, Plan) and len(result.placements) == 4
    assert len(set(nodes_of(result).values())) == 4


def test_gang_that_does_not_fit_places_nobody_and_says_why() -> None:
    nodes = [node_obj(f"n{i}", gpus=1) for i in range(3)] + [node_obj("cpu", cpu="64")]
    result = plan(nodes, members(4, gpus=1))
    assert isinstance(result, Unschedulable)
    assert result.placeable == 3 and result.needed == 4
    assert "gang default/g: 3/4 members placeable" in result.message
    assert result.message.startswith("0/4 nodes are available: ")
    assert "Insufficient nvidia.com/gpu" in result.message
    assert len(result.reasons) == 4


def test_members_never_count_the_same_capacity_twice() -> None:
    result = plan([node_obj("big", gpus=8), node_obj("small", gpus=2)], members(3, gpus=4))
    assert isinstance(result, Unschedulable) and result.placeable == 2
    result = plan([node_obj("big", gpus=8), node_obj("small", gpus=2)], members(2, gpus=4))
    assert isinstance(result, Plan)
    devices = [set(i for i, _ in p.shares) for p in result.placements]
    assert devices[0].isdisjoint(devices[1])


def test_bound_members_count_toward_min_member() -> None:
    pods = members(4, gpus=1)
    for i in range(3):
        pods[i]["spec"]["nodeName"] = f"n{i}"
    result = plan([node_obj(f"n{i}", gpus=1) for i in range(4)], pods)
    assert isinstance(result, Plan) and nodes_of(result) == {"g-3": "n3"}


def test_extra_members_beyond_min_member_go_when_they_fit() -> None:
    pods = [pod_obj(f"g-{i}", gang="g", min_member=2, gpus=1) for i in range(4)]
    result = plan([node_obj("n0", gpus=1), node_obj("n1", gpus=2)], pods)
    assert isinstance(result, Plan) and len(result.placements) == 3
    assert len(result.left_out) == 1
    assert "Insufficient nvidia.com/gpu" in next(iter(result.left_out.values()))


def test_two_gpu_pod_takes_a_pix_pair_not_a_sys_pair() -> None:
    box = node_obj("pcie", gpus=4, links=pcie_two_switch_links())
    result = plan([box], [pod_obj("solo", gpus=2)], gang="default/pod:solo")
    assert isinstance(result, Plan)
    assert {i for i, _ in result.placements[0].shares} in ({0, 1}, {2, 3})


def test_nvlink_node_is_preferred_for_multi_gpu_pods() -> None:
    nodes = [
        node_obj("pcie", gpus=4, links=pcie_two_switch_links()),
        node_obj("dgx", gpus=8, links=dgx_links()),
    ]
    result = plan(nodes, [pod_obj("solo", gpus=4)], gang="default/pod:solo")
    assert isinstance(result, Plan) and result.placements[0].node == "dgx"


def test_fractional_share_must_fit_on_one_device() -> None:
    cache, gangs = setup(
        [node_obj("n", gpus=2)],
        [
            pod_obj(
                "a", vgpu=600, node_name="n", annotations={"gang-scheduler.io/gpu-devices": "0:600"}
            ),
            pod_obj(
                "b", vgpu=600, node_name="n", annotations={"gang-scheduler.io/gpu-devices": "1:600"}
            ),
            pod_obj("c", vgpu=500),
        ],
    )
    result = plan_gang(PROFILE, gangs["default/pod:c"], cache.snapshot())
    assert isinstance(result, Unschedulable)
    assert "no single GPU with 500/1000 free" in result.message


def test_gang_lands_in_one_rack_when_one_can_hold_it() -> None:
    nodes = [
        node_obj(f"a{i}", gpus=8, labels={"topology.kubernetes.io/zone": "rack-a"})
        for i in range(3)
    ]
    nodes += [
        node_obj(f"b{i}", gpus=8, labels={"topology.kubernetes.io/zone": "rack-b"})
        for i in range(5)
    ]
    result = plan(nodes, members(4, gpus=8))
    assert isinstance(result, Plan)
    assert {n[0] for n in nodes_of(result).values()} == {"b"}


def test_gang_shares_one_node_when_it_fits_there() -> None:
    nodes = [node_obj(f"n{i}", gpus=8) for i in range(4)]
    result = plan(nodes, members(4, gpus=2), policy="spread")
    assert isinstance(result, Plan) and len(set(nodes_of(result).values())) == 1


def test_search_finds_what_greedy_misses() -> None:
    """The flexible member would take the only A100 if placed first."""
    nodes = [
        node_obj("a100", gpus=1, model="A100", cpu="8"),
        node_obj("v100", gpus=1, model="V100", cpu="64"),
    ]
    pods = [
        pod_obj("g-0", gang="g", min_member=2, gpus=1, created="2026-01-01T00:00:00Z"),
        pod_obj(
            "g-1",
            gang="g",
            min_member=2,
            gpus=1,
            created="2026-01-01T00:00:01Z",
            node_selector={"nvidia.com/gpu.product": "A100"},
        ),
    ]
    result = plan(nodes, pods)
    assert isinstance(result, Plan)
    assert nodes_of(result) == {"g-0": "v100", "g-1": "a100"}


def test_fractional_members_pack_devices_exactly() -> None:
    """Biggest shares first: 600 + 400 on each device, nothing split badly."""
    nodes = [node_obj("n", gpus=2)]
    pods = [
        pod_obj(f"g-{i}", gang="g", min_member=4, vgpu=v)
        for i, v in enumerate([600, 400, 600, 400])
    ]
    result = plan(nodes, pods)
    assert isinstance(result, Plan)
    per_device: dict[int, int] = {}
    for placement in result.placements:
        for index, milli in placement.shares:
            per_device[index] = per_device.get(index, 0) + milli
    assert per_device == {0: 1000, 1: 1000}


def test_members_with_refused_specs_block_the_gang_with_their_reason() -> None:
    pods = members(2, gpus=1)
    pods.append(pod_obj("g-bad", gang="g", min_member=3, vgpu=1500))
    pods[0]["metadata"]["annotations"]["gang-scheduler.io/min-member"] = "3"
    pods[1]["metadata"]["annotations"]["gang-scheduler.io/min-member"] = "3"
    cache, gangs = setup([node_obj(f"n{i}", gpus=2) for i in range(3)], pods)
    result = plan_gang(PROFILE, gangs["default/g"], cache.snapshot())
    assert isinstance(result, Unschedulable)
    assert "whole multiple" in result.reasons["uid-default-g-bad"]


def test_gpu_type_reason_and_candidate_limit_do_not_hide_nodes() -> None:
    nodes = [node_obj(f"t{i}", gpus=4, model="T4") for i in range(30)]
    nodes.append(node_obj("a", gpus=4, model="A100"))
    pods = [pod_obj("solo", gpus=1, node_selector={"nvidia.com/gpu.product": "A100"})]
    result = plan(nodes, pods, gang="default/pod:solo", candidate_limit=5)
    assert isinstance(result, Plan) and result.placements[0].node == "a"
    pods = [pod_obj("solo", gpus=1, node_selector={"nvidia.com/gpu.product": "H100"})]
    result = plan(nodes, pods, gang="default/pod:solo")
    assert isinstance(result, Unschedulable)
    assert "31 node(s) didn't match GPU type H100" in result.message
