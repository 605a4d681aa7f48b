"""The cache charges the GPUs the kubelet really gave a pod, as the node agent reports
them on its Node (cache.kubelet_devices), over what was assigned or inferred."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.cluster import ClusterCache, Placement
from cache.gpu import (
    ASSIGNMENT_ANNOTATION,
    SIGNATURE_ANNOTATION,
    parse_assignment,
    sign_assignment,
)
from cache.kubelet_devices import (
    KUBELET_DEVICES_ANNOTATION,
    format_kubelet_devices,
    parse_kubelet_devices,
)
from tests.factories import node_obj, pod_obj

KEY = b"k" * 32


def node(report: dict[str, list[int]] | str | None, rv: str = "1") -> dict[str, Any]:
    obj = node_obj("n", gpus=4, resource_version=rv)
    if report is not None:
        text = (
            report
            if isinstance(report, str)
            else format_kubelet_devices({uid: tuple(indices) for uid, indices in report.items()})
        )
        obj["metadata"].setdefault("annotations", {})[KUBELET_DEVICES_ANNOTATION] = text
    return obj


def signed_pod(name: str, gpus: int, assignment: str) -> dict[str, Any]:
    """A pod this scheduler bound, with its signed assignment."""
    pod = pod_obj(name, gpus=gpus, node_name="n", uid=f"uid-{name}")
    pod["metadata"]["annotations"] = {
        ASSIGNMENT_ANNOTATION: assignment,
        SIGNATURE_ANNOTATION: sign_assignment(
            KEY, f"uid-{name}", "n", parse_assignment(assignment)
        ),
    }
    return pod


def test_the_reported_gpus_replace_the_assigned_ones() -> None:
    cache = ClusterCache(assignment_key=KEY)
    cache.apply_node("ADDED", node(None))
    cache.apply_pod("ADDED", signed_pod("a", 2, "0:1000,1:1000"))
    assert cache.charged_shares("uid-a") == ((0, 1000), (1, 1000))
    # NVIDIA's plugin gave GPUs 2 and 3 instead.
    cache.apply_node("MODIFIED", node({"uid-a": [3, 2]}, rv="2"))
    assert cache.charged_shares("uid-a") == ((2, 1000), (3, 1000))
    stored = cache.node("n")
    assert stored is not None and stored.gpu_free == [1000, 1000, 0, 0]
    # A later pod change keeps the kubelet's word.
    pod = signed_pod("a", 2, "0:1000,1:1000")
    pod["metadata"]["resourceVersion"] = "5"
    pod["metadata"]["labels"] = {"x": "y"}
    cache.apply_pod("MODIFIED", pod)
    assert stored.gpu_free == [1000, 1000, 0, 0]


def test_a_pod_this_cache_placed_and_bound_is_corrected_too() -> None:
    """The charge made at assume is the one kept once the bind is seen: it must answer
    to the report all the same."""
    cache = ClusterCache(assignment_key=KEY)
    cache.apply_node("ADDED", node(None))
    pending = pod_obj("a", gpus=2, uid="uid-a")
    cache.apply_pod("ADDED", pending)
    cache.assume([Placement("uid-a", "n", ((0, 1000), (1, 1000)))], now=0.0)
    bound = pod_obj("a", gpus=2, uid="uid-a", node_name="n", resource_version="2")
    cache.apply_pod("MODIFIED", bound)
    cache.apply_node("MODIFIED", node({"uid-a": [2, 3]}, rv="2"))
    assert cache.charged_shares("uid-a") == ((2, 1000), (3, 1000))


def test_a_report_corrects_inferred_charges_and_arrives_in_any_order() -> None:
    """A pod of another scheduler (no assignment: its GPUs are inferred, lowest first)
    is charged where the kubelet put it, whichever of node and pod came first."""
    other = pod_obj("b", gpus=1, node_name="n", uid="uid-b", scheduler="default-scheduler")
    first = ClusterCache()
    first.apply_node("ADDED", node({"uid-b": [2]}))
    first.apply_pod("ADDED", other)
    second = ClusterCache()
    second.apply_pod("ADDED", other)
    second.apply_node("ADDED", node(None))
    assert second.charged_shares("uid-b") == ((0, 1000),)
    second.apply_node("MODIFIED", node({"uid-b": [2]}, rv="2"))
    for cache in (first, second):
        assert cache.charged_shares("uid-b") == ((2, 1000),)
        stored = cache.node("n")
        assert stored is not None and stored.gpu_free == [1000, 1000, 0, 1000]
    # The report gone (the pod ended on the kubelet's side, or the agent was removed):
    # back to what the cache knows by itself.
    second.apply_node("MODIFIED", node(None, rv="3"))
    assert second.charged_shares("uid-b") == ((0, 1000),)


def test_a_report_that_does_not_fit_the_pod_counts_for_nothing() -> None:
    cache = ClusterCache(assignment_key=KEY)
    cache.apply_pod("ADDED", signed_pod("a", 2, "0:1000,1:1000"))
    cache.apply_pod("ADDED", pod_obj("s", vgpu=500, node_name="n", uid="uid-s"))
    # One GPU for a pod of two; a GPU the node does not have; a share pod.
    cache.apply_node("ADDED", node({"uid-a": [3], "uid-s": [2]}))
    assert cache.charged_shares("uid-a") == ((0, 1000), (1, 1000))
    assert cache.charged_shares("uid-s") == ((2, 500),)  # inferred, not the report's
    cache.apply_node("MODIFIED", node({"uid-a": [3, 9]}, rv="2"))
    assert cache.charged_shares("uid-a") == ((0, 1000), (1, 1000))


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"u": 3}',
        '{"u": []}',
        '{"u": [1, 1]}',
        '{"u": [-1]}',
        '{"u": [256]}',
        '{"u": [true]}',
        '{"u": ["1"]}',
        "[" * 100_000,
        '{"u": [1]' + " " * (256 * 1024),
    ],
)
def test_a_malformed_report_is_a_problem_of_the_node_not_a_crash(text: str) -> None:
    with pytest.raises(ValueError):
        parse_kubelet_devices(text)
    cache = ClusterCache()
    cache.apply_pod("ADDED", pod_obj("b", gpus=1, node_name="n", uid="u"))
    stored = cache.apply_node("ADDED", node(text))
    assert stored is not None
    assert any(KUBELET_DEVICES_ANNOTATION in problem for problem in stored.problems)
    assert cache.charged_shares("u") == ((0, 1000),)


def test_the_format_is_canonical() -> None:
    text = format_kubelet_devices({"b": (3, 1), "a": (0,)})
    assert text == '{"a":[0],"b":[1,3]}'
    assert parse_kubelet_devices(text) == {"a": (0,), "b": (1, 3)}


def test_an_entry_older_than_the_reservation_moves_no_charge() -> None:
    """The kubelet reports only pods bound to its node: an entry the report already held
    when this scheduler reserved the pod there was written before the bind (forged, or
    about nothing the kubelet did), so it moves no charge, then or once bound. Before,
    it moved member a onto GPU 3, where this very plan had put member b."""
    cache = ClusterCache()
    cache.apply_node("ADDED", node({"uid-a": [3]}))
    cache.apply_pod("ADDED", pod_obj("a", gpus=1, uid="uid-a"))
    cache.apply_pod("ADDED", pod_obj("b", gpus=1, uid="uid-b"))
    stored = cache.node("n")
    assert stored is not None
    cache.assume(
        [Placement("uid-a", "n", ((0, 1000),)), Placement("uid-b", "n", ((3, 1000),))], now=0.0
    )
    assert cache.charged_shares("uid-a") == ((0, 1000),)
    assert stored.gpu_free == [0, 1000, 1000, 0]
    cache.confirm("uid-a", "n")
    cache.apply_pod(
        "MODIFIED", pod_obj("b", gpus=1, uid="uid-b", node_name="n", resource_version="2")
    )
    assert cache.charged_shares("uid-a") == ((0, 1000),)
    assert stored.gpu_free == [0, 1000, 1000, 0]
    # An unrelated change of the report keeps the old entry as it was: still nothing.
    cache.apply_node("MODIFIED", node({"uid-a": [3], "uid-x": [1]}, rv="2"))
    assert cache.charged_shares("uid-a") == ((0, 1000),)
    # A new entry for the pod, written after the bind, is the kubelet's word again.
    cache.apply_node("MODIFIED", node({"uid-a": [2]}, rv="3"))
    assert cache.charged_shares("uid-a") == ((2, 1000),)
    stored = cache.node("n")
    assert stored is not None and stored.gpu_free == [1000, 1000, 0, 0]


def test_a_reservation_is_not_on_the_node_yet() -> None:
    """Until the bind is seen, the kubelet has not seen the pod: an entry that names a
    reserved pod (bind in flight, a nomination, a starvation hold) waits for the bind."""
    cache = ClusterCache()
    cache.apply_node("ADDED", node(None))
    cache.apply_pod("ADDED", pod_obj("a", gpus=1, uid="uid-a"))
    cache.assume([Placement("uid-a", "n", ((0, 1000),))], now=0.0)
    cache.apply_node("MODIFIED", node({"uid-a": [3]}, rv="2"))
    assert cache.charged_shares("uid-a") == ((0, 1000),)
    # The bind lands; this entry came after the reservation, so it may be the kubelet's.
    cache.apply_pod(
        "MODIFIED", pod_obj("a", gpus=1, uid="uid-a", node_name="n", resource_version="2")
    )
    assert cache.charged_shares("uid-a") == ((3, 1000),)


# Reports a node's writer controls: any uid (pending pods, pods of the other node,
# unknown), any indices (beyond the node's GPUs, shared between pods).
REPORTS = st.dictionaries(
    st.sampled_from(["uid-p0", "uid-p1", "uid-p2", "uid-p3", "uid-elsewhere", "uid-unknown"]),
    st.lists(st.integers(0, 5), min_size=1, max_size=2, unique=True),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(report=REPORTS, order=st.permutations(range(4)), members=st.integers(1, 4))
def test_a_report_written_before_a_plan_never_overcommits_it(
    report: dict[str, list[int]], order: list[int], members: int
) -> None:
    """Whatever the node's report said before this scheduler planned onto the node, the
    plan's own GPUs are what it charges, reserved and bound."""
    cache = ClusterCache()
    cache.apply_node("ADDED", node(report))
    other = node_obj("m", gpus=4)
    cache.apply_node("ADDED", other)
    cache.apply_pod("ADDED", pod_obj("elsewhere", gpus=1, uid="uid-elsewhere", node_name="m"))
    for i in range(4):
        cache.apply_pod("ADDED", pod_obj(f"p{i}", gpus=1, uid=f"uid-p{i}"))
    plan = [Placement(f"uid-p{i}", "n", ((order[i], 1000),)) for i in range(members)]
    cache.assume(plan, now=0.0)
    stored = cache.node("n")
    assert stored is not None and min(stored.gpu_free) >= 0
    for i in range(members):
        cache.confirm(f"uid-p{i}", "n")
        assert cache.charged_shares(f"uid-p{i}") == ((order[i], 1000),)
    assert min(stored.gpu_free) >= 0
