"""The planner's choices shared by nodes in the same state (Profile.node_state): the
openb profiles evaluate a shape once per node state, and place exactly as without."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType
from cache.gpu import DeviceShares
from cache.node import NodeInfo, node_from_api
from cache.pod import PodInfo, pod_from_api
from policies.interface import GangContext
from scheduler.gangs.gang import assemble_gangs
from scheduler.planner.planner import Planner
from scheduler.planner.result import Plan
from scheduler.sim.openb import OpenbPod, arrival_order, load_nodes, pod_object
from scheduler.sim.profiles import OpenbNodeStates, openb_node_state, openb_profile
from scheduler.sim.replay import replay_openb

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"node-{i},32000,131072,4,{'G2' if i % 3 else 'T4'}\n" for i in range(12)
)


class CountingScore:
    """A score that counts its calls (and orders nodes by free GPU milli)."""

    name = "counting"
    candidate_order = None
    memoizable = True

    def __init__(self) -> None:
        self.calls = 0

    def score(self, pod: PodInfo, node: NodeInfo, shares: DeviceShares, gang: GangContext) -> float:
        self.calls += 1
        return float(node.free_gpu_milli // 100)


def pods(count: int) -> list[OpenbPod]:
    t4 = frozenset({"T4"})
    shapes = [
        (2000, 1, 500, None),
        (4000, 2, 1000, None),
        (1000, 1, 250, t4),
        (8000, 4, 1000, None),
    ]
    return [
        OpenbPod(f"p{i:03d}", cpu, 4096, gpus, milli, spec)
        for i, (cpu, gpus, milli, spec) in ((i, shapes[i % len(shapes)]) for i in range(count))
    ]


def test_a_new_shape_is_evaluated_once_per_node_state_not_once_per_node() -> None:
    nodes = load_nodes(NODES_CSV)
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(pods(4))]
    base = openb_profile(
        "bestfit", seed=42, max_cpu_milli=32000, max_gpu_milli=4000, history=history
    )
    counting = CountingScore()
    profile = dataclasses.replace(base, node_scores=((counting, 1.0),))
    cache = ClusterCache()
    for node in nodes:
        cache.apply_node(EventType.ADDED, node)
    cache.apply_pod(EventType.ADDED, pod_object(pods(1)[0], 0))
    gang = assemble_gangs(cache.pods(), {}, "gang-scheduler").gangs
    result = Planner(profile).plan(next(iter(gang.values())), cache.snapshot())
    assert isinstance(result, Plan)
    # 12 empty nodes in two states (G2 and T4 boxes); the pod's candidate device sets
    # are scored once per state.
    with_state = counting.calls
    counting.calls = 0
    plain = dataclasses.replace(profile, node_state=None)
    assert isinstance(Planner(plain).plan(next(iter(gang.values())), cache.snapshot()), Plan)
    assert with_state * 6 == counting.calls


def test_node_state_leaves_out_the_name_and_nothing_the_policies_read() -> None:
    first, second = (node_info(obj) for obj in load_nodes(NODES_CSV)[1:3])
    assert openb_node_state(first) == openb_node_state(second)
    second.charge({"cpu": 1000}, ())
    assert openb_node_state(first) != openb_node_state(second)
    third = node_info(load_nodes(NODES_CSV)[4])
    third.charge({}, ((0, 100),))
    assert openb_node_state(first) != openb_node_state(third)


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    return node_from_api(obj)


def test_replays_place_every_pod_as_without_the_shared_choices() -> None:
    nodes = load_nodes(NODES_CSV)
    originals = pods(24)
    history = [pod_from_api(pod_object(pod, uid)) for uid, pod in enumerate(originals)]
    order = arrival_order(originals, 12 * 4000, 7)
    for policy in ("bestfit", "fgd", "fgd-fill", "fgd-keep"):
        profile = openb_profile(
            policy, seed=7, max_cpu_milli=32000, max_gpu_milli=4000, history=history
        )
        shared = replay_openb(nodes, order, profile)
        alone = replay_openb(nodes, order, dataclasses.replace(profile, node_state=None))
        assert shared.readings.allocated == alone.readings.allocated, policy
        assert shared.failed_pods == alone.failed_pods


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_the_replays_node_states_tell_nodes_apart_as_openb_node_state(
    data: st.DataObject,
) -> None:
    """OpenbNodeStates (what the openb profiles use: a record's fixed part read once)
    gives two nodes equal keys exactly when openb_node_state gives them equal states,
    across accounting changes and new records of a node."""
    states = OpenbNodeStates()
    cache = ClusterCache()
    csv = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"node-{i},{data.draw(st.sampled_from([32000, 96000]))},131072,"
        f"{data.draw(st.sampled_from([0, 2, 8]))},{data.draw(st.sampled_from(['G2', 'T4']))}\n"
        for i in range(5)
    )
    for node in load_nodes(csv):
        cache.apply_node(EventType.ADDED, node)
    seen: list[NodeInfo] = []
    for step in range(data.draw(st.integers(1, 12))):
        name = f"node-{data.draw(st.integers(0, 4))}"
        if data.draw(st.integers(0, 5)) == 0:
            # A new record of the node (a relabel): the fixed part is read again.
            obj = next(n for n in load_nodes(csv) if n["metadata"]["name"] == name)
            obj["metadata"]["labels"]["team"] = data.draw(st.sampled_from(["a", "b"]))
            obj["metadata"]["resourceVersion"] = str(step + 2)
            cache.apply_node(EventType.MODIFIED, obj)
        else:
            pod = OpenbPod(f"p{step}", 1000, 1024, data.draw(st.sampled_from([0, 1])), 500, None)
            obj = pod_object(pod, step)
            obj["spec"]["nodeName"] = name
            obj["status"] = {"phase": "Running"}
            cache.apply_pod(EventType.ADDED, obj)
        seen += [node.clone() for node in cache.nodes()]
    keys = [states(node) for node in seen]
    reference = [openb_node_state(node) for node in seen]
    for i in range(len(seen)):
        for j in range(len(seen)):
            assert (keys[i] == keys[j]) == (reference[i] == reference[j])
