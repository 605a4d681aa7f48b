"""The cache's incremental path (issue 31): adding a pod whose charge is as written
checks that pod alone, never every pod already on its node, and gives exactly the
books a recomputation of the whole node gives (cache/cluster.py, `_apply_change`)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cache.cluster as cluster_module
from cache.cluster import ClusterCache, EventType, Placement
from cache.gpu import ASSIGNMENT_ANNOTATION, SIGNATURE_ANNOTATION, format_assignment
from cache.kubelet_devices import KUBELET_DEVICES_ANNOTATION, format_kubelet_devices
from cache.signing import sign_assignment
from tests.factories import node_obj, pod_obj

KEY = b"k" * 32
NODE_NAMES = ["n0", "n1"]
POD_NAMES = [f"p{index}" for index in range(6)]


@pytest.mark.parametrize("neighbour_gpus", [0, 1])
def test_adding_a_pod_checks_that_pod_only_not_its_neighbours(
    monkeypatch: pytest.MonkeyPatch, neighbour_gpus: int
) -> None:
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("n", gpus=8, cpu="1000"))
    # With a GPU pod of another scheduler there (its devices inferred), or none.
    cache.apply_pod(
        EventType.ADDED, pod_obj("gpu", gpus=neighbour_gpus, node_name="n", phase="Running")
    )
    checked: list[str] = []
    real = cluster_module._as_written

    def counting(charge: Any, node: Any) -> bool:
        checked.append(charge.uid)
        return real(charge, node)

    monkeypatch.setattr(cluster_module, "_as_written", counting)
    for index in range(40):
        checked.clear()
        cache.apply_pod(EventType.ADDED, pod_obj(f"p{index}", node_name="n", phase="Running"))
        # Old code re-checked every pod already on the node: index + 1 checks.
        assert len(checked) <= 1, (index, checked)
    node = cache.node("n")
    assert node is not None and node.requested["pods"] == 41


def signed(uid: str, node: str, shares: tuple[tuple[int, int], ...]) -> dict[str, str]:
    return {
        ASSIGNMENT_ANNOTATION: format_assignment(shares),
        SIGNATURE_ANNOTATION: sign_assignment(KEY, uid, node, shares),
    }


@st.composite
def pod_event(draw: st.DrawFn) -> tuple[str, EventType, dict[str, Any]]:
    name = draw(st.sampled_from(POD_NAMES))
    node = draw(st.sampled_from(["", *NODE_NAMES]))
    gpus = draw(st.sampled_from([0, 0, 1, 2]))
    annotations: dict[str, str] = {}
    if node and gpus:
        # Signed devices (as written while they exist on the node), or none (inferred).
        first = draw(st.sampled_from([0, 1, 3]))
        shares = tuple((first + offset, 1000) for offset in range(gpus))
        if draw(st.booleans()):
            annotations = signed(f"uid-default-{name}", node, shares)
    obj = pod_obj(
        name,
        cpu=draw(st.sampled_from(["500m", "1"])),
        gpus=gpus,
        node_name=node,
        phase=draw(st.sampled_from(["Pending", "Running", "Running", "Succeeded"])),
        annotations=annotations,
        created=f"2026-01-01T00:00:0{draw(st.integers(0, 3))}Z",
    )
    kind = draw(st.sampled_from([EventType.MODIFIED] * 4 + [EventType.DELETED]))
    return "pod", kind, obj


@st.composite
def node_event(draw: st.DrawFn) -> tuple[str, EventType, dict[str, Any]]:
    obj = node_obj(draw(st.sampled_from(NODE_NAMES)), gpus=draw(st.sampled_from([0, 2, 4])))
    # Sometimes the node agent's report of what the kubelet gave some pods.
    report = draw(
        st.dictionaries(
            st.sampled_from(POD_NAMES),
            st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True),
            max_size=3,
        )
    )
    if report:
        text = format_kubelet_devices(
            {f"uid-default-{name}": tuple(indices) for name, indices in report.items()}
        )
        obj["metadata"].setdefault("annotations", {})[KUBELET_DEVICES_ANNOTATION] = text
    return "node", draw(st.sampled_from([EventType.MODIFIED, EventType.DELETED])), obj


def books(cache: ClusterCache) -> tuple[Any, ...]:
    nodes = {
        node.name: (dict(node.requested), list(node.gpu_free), dict(node.used_ports))
        for node in cache.nodes()
    }
    shares = {pod.uid: cache.charged_shares(pod.uid) for pod in cache.pods()}
    return nodes, shares, dict(cache._not_as_written)


def assert_books_equal_a_recomputation(cache: ClusterCache) -> None:
    before = books(cache)
    for node in list(cache.nodes()):
        cache._rebuild_node(node.name)
    assert books(cache) == before


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(pod_event(), pod_event(), node_event()), max_size=30), st.data())
def test_incremental_books_equal_a_recomputation_after_every_event(
    events: list[tuple[str, EventType, dict[str, Any]]], data: st.DataObject
) -> None:
    cache = ClusterCache(assignment_key=KEY)
    for name in NODE_NAMES:
        cache.apply_node(EventType.ADDED, node_obj(name, gpus=4))
    for version, (kind, event, obj) in enumerate(events, start=2):
        obj["metadata"]["resourceVersion"] = str(version)
        (cache.apply_node if kind == "node" else cache.apply_pod)(event, obj)
        assert_books_equal_a_recomputation(cache)
        pending = [pod for pod in cache.pods() if not pod.node_name and pod.consumes_resources]
        nodes = list(cache.nodes())
        if pending and nodes and data.draw(st.booleans()):
            # A plan reserved (as written where its devices exist), then maybe forgotten.
            pod = data.draw(st.sampled_from(pending))
            if cache.is_assumed(pod.uid):
                cache.forget(pod.uid)
            else:
                node = data.draw(st.sampled_from(nodes))
                first = data.draw(st.sampled_from([0, 2]))
                shares = tuple((first + i, pod.gpu.milli) for i in range(pod.gpu.count))
                cache.assume([Placement(pod.uid, node.name, shares)], now=0)
            assert_books_equal_a_recomputation(cache)


def test_assume_then_forget_next_to_an_inferred_pod_restores_the_books() -> None:
    # Found by tests/cache/test_cluster_properties.py: a CPU pod's reservation is
    # charged in place, a GPU pod's then recomputes the node (an inferred share there).
    cache = ClusterCache()
    cache.apply_node(EventType.ADDED, node_obj("n", gpus=4))
    cache.apply_pod(EventType.ADDED, pod_obj("shared", vgpu=250, node_name="n"))
    cache.apply_pod(EventType.ADDED, pod_obj("cpu"))
    cache.apply_pod(EventType.ADDED, pod_obj("gpu", gpus=1))
    before = books(cache)
    plan = [Placement("uid-default-cpu", "n"), Placement("uid-default-gpu", "n", ((0, 1000),))]
    cache.assume(plan, now=0)
    assert_books_equal_a_recomputation(cache)
    for placement in plan:
        cache.forget(placement.pod_uid)
    assert books(cache) == before
