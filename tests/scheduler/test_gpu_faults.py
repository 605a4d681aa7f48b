"""The GPUUnhealthy warning (scheduler/kube/gpu_faults.py over cache/gpu_faults.py): each
bound pod on a GPU its node agent reports unhealthy is told once, others never."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable

from cache.cluster import ClusterCache, EventType
from cache.gpu import TOPOLOGY_ANNOTATION
from cache.node import NodeInfo
from cache.pod import PodInfo
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from scheduler.kube.gpu_faults import REASON, GpuFaultNotifier
from scheduler.planner.result import Plan
from scheduler.sim.objects import node_object
from tests.factories import pod_obj

VERSIONS = itertools.count(10)  # each node update newer than the last


def node(healthy: list[bool], name: str = "gpu-1") -> dict[str, object]:
    links = [["X" if i == j else "PIX" for j in range(len(healthy))] for i in range(len(healthy))]
    obj = node_object(name, cpu="64", memory="256Gi", gpus=len(healthy), links=links)
    annotations = obj["metadata"]["annotations"]
    document = json.loads(annotations[TOPOLOGY_ANNOTATION])
    for device, ok in zip(document["devices"], healthy, strict=True):
        device["healthy"] = ok
    annotations[TOPOLOGY_ANNOTATION] = json.dumps(document)
    obj["metadata"]["resourceVersion"] = str(next(VERSIONS))
    return obj


def warnings(notifier: GpuFaultNotifier, cache: ClusterCache) -> list[str]:
    told: list[str] = []

    def warn(pod: PodInfo, reason: str, message: str) -> None:
        assert reason == REASON
        told.append(f"{pod.name}: {message}")

    notifier.check(cache, warn)
    return told


def test_only_the_pod_on_the_faulty_gpu_is_told_once_and_again_if_it_recurs() -> None:
    cache = ClusterCache()
    cache.apply_node("ADDED", node([True, True]))
    for name in ("a", "b"):
        cache.apply_pod(
            "ADDED", pod_obj(name, gpus=1, gang="g", node_name="gpu-1", phase="Running")
        )
    cache.apply_pod("ADDED", pod_obj("waiting", gpus=1))  # not bound: never told
    notifier = GpuFaultNotifier()
    assert warnings(notifier, cache) == []
    cache.apply_node("MODIFIED", node([False, True]))
    holder = next(
        pod.name for pod in cache.pods() if (cache.charged_shares(pod.uid) or ((-1, 0),))[0][0] == 0
    )
    # Told by the first look after the node update (no scan interval to wait out).
    [told] = warnings(notifier, cache)
    assert told.startswith(
        f"{holder}: GPU 0 (GPU-gpu-1-0) of node gpu-1, held by this pod of gang default/g"
    )
    assert warnings(notifier, cache) == []  # nothing changed
    cache.apply_pod("ADDED", pod_obj("c", cpu="1", node_name="gpu-1", phase="Running"))
    assert warnings(notifier, cache) == []  # a change, but nothing new to tell
    cache.apply_node("MODIFIED", node([True, True]))
    assert warnings(notifier, cache) == []
    cache.apply_node("MODIFIED", node([False, True]))
    assert len(warnings(notifier, cache)) == 1  # a fault that recurs is news again


class CountingCache(ClusterCache):
    """A cache that counts the node records read through it."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def node(self, name: str) -> NodeInfo | None:
        self.reads += 1
        return super().node(name)

    def nodes(self) -> Iterable[NodeInfo]:
        for record in super().nodes():
            self.reads += 1
            yield record


def test_a_look_reads_the_nodes_changed_since_the_last_one_never_every_node() -> None:
    cache = CountingCache()
    for i in range(500):
        cache.apply_node("ADDED", node([True, True], name=f"gpu-{i}"))
    cache.apply_pod("ADDED", pod_obj("a", gpus=2, node_name="gpu-7", phase="Running"))
    notifier = GpuFaultNotifier()
    assert warnings(notifier, cache) == []  # the first look reads every node once
    # A busy cluster: pods come and go on healthy nodes; a look reads those nodes.
    cache.reads = 0
    for i in range(3):
        cache.apply_pod("ADDED", pod_obj(f"cpu-{i}", cpu="1", node_name=f"gpu-{100 + i}"))
    assert warnings(notifier, cache) == []
    assert cache.reads <= 3
    # A fault on gpu-7: told at once, reading gpu-7 and not the other 499.
    cache.reads = 0
    cache.apply_node("MODIFIED", node([False, True], name="gpu-7"))
    assert [line.split(":")[0] for line in warnings(notifier, cache)] == ["a"]
    assert cache.reads <= 3
    # The faulty node removed: forgotten; a fault elsewhere is still told.
    cache.apply_node("DELETED", node([False, True], name="gpu-7"))
    assert warnings(notifier, cache) == []
    cache.apply_pod("ADDED", pod_obj("b", gpus=1, node_name="gpu-9", phase="Running"))
    cache.apply_node("MODIFIED", node([False, False], name="gpu-9"))
    assert [line.split(":")[0] for line in warnings(notifier, cache)] == ["b"]


def test_an_unhealthy_gpu_takes_no_new_pod_while_its_holder_is_told_once() -> None:
    core = SchedulingCore(build_profile())
    core.apply_node(EventType.ADDED, node([True, True]), 0.0)
    core.apply_pod(
        EventType.ADDED, pod_obj("holder", gpus=1, node_name="gpu-1", phase="Running"), 0.0
    )
    held = (core.cache.charged_shares("uid-default-holder") or ())[0][0]
    healthy = [index != held for index in range(2)]
    core.apply_node(EventType.MODIFIED, node(healthy), 0.0)
    notifier = GpuFaultNotifier()
    assert len(warnings(notifier, core.cache)) == 1
    # The other GPU is free and healthy: a new pod gets it; a second one waits.
    core.apply_pod(EventType.ADDED, pod_obj("new", gpus=1), 1.0)
    core.apply_pod(EventType.ADDED, pod_obj("next", gpus=1, created="2026-01-01T00:00:01Z"), 1.0)
    core.refresh(1.0)
    first = core.schedule_next(1.0)
    assert first is not None and isinstance(first.result, Plan)
    [placement] = first.result.placements
    assert [index for index, _ in placement.shares] == [1 - held]
    second = core.schedule_next(1.0)
    assert second is not None and not isinstance(second.result, Plan)
    assert warnings(notifier, core.cache) == []  # the holder was told already
