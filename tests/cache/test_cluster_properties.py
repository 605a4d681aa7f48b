"""Invariants of the cache over random event streams (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, EventType, Placement
from tests.factories import node_obj, pod_obj

NODE_NAMES = ["n0", "n1", "n2"]


@st.composite
def pod_versions(draw: st.DrawFn, name: str) -> dict[str, Any]:
    gpus = draw(st.sampled_from([0, 0, 1, 2]))
    vgpu = 0 if gpus else draw(st.sampled_from([0, 250, 600]))
    node = draw(st.sampled_from(["", *NODE_NAMES]))
    annotations = {}
    if node and draw(st.booleans()):
        annotations["gang-scheduler.io/gpu-devices"] = draw(
            st.sampled_from(["0:1000", "1:1000,2:1000", "0:250", "3:600", "junk"])
        )
    return pod_obj(
        name,
        cpu=draw(st.sampled_from(["500m", "1", "2"])),
        gpus=gpus,
        vgpu=vgpu,
        node_name=node,
        phase=draw(st.sampled_from(["Pending", "Running", "Running", "Succeeded"])),
        annotations=annotations,
        created=f"2026-01-01T00:00:0{draw(st.integers(0, 3))}Z",
        scheduler=draw(st.sampled_from(["gang-scheduler", "default-scheduler"])),
    )


@st.composite
def event_streams(draw: st.DrawFn) -> list[tuple[str, str, dict[str, Any]]]:
    events = []
    for _ in range(draw(st.integers(1, 40))):
        if draw(st.integers(0, 5)) == 0:
            name = draw(st.sampled_from(NODE_NAMES))
            kind = draw(st.sampled_from([EventType.MODIFIED, EventType.DELETED]))
            obj = node_obj(
                name,
                gpus=draw(st.sampled_from([0, 2, 4])),
                labels={"rack": draw(st.sampled_from(["a", "b"]))},
            )
            events.append(("node", kind, obj))
        else:
            name = draw(st.sampled_from(["p0", "p1", "p2", "p3", "p4", "p5"]))
            kind = draw(st.sampled_from([EventType.MODIFIED] * 4 + [EventType.DELETED]))
            events.append(("pod", kind, draw(pod_versions(name))))
    for version, (_, _, obj) in enumerate(events, start=2):
        obj["metadata"]["resourceVersion"] = str(version)
    return events


def state_of(cache: ClusterCache) -> tuple[Any, ...]:
    # Copies: the cache charges a node's books in place where it may (an earlier state
    # holding the same dicts would change with them).
    nodes = {
        n.name: (dict(n.labels), dict(n.requested), list(n.gpu_free), n.resource_version)
        for n in cache.nodes()
    }
    pods = {p.uid: p.resource_version for p in cache.pods()}
    return nodes, pods


@settings(max_examples=150, deadline=None)
@given(event_streams())
def test_event_stream_equals_a_fresh_relist_of_its_final_state(
    events: list[tuple[str, str, dict[str, Any]]],
) -> None:
    streamed = ClusterCache()
    for base in NODE_NAMES:
        streamed.apply_node(EventType.ADDED, node_obj(base, gpus=4))
    final_nodes = {name: node_obj(name, gpus=4) for name in NODE_NAMES}
    final_pods: dict[str, dict[str, Any]] = {}
    for kind, event, obj in events:
        name = obj["metadata"]["name"]
        if kind == "node":
            streamed.apply_node(event, obj)
            target: dict[str, dict[str, Any]] = final_nodes
        else:
            streamed.apply_pod(event, obj)
            target = final_pods
        if event == EventType.DELETED:
            target.pop(name, None)
        else:
            target[name] = obj
    relisted = ClusterCache()
    relisted.replace_nodes(final_nodes.values())
    relisted.replace_pods(final_pods.values())
    assert state_of(streamed) == state_of(relisted)
    # A relist of the same state into the streamed cache changes nothing either.
    streamed.replace_nodes(final_nodes.values())
    streamed.replace_pods(final_pods.values())
    assert state_of(streamed) == state_of(relisted)


@settings(max_examples=100, deadline=None)
@given(event_streams(), st.data())
def test_assume_then_forget_restores_the_exact_state(
    events: list[tuple[str, str, dict[str, Any]]], data: st.DataObject
) -> None:
    cache = ClusterCache()
    for base in NODE_NAMES:
        cache.apply_node(EventType.ADDED, node_obj(base, gpus=4))
    for kind, event, obj in events:
        (cache.apply_node if kind == "node" else cache.apply_pod)(event, obj)
    pending = [p for p in cache.pods() if not p.node_name]
    nodes = [n for n in cache.nodes()]
    if not pending or not nodes:
        return
    before = state_of(cache)
    placements = []
    for pod in pending:
        node = data.draw(st.sampled_from(nodes))
        shares = tuple((i, pod.gpu.milli) for i in range(min(pod.gpu.count, len(node.devices))))
        placements.append(Placement(pod.uid, node.name, shares))
    cache.assume(placements, now=0)
    for placement in placements:
        cache.forget(placement.pod_uid)
    assert state_of(cache) == before
