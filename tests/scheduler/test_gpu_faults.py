"""The GPUUnhealthy warning (scheduler/kube/gpu_faults.py over cache/gpu_faults.py): each
bound pod on a GPU its node agent reports unhealthy is told once, others never."""

from __future__ import annotations

import itertools
import json

from cache.cluster import ClusterCache
from cache.gpu import TOPOLOGY_ANNOTATION
from cache.pod import PodInfo
from scheduler.kube.gpu_faults import REASON, GpuFaultNotifier
from scheduler.sim.objects import node_object
from tests.factories import pod_obj

VERSIONS = itertools.count(10)  # each node update newer than the last


def node(healthy: list[bool]) -> dict[str, object]:
    links = [["X" if i == j else "PIX" for j in range(len(healthy))] for i in range(len(healthy))]
    obj = node_object("gpu-1", cpu="64", memory="256Gi", gpus=len(healthy), links=links)
    annotations = obj["metadata"]["annotations"]
    document = json.loads(annotations[TOPOLOGY_ANNOTATION])
    for device, ok in zip(document["devices"], healthy, strict=True):
        device["healthy"] = ok
    annotations[TOPOLOGY_ANNOTATION] = json.dumps(document)
    obj["metadata"]["resourceVersion"] = str(next(VERSIONS))
    return obj


def warnings(notifier: GpuFaultNotifier, cache: ClusterCache, now: float) -> list[str]:
    told: list[str] = []

    def warn(pod: PodInfo, reason: str, message: str) -> None:
        assert reason == REASON
        told.append(f"{pod.name}: {message}")

    notifier.check(cache, warn, now)
    return told


def test_only_the_pod_on_the_faulty_gpu_is_told_once_and_again_if_it_recurs() -> None:
    cache = ClusterCache()
    cache.apply_node("ADDED", node([True, True]))
    for name in ("a", "b"):
        cache.apply_pod(
            "ADDED", pod_obj(name, gpus=1, gang="g", node_name="gpu-1", phase="Running")
        )
    cache.apply_pod("ADDED", pod_obj("waiting", gpus=1))  # not bound: never told
    notifier = GpuFaultNotifier(min_interval=1.0)
    assert warnings(notifier, cache, 0.0) == []
    cache.apply_node("MODIFIED", node([False, True]))
    holder = next(
        pod.name for pod in cache.pods() if (cache.charged_shares(pod.uid) or ((-1, 0),))[0][0] == 0
    )
    assert warnings(notifier, cache, 0.5) == []  # within the interval: later
    [told] = warnings(notifier, cache, 1.0)
    assert told.startswith(
        f"{holder}: GPU 0 (GPU-gpu-1-0) of node gpu-1, held by this pod of gang default/g"
    )
    assert warnings(notifier, cache, 5.0) == []  # nothing changed
    cache.apply_pod("ADDED", pod_obj("c", cpu="1", node_name="gpu-1", phase="Running"))
    assert warnings(notifier, cache, 7.0) == []  # a change, but nothing new to tell
    cache.apply_node("MODIFIED", node([True, True]))
    assert warnings(notifier, cache, 9.0) == []
    cache.apply_node("MODIFIED", node([False, True]))
    assert len(warnings(notifier, cache, 11.0)) == 1  # a fault that recurs is news again
