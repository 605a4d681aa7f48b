"""Whole-node pods failed with room scattered (scheduler/sim/whole_room.py): the figure,
its place in the replay's result, JSON and table, and the reserve avoiding it."""

from __future__ import annotations

import dataclasses

from rich.console import Console

from cache.pod import pod_from_api
from policies.profile import build_profile
from policies.whole_node_reserve import WholeNodeReserve
from scheduler.sim.openb import OpenbPod, load_nodes, pod_object
from scheduler.sim.replay import replay_openb
from scheduler.sim.report import PolicyRun, failures_table, results_json
from scheduler.sim.whole_room import WholeNodeFailures, room_scattered
from tests.factories import make_node, make_pod

NODES = """sn,cpu_milli,memory_mib,gpu,model
box-a,64000,262144,8,G2
box-b,64000,262144,8,G2
"""
# Two 1-GPU pods, then a whole-node pod: spreading puts the first two on both boxes.
PODS = [
    OpenbPod("one-a", 4000, 1024, 1, 1000),
    OpenbPod("one-b", 4000, 1024, 1, 1000),
    OpenbPod("eight", 32000, 1024, 8, 1000),
]


def test_room_is_scattered_when_the_nodes_able_to_hold_the_pod_have_it_together() -> None:
    pod = make_pod("w", cpu="32", gpus=8)
    half = [make_node(f"n{i}", gpus=8, cpu="64") for i in range(2)]
    for node in half:
        node.gpu_free[:4] = [0] * 4
    assert room_scattered(pod, half)
    # A node of 4 devices could never hold the pod: its free devices do not count.
    assert not room_scattered(pod, [half[0], make_node("four", gpus=4, cpu="64")])
    # Nor do devices of a model the pod does not allow.
    pinned = make_pod("p", cpu="32", gpus=8, node_selector={"nvidia.com/gpu.product": "G3"})
    assert not room_scattered(pinned, half)
    # CPU counts as well: 2 x 20 free cores are fewer than 48.
    for node in half:
        node.requested["cpu"] = 44_000
    assert room_scattered(make_pod("w", cpu="40", gpus=8), half)
    assert not room_scattered(make_pod("w", cpu="48", gpus=8), half)


def test_the_largest_whole_gpu_request_names_the_figure_not_a_share_before_it() -> None:
    # The largest whole-GPU request is 1 GPU; a share of one device comes first.
    pods = [OpenbPod("share", 4000, 1024, 1, 500), OpenbPod("one", 4000, 1024, 1, 1000)]
    spread = build_profile("spread", candidate_limit=0, topology_keys=(), network_weight=0)
    result = replay_openb(load_nodes(NODES), pods, spread)
    assert result.whole_node_failures == WholeNodeFailures("1 GPU", 0, 0)


def test_a_replay_counts_whole_node_pods_failed_with_room_and_the_reserve_avoids_them() -> None:
    spread = build_profile("spread", candidate_limit=0, topology_keys=(), network_weight=0)
    result = replay_openb(load_nodes(NODES), PODS, spread)
    assert result.failed_pods == 1
    assert result.whole_node_failures == WholeNodeFailures("8 GPU", 1, 1)
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(PODS)]
    reserve = WholeNodeReserve.from_pods(history)
    kept = replay_openb(
        load_nodes(NODES), PODS, dataclasses.replace(spread, whole_node_reserve=reserve)
    )
    assert kept.failed_pods == 0
    assert kept.whole_node_failures == WholeNodeFailures("8 GPU", 0, 0)
    runs = [PolicyRun("spread", 1, result), PolicyRun("spread-reserve", 1, kept)]
    entries = results_json(runs)["results"]
    assert entries[0]["whole_node_failures"] == {
        "size": "8 GPU",
        "failed_before_100": 1,
        "failed_before_100_with_room": 1,
    }
    console = Console(width=200, record=True)
    console.print(failures_table(runs))
    text = " ".join(console.export_text().split())
    assert "8 GPU failed before 100% with room scattered on nodes that could hold them:" in text
    assert "spread 1, spread-reserve 0" in text
