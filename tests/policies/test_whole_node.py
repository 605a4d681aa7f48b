"""Keeping idle GPU nodes whole (policies/scores/whole_node.py), and its place in the
simulator's `fgd-keep` profile."""

from __future__ import annotations

import dataclasses

import pytest

from cache.pod import PodInfo, pod_from_api
from policies.interface import GangContext
from policies.scores.whole_node import KeepWholeNodes, idle_gpu_devices
from scheduler.sim.openb import OpenbPod, pod_object
from scheduler.sim.profiles import OPENB_POLICIES, largest_request, openb_profile
from tests.factories import make_node, make_pod

NO_GANG = GangContext()


def test_a_node_in_use_scores_above_any_idle_node() -> None:
    score = KeepWholeNodes()
    pod = make_pod("p", cpu="4", vgpu=500)
    used = make_node("used", gpus=8, cpu="96")
    used.gpu_free = [1000] * 7 + [200]
    idle = make_node("idle", gpus=2, cpu="16")
    assert idle_gpu_devices(used) == 0 and idle_gpu_devices(idle) == 2
    assert score.score(pod, used, ((0, 500),), NO_GANG) == 1.0
    assert score.score(pod, idle, ((0, 500),), NO_GANG) < 0.5
    # A node without GPU breaks nothing; nor does a node whose devices are all taken.
    assert score.score(pod, make_node("cpu-box", gpus=0), (), NO_GANG) == 1.0


def test_larger_idle_nodes_are_started_last() -> None:
    score = KeepWholeNodes()
    pod = make_pod("p", cpu="1", vgpu=300)
    small = score.score(pod, make_node("s", gpus=4, cpu="64"), ((0, 300),), NO_GANG)
    eight = score.score(pod, make_node("m", gpus=8, cpu="96"), ((0, 300),), NO_GANG)
    big = score.score(pod, make_node("b", gpus=8, cpu="128"), ((0, 300),), NO_GANG)
    assert small > eight > big
    # CPU-only pods count as well: they take CPU a whole-node pod may need.
    cpu_only = make_pod("c", cpu="8")
    assert score.score(cpu_only, make_node("b", gpus=8, cpu="128"), (), NO_GANG) == big


def test_idle_nodes_too_small_for_the_largest_request_are_not_protected() -> None:
    score = KeepWholeNodes(protect_from_devices=8)
    pod = make_pod("p", cpu="1", vgpu=300)
    assert score.score(pod, make_node("four", gpus=4, cpu="64"), ((0, 300),), NO_GANG) == 1.0
    assert score.score(pod, make_node("eight", gpus=8, cpu="96"), ((0, 300),), NO_GANG) < 0.5
    with pytest.raises(ValueError, match="at least 1"):
        KeepWholeNodes(0)


def test_unhealthy_devices_do_not_count_as_idle_room() -> None:
    node = make_node("n", gpus=4, cpu="32")
    node.devices = (dataclasses.replace(node.devices[0], healthy=False), *node.devices[1:])
    assert idle_gpu_devices(node) == 3
    node.gpu_free[0] = 0  # the unhealthy device's free milli does not matter
    assert idle_gpu_devices(node) == 3


def test_fgd_keep_profile_orders_ties_by_keeping_nodes_then_fill() -> None:
    assert "fgd-keep" in OPENB_POLICIES
    history = [
        pod_from_api(pod_object(OpenbPod("a", 1000, 1024, 1, 500), 0)),
        pod_from_api(pod_object(OpenbPod("b", 8000, 1024, 8, 1000), 1)),
    ]
    profile = openb_profile(
        "fgd-keep", seed=1, max_cpu_milli=96000, max_gpu_milli=8000, history=history
    )
    names = [score.name for score, _ in profile.node_scores]
    keeper = profile.node_scores[1][0]
    assert isinstance(keeper, KeepWholeNodes)
    assert keeper.protect_from_devices == 8  # the history's largest whole-GPU request
    assert names == ["fragmentation-int", "keep-whole-nodes", "fill-fragmentation"]
    weights = [weight for _, weight in profile.node_scores]
    # Both below the integer score's step of 1; fill (0..100) moves a total less than
    # keep-whole does between a used node and an idle one, or between idle 8-GPU nodes
    # of 96 and 128 cores.
    keep = KeepWholeNodes()
    pod = make_pod("p", cpu="1", vgpu=300)
    idle_96 = keep.score(pod, make_node("m", gpus=8, cpu="96"), ((0, 300),), NO_GANG)
    idle_128 = keep.score(pod, make_node("b", gpus=8, cpu="128"), ((0, 300),), NO_GANG)
    assert weights[1] * 1.0 + weights[2] * 100 < 1.0
    assert weights[2] * 100 < weights[1] * (idle_96 - idle_128) < weights[1] * (1.0 - idle_96)


def test_a_cpu_floor_protects_only_the_idle_nodes_the_most_cpu_hungry_request_fits() -> None:
    score = KeepWholeNodes(protect_from_devices=8, protect_from_cpu_milli=120_000)
    pod = make_pod("p", cpu="1", vgpu=300)
    # 8 devices but 96 cores: an 8-GPU pod of 120 cores could not use it; not kept.
    assert score.score(pod, make_node("g2", gpus=8, cpu="96"), ((0, 300),), NO_GANG) == 1.0
    big = score.score(pod, make_node("g3", gpus=8, cpu="128"), ((0, 300),), NO_GANG)
    assert big == KeepWholeNodes(8).score(pod, make_node("g3", gpus=8, cpu="128"), (), NO_GANG)
    assert big < 0.5
    with pytest.raises(ValueError, match=">= 0"):
        KeepWholeNodes(8, -1)


def test_largest_request_is_the_most_gpus_and_the_most_cpu_among_those_pods() -> None:
    def parsed(*pods: OpenbPod) -> list[PodInfo]:
        return [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods)]

    history = parsed(
        OpenbPod("a", 200_000, 1024, 1, 500),  # more CPU, but not the largest GPU request
        OpenbPod("b", 64_000, 1024, 8, 1000),
        OpenbPod("c", 120_000, 1024, 8, 1000),
        OpenbPod("d", 88_000, 1024, 8, 1000),
    )
    assert largest_request(history) == (8, 120_000)
    assert largest_request(parsed(OpenbPod("cpu", 4000, 1024, 0, 0))) == (1, 0)
    assert largest_request([]) == (1, 0)


def test_fgd_keep_largest_profile_keeps_only_what_the_largest_request_fits() -> None:
    assert "fgd-keep-largest" in OPENB_POLICIES
    history = [
        pod_from_api(pod_object(OpenbPod("a", 1000, 1024, 1, 500), 0)),
        pod_from_api(pod_object(OpenbPod("b", 120_000, 1024, 8, 1000), 1)),
    ]
    profile = openb_profile(
        "fgd-keep-largest", seed=1, max_cpu_milli=128_000, max_gpu_milli=8000, history=history
    )
    keeper = profile.node_scores[1][0]
    assert isinstance(keeper, KeepWholeNodes)
    assert (keeper.protect_from_devices, keeper.protect_from_cpu_milli) == (8, 120_000)
    names = [score.name for score, _ in profile.node_scores]
    assert names == ["fragmentation-int", "keep-whole-nodes", "fill-fragmentation"]
    # The same weights as fgd-keep: the tie-breaks stay below the integer score's step.
    keep = openb_profile(
        "fgd-keep", seed=1, max_cpu_milli=128_000, max_gpu_milli=8000, history=history
    )
    assert [w for _, w in profile.node_scores] == [w for _, w in keep.node_scores]
