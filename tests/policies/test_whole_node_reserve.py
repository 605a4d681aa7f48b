"""The reserve of whole nodes (policies/whole_node_reserve.py): its classes and sizing,
the cluster summary it keeps, and the planner's pick within it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.node import NodeInfo
from cache.pod import PodInfo, pod_from_api
from cache.snapshot import Snapshot
from policies.profile import build_profile
from policies.whole_node_reserve import (
    ReserveLedger,
    WholeNodeRequest,
    WholeNodeReserve,
)
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan, Unschedulable
from scheduler.sim.openb import OpenbPod, pod_object
from scheduler.sim.profiles import openb_profile
from tests.factories import make_node, make_pod, node_obj, pod_obj

GIB = 1 << 30
EIGHT_64 = WholeNodeRequest(8, 64_000, 0, None, 0.0)


def parsed(*pods: OpenbPod) -> list[PodInfo]:
    return [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]


def test_classes_are_the_distinct_requests_of_the_most_whole_gpus() -> None:
    history = parsed(
        OpenbPod("a", 4000, 1024, 1, 500),
        OpenbPod("b", 64_000, 1024, 8, 1000),
        OpenbPod("c", 64_000, 1024, 8, 1000),
        OpenbPod("d", 120_000, 2048, 8, 1000),
        OpenbPod("e", 2000, 1024, 0, 0),
    )
    reserve = WholeNodeReserve.from_pods(history)
    requests = [(r.gpus, r.cpu_milli, r.share) for r in reserve.requests]
    assert requests == [(8, 64_000, 0.4), (8, 120_000, 0.2)]
    # Mean GPU milli per pod of the history: (500 + 3 x 8000) / 5.
    assert reserve.mean_gpu_milli == pytest.approx(24_500 / 5)
    # The 64-core class's reserve counts the 120-core pods too (they need its nodes),
    # not the other way round.
    assert reserve.shares == pytest.approx((0.6, 0.2))
    assert WholeNodeReserve.from_pods(parsed(OpenbPod("cpu", 4000, 1024, 0, 0))).requests == ()
    assert WholeNodeReserve.from_pods([]).requests == ()


def test_a_request_needs_at_least_another_by_every_resource_and_model() -> None:
    big = WholeNodeRequest(8, 120_000, 600 * GIB, None, 0.0)
    assert big.needs_at_least(EIGHT_64) and not EIGHT_64.needs_at_least(big)
    pinned = WholeNodeRequest(8, 64_000, 0, frozenset({"G3"}), 0.0)
    # A pod pinned to G3 uses a subset of the nodes an unpinned pod may use.
    assert pinned.needs_at_least(EIGHT_64) and not EIGHT_64.needs_at_least(pinned)
    other = WholeNodeRequest(8, 64_000, 0, frozenset({"G2"}), 0.0)
    assert not pinned.needs_at_least(other)


def test_a_node_holds_a_class_while_devices_cpu_and_memory_are_free() -> None:
    reserve = WholeNodeReserve(
        [
            EIGHT_64,
            WholeNodeRequest(8, 88_000, 0, None, 0.0),
            WholeNodeRequest(8, 120_000, 0, None, 0.0),
        ],
        1000.0,
    )
    node = make_node("g2", gpus=8, cpu="96")
    assert reserve.held(node) == 0b011
    cpu_pod = make_pod("c", cpu="30")
    # 66 cores would be left: still room for 64, no longer for 88.
    assert reserve.held_after(node, cpu_pod, (), 0b111) == 0b001
    share = make_pod("s", cpu="1", vgpu=300)
    assert reserve.held_after(node, share, ((3, 300),), 0b111) == 0
    node.unschedulable = True
    assert reserve.held(node) == 0


def test_unhealthy_or_other_model_devices_do_not_hold_a_class() -> None:
    pinned = WholeNodeRequest(8, 0, 0, frozenset({"G3"}), 0.0)
    reserve = WholeNodeReserve([pinned, WholeNodeRequest(8, 0, 0, None, 0.0)], 1000.0)
    assert reserve.held(make_node("g3", gpus=8, model="G3")) == 0b11
    assert reserve.held(make_node("g2", gpus=8, model="G2")) == 0b10
    node = make_node("sick", gpus=8, model="G3")
    node.devices = (dataclasses.replace(node.devices[0], healthy=False), *node.devices[1:])
    assert reserve.held(node) == 0


def test_the_reserve_is_the_expected_pods_of_the_free_gpu_capacity_rounded_up() -> None:
    reserve = WholeNodeReserve([dataclasses.replace(EIGHT_64, share=0.01)], 800.0)
    # 80,000 free milli / 800 per pod = 100 pods expected, 1% of them 8-GPU pods.
    assert reserve.reserve(80_000) == [1]
    assert reserve.reserve(160_001) == [3]
    assert reserve.reserve(0) == [0]
    assert reserve.short([1], 80_000) == 1 and reserve.short([2], 80_000) == 0
    # No expected demand: never short, even with no node left.
    assert reserve.short([0], 0) == 0
    with pytest.raises(ValueError, match="last_resort"):
        WholeNodeReserve([], 1.0, "sometimes")  # type: ignore[arg-type]


def test_a_margin_multiplies_the_expected_pods_before_rounding_up() -> None:
    request = dataclasses.replace(EIGHT_64, share=0.01)
    doubled = WholeNodeReserve([request], 800.0, margin=2.0)
    # 100 pods expected, 1% of them 8-GPU pods, twice over: 2 (1 without the margin).
    assert doubled.reserve(80_000) == [2]
    # 1.5 expected, 3 with the margin: not 2 x ceil(1.5) = 4.
    assert doubled.reserve(120_000) == [3]
    assert doubled.short([2], 80_000) == 1 and doubled.short([3], 80_000) == 0
    with pytest.raises(ValueError, match="margin"):
        WholeNodeReserve([request], 800.0, margin=0.0)


def test_a_pod_of_the_class_or_needing_more_is_what_the_reserve_is_for() -> None:
    reserve = WholeNodeReserve([EIGHT_64, WholeNodeRequest(8, 120_000, 0, None, 0.0)], 1000.0)
    assert reserve.served_by(make_pod("a", cpu="64", gpus=8)) == 0b01
    assert reserve.served_by(make_pod("b", cpu="120", gpus=8)) == 0b11
    assert reserve.served_by(make_pod("c", cpu="64", gpus=4)) == 0
    assert reserve.served_by(make_pod("d", cpu="100", vgpu=500)) == 0


def _charged(node: NodeInfo, pod: PodInfo, shares: tuple[tuple[int, int], ...]) -> NodeInfo:
    copy = node.clone()
    copy.charge(pod.requests, shares)
    return copy


@settings(max_examples=200, deadline=None)
@given(
    cpu=st.integers(0, 96),
    memory=st.integers(0, 400),
    devices=st.lists(st.integers(0, 7), max_size=8, unique=True),
    milli=st.sampled_from([100, 500, 1000]),
)
def test_held_after_is_what_the_charged_node_holds(
    cpu: int, memory: int, devices: list[int], milli: int
) -> None:
    reserve = WholeNodeReserve(
        [
            EIGHT_64,
            WholeNodeRequest(8, 88_000, 300 * GIB, None, 0.0),
            WholeNodeRequest(4, 8_000, 0, None, 0.0),
        ],
        1000.0,
    )
    node = make_node("n", gpus=8, cpu="96", memory="384Gi")
    pod = make_pod("p", cpu=str(cpu), memory=f"{memory}Gi")
    shares = tuple((index, milli) for index in devices)
    assert reserve.held_after(node, pod, shares, 0b111) == reserve.held(_charged(node, pod, shares))


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 40), st.integers(0, 7), st.booleans()),
        max_size=30,
    )
)
def test_the_ledger_caught_up_by_changes_equals_one_built_afresh(
    steps: list[tuple[int, int, int, bool]],
) -> None:
    reserve = WholeNodeReserve([EIGHT_64, WholeNodeRequest(2, 4_000, 0, None, 0.0)], 1000.0)
    nodes = {f"n{i}": make_node(f"n{i}", gpus=8 if i % 2 else 2, cpu="96") for i in range(6)}
    ledger = ReserveLedger(reserve)
    ledger.update(nodes, nodes.keys())
    for index, cpu, device, remove in steps:
        name = f"n{index}"
        if remove:
            nodes.pop(name, None)
        elif name in nodes:
            node = nodes[name]
            node.charge({"cpu": cpu * 1000}, ((device % len(node.devices), 400),))
        ledger.update(nodes, [name])
        fresh = ReserveLedger(reserve)
        fresh.update(nodes, nodes.keys())
        assert ledger.counts == fresh.counts
        assert ledger.free_gpu_milli == fresh.free_gpu_milli


def test_no_guard_while_more_nodes_hold_a_class_than_its_reserve() -> None:
    reserve = WholeNodeReserve([dataclasses.replace(EIGHT_64, share=0.4)], 8000.0)
    nodes = {name: make_node(name, gpus=8, cpu="96") for name in ("a", "b")}
    ledger = ReserveLedger(reserve)
    ledger.update(nodes, nodes.keys())
    small = make_pod("s", cpu="1", gpus=1)
    # 16,000 free milli: 2 pods expected, 40% of them 8-GPU: a reserve of 1 < 2 nodes.
    assert ledger.guard(small) is None
    # With one of them taken by the caller's plan, the other is the last one.
    taken = _charged(nodes["a"], small, ((0, 1000),))
    guard = ledger.guard(small, [ledger.planned(taken)])
    assert guard is not None
    assert guard.breaks(nodes["b"], ((0, 1000),)) and not guard.breaks(taken, ((1, 1000),))
    # An 8-GPU pod is never guarded: the reserve is for it.
    assert ledger.guard(make_pod("w", cpu="64", gpus=8), [ledger.planned(taken)]) is None


def test_a_pod_strands_gpus_when_it_takes_more_of_the_cpu_than_of_the_gpus() -> None:
    reserve = WholeNodeReserve([dataclasses.replace(EIGHT_64, share=1.0)], 8000.0)
    node = make_node("n", gpus=8, cpu="96")
    ledger = ReserveLedger(reserve)
    ledger.update({"n": node}, ["n"])
    cpu_only = ledger.guard(make_pod("c", cpu="8"))
    gpu_pod = ledger.guard(make_pod("g", cpu="8", gpus=2))
    assert cpu_only is not None and gpu_pod is not None
    assert cpu_only.strands(node, ())
    assert not gpu_pod.strands(node, ((0, 1000), (1, 1000)))


# --- the planner's pick ---------------------------------------------------------------
def _setup(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> tuple[ClusterCache, Any]:
    cache = ClusterCache()
    for node in nodes:
        cache.apply_node(EventType.ADDED, node)
    for pod in pods:
        cache.apply_pod(EventType.ADDED, pod)
    return cache, assemble_gangs(cache.pods(), cache.podgroups(), "gang-scheduler").gangs


def _plan(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    reserve: WholeNodeReserve | None,
    candidate_limit: int = 0,
) -> Plan | Unschedulable:
    # Spreading prefers the emptiest node: the big idle ones, unless the reserve says no.
    profile = dataclasses.replace(
        # No topology domains: a gang's members are placed one by one, not on one host.
        build_profile("spread", candidate_limit=candidate_limit, topology_keys=()),
        whole_node_reserve=reserve,
    )
    cache, gangs = _setup(nodes, pods)
    (gang,) = gangs.values()
    return Planner(profile).plan(gang, cache.snapshot())


BIG = [node_obj("big1", gpus=8, cpu="96"), node_obj("big2", gpus=8, cpu="96")]


def _reserve(share: float, last_resort: Any = "any") -> WholeNodeReserve:
    return WholeNodeReserve([dataclasses.replace(EIGHT_64, share=share)], 8000.0, last_resort)


@pytest.mark.parametrize("candidate_limit", [0, 128])
def test_a_small_pod_goes_elsewhere_than_the_last_whole_nodes(candidate_limit: int) -> None:
    nodes = [*BIG, node_obj("small", gpus=2, cpu="16")]
    pod = [pod_obj("g", gpus=1)]
    free = _plan(nodes, pod, None, candidate_limit)
    assert isinstance(free, Plan) and free.placements[0].node.startswith("big")
    # 18,000 free milli, 8,000 per pod, 90% 8-GPU pods: a reserve of 3 >= 2 big nodes.
    kept = _plan(nodes, pod, _reserve(0.9), candidate_limit)
    assert isinstance(kept, Plan) and kept.placements[0].node == "small"
    # A reserve of 1 (10%): one big node may still be started.
    loose = _plan(nodes, pod, _reserve(0.1), candidate_limit)
    assert isinstance(loose, Plan) and loose.placements[0].node.startswith("big")
    # The pod the reserve is for takes a big node.
    whole = _plan(nodes, [pod_obj("g", gpus=8, cpu="64")], _reserve(0.9), candidate_limit)
    assert isinstance(whole, Plan) and whole.placements[0].node.startswith("big")


@pytest.mark.parametrize("candidate_limit", [0, 128])
def test_when_only_reserved_nodes_fit_the_last_resort_decides(candidate_limit: int) -> None:
    # 40 cores: 56 would be left of 96, too few for the 8-GPU pods of 64.
    gpu_pod, cpu_pod = [pod_obj("g", gpus=1)], [pod_obj("g", cpu="40")]
    for pods in (gpu_pod, cpu_pod):
        anywhere = _plan(BIG, pods, _reserve(0.9), candidate_limit)
        assert isinstance(anywhere, Plan)
        assert isinstance(_plan(BIG, pods, _reserve(0.9, "none"), candidate_limit), Unschedulable)
    # No stranding: the GPU pod may break a whole node, the CPU-only pod may not.
    assert isinstance(_plan(BIG, gpu_pod, _reserve(0.9, "no-stranding"), candidate_limit), Plan)
    refused = _plan(BIG, cpu_pod, _reserve(0.9, "no-stranding"), candidate_limit)
    assert isinstance(refused, Unschedulable)


@pytest.mark.parametrize("candidate_limit", [0, 128])
def test_a_gangs_earlier_members_count_against_the_reserve(candidate_limit: int) -> None:
    nodes = [*BIG, node_obj("small", gpus=2, cpu="16")]
    pods = [pod_obj(f"g-{i}", gang="g", min_member=2, gpus=1) for i in range(2)]
    free = _plan(nodes, pods, None, candidate_limit)
    assert isinstance(free, Plan)
    assert sorted(p.node for p in free.placements) == ["big1", "big2"]
    # A reserve of 1 (18,000 then 17,000 free milli, 40% 8-GPU pods): the first member
    # may start a big node, the second may not start the other.
    kept = _plan(nodes, pods, _reserve(0.4), candidate_limit)
    assert isinstance(kept, Plan)
    assert len(kept.placements) == 2
    assert not {"big1", "big2"} <= {p.node for p in kept.placements}


def test_fgd_reserve_profiles_take_their_reserve_from_the_history() -> None:
    history = parsed(OpenbPod("a", 1000, 1024, 1, 500), OpenbPod("b", 120_000, 1024, 8, 1000))
    kwargs: dict[str, Any] = {"seed": 1, "max_cpu_milli": 128_000, "max_gpu_milli": 8000}
    largest = openb_profile("fgd-keep-largest", history=history, **kwargs)
    assert largest.whole_node_reserve is None
    profile = openb_profile("fgd-reserve", history=history, **kwargs)
    assert profile.whole_node_reserve is not None
    assert profile.whole_node_reserve.last_resort == "no-stranding"
    assert profile.whole_node_reserve.margin == 2.0
    assert [r.cpu_milli for r in profile.whole_node_reserve.requests] == [120_000]
    # Same scores as fgd-keep-largest: the reserve acts on the pick, not the ranking.
    assert [(s.name, w) for s, w in profile.node_scores] == [
        (s.name, w) for s, w in largest.node_scores
    ]


class _Prefer:
    """A Profile.preference admitting the nodes named."""

    name = "prefer"

    def __init__(self, *names: str) -> None:
        self.names = frozenset(names)

    def preferred(self, pod: PodInfo, snapshot: Snapshot) -> Callable[[str], bool] | None:
        return self.names.__contains__


@pytest.mark.parametrize("candidate_limit", [0, 128])
def test_the_reserve_bounds_where_a_preference_may_send_a_pod(candidate_limit: int) -> None:
    """Both at once (fgd-complete-reserve): the reserve decides which nodes may take
    the pod, the preference which of those comes first."""
    nodes = [*BIG, node_obj("small1", gpus=2, cpu="16"), node_obj("small2", gpus=2, cpu="16")]
    pod = [pod_obj("g", gpus=1)]

    def placed(preference: _Prefer, reserve: WholeNodeReserve | None) -> str:
        profile = dataclasses.replace(
            build_profile("spread", candidate_limit=candidate_limit, topology_keys=()),
            whole_node_reserve=reserve,
            preference=preference,
        )
        cache, gangs = _setup(nodes, pod)
        (gang,) = gangs.values()
        result = Planner(profile).plan(gang, cache.snapshot())
        assert isinstance(result, Plan)
        return result.placements[0].node

    assert placed(_Prefer("big1"), None) == "big1"
    # 22,000 free milli, 90% 8-GPU pods: a reserve of 3 >= the 2 big nodes.
    # The preferred node is kept whole: a small node takes the pod.
    assert placed(_Prefer("big1"), _reserve(0.9)).startswith("small")
    assert placed(_Prefer("small2"), _reserve(0.9)) == "small2"
