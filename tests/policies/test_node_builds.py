"""What the cluster's nodes are built with (policies/node_builds.py), and the requests
the learnt reserves leave out because no node could run them."""

from __future__ import annotations

import dataclasses

from cache.cluster import ClusterCache, EventType
from cache.gpu import PRODUCT_LABEL
from cache.resources import CPU, MEMORY
from policies.model_reserve import ModelReserve
from policies.node_builds import LargestNodes, NodeBuilds
from policies.scores.fragmentation import WorkloadShape
from policies.whole_node_reserve import WholeNodeRequest
from tests.factories import make_node, node_obj, pod_obj

ADDED = EventType.ADDED
A100 = frozenset({"A100"})
TIB = 1 << 40


def _cluster() -> ClusterCache:
    cache = ClusterCache()
    cache.apply_node(ADDED, node_obj("a", gpus=8, cpu="32", model="A100"))
    cache.apply_node(ADDED, node_obj("t", gpus=2, cpu="96", model="T4"))
    cache.apply_node(ADDED, node_obj("cpu", cpu="16", memory="1Ti"))
    return cache


def test_largest_nodes_are_the_most_of_each_figure_any_node_is_built_with() -> None:
    cache = _cluster()
    snapshot = cache.snapshot()
    builds = NodeBuilds()
    builds.update(snapshot.nodes, snapshot.nodes.keys())
    largest = builds.largest
    assert largest == LargestNodes(96_000, 8, (("A100", 8), ("T4", 2)), TIB)
    # Each figure on its own: 8 GPUs, 96 cores and 1 TiB are not on one node, yet kept.
    assert largest.could_run(WorkloadShape(96_000, 1000, 8))
    assert largest.could_run(WorkloadShape(1000, 1000, 8), memory=TIB)
    assert not largest.could_run(WorkloadShape(1000, 1000, 8), memory=TIB + 1)
    assert largest.could_run(WorkloadShape(1000, 1000, 8, frozenset({"A100", "H100"})))
    assert largest.could_run(WorkloadShape(1000, 500, 2, frozenset({"T4"})))
    assert largest.could_run(WorkloadShape(96_000))  # CPU only
    assert not largest.could_run(WorkloadShape(1000, 1000, 3, frozenset({"T4"})))
    assert not largest.could_run(WorkloadShape(1000, 1000, 9))
    assert not largest.could_run(WorkloadShape(1000, 1000, 1, frozenset({"H100"})))
    assert not largest.could_run(WorkloadShape(97_000))
    # Pods binding change no build: the same figures, not recomputed.
    cache.apply_pod(ADDED, pod_obj("p", gpus=8, node_name="a", phase="Running"))
    snapshot = cache.snapshot()
    builds.update(snapshot.nodes, ["a"])
    assert builds.largest is largest
    # A node gone: its figures go with it.
    builds.update({}, ["a"])
    assert builds.largest == LargestNodes(96_000, 2, (("T4", 2),), TIB)
    assert not LargestNodes().could_run(WorkloadShape(0, 1000, 1))


def test_pinned_pods_no_node_could_run_are_no_demand_of_the_model_reserve() -> None:
    """Pods pinned to A100 asking 200 GPUs never run; counted, each would weigh as 200
    one-GPU pods in A100's reserve, and A100 would close to unpinned pods."""
    snapshot = _cluster().snapshot()
    real = {WorkloadShape(1000, 1000, 1, A100): 10, WorkloadShape(1000, 1000, 1): 90}
    flooded = {**real, WorkloadShape(1000, 1000, 200, A100): 50}
    assert ModelReserve(flooded).available(snapshot) == ModelReserve(real).available(snapshot)


def test_a_whole_node_class_is_held_by_the_model_pods_constrain() -> None:
    """A pinned class names the product label's value (what node affinity matches); the
    node agent reads another name from the driver. The node holds the class."""
    node = make_node("a", gpus=8, cpu="32", model="NVIDIA-A100-SXM4-80GB")
    node.devices = tuple(
        dataclasses.replace(device, model="NVIDIA A100-SXM4-80GB") for device in node.devices
    )
    assert node.labels[PRODUCT_LABEL] == "NVIDIA-A100-SXM4-80GB"
    request = WholeNodeRequest(8, 4000, 0, frozenset({"NVIDIA-A100-SXM4-80GB"}), 1.0)
    assert request.held(node, node.free(CPU), node.free(MEMORY), frozenset())
    other = dataclasses.replace(request, models=frozenset({"NVIDIA-H100-80GB-HBM3"}))
    assert not other.held(node, node.free(CPU), node.free(MEMORY), frozenset())
