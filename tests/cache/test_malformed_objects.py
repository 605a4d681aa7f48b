"""The scheduler never crashes on a user's object, however broken its structure."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.node import node_from_api
from cache.pod import pod_from_api
from cache.podgroup import podgroup_from_api
from policies.profile import build_profile
from scheduler.cycle.core import SchedulingCore
from tests.factories import node_obj, pod_obj

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
FIELDS = [
    "metadata",
    "spec",
    "status",
    "containers",
    "resources",
    "requests",
    "limits",
    "nodeName",
    "affinity",
    "tolerations",
    "annotations",
    "labels",
    "allocatable",
    "taints",
    "initContainers",
    "overhead",
    "nodeSelector",
    "priority",
    "minMember",
]


def corrupt(obj: Any, path: list[str], value: Any) -> Any:
    """Replace the first field on `path` found anywhere in `obj` by `value`."""
    if isinstance(obj, dict):
        for key in list(obj):
            if key in path:
                obj[key] = value
                return obj
            corrupt(obj[key], path, value)
    elif isinstance(obj, list):
        for item in obj:
            corrupt(item, path, value)
    return obj


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FIELDS), JSON)
def test_parsing_never_raises(field: str, junk: Any) -> None:
    pod = pod_from_api(corrupt(pod_obj("p", gpus=1, node_name="n"), [field], junk))
    assert pod.name in ("p", "")
    node = node_from_api(corrupt(node_obj("n", gpus=2), [field], junk))
    assert node.name in ("n", "")
    podgroup_from_api(corrupt({"metadata": {"name": "g"}, "spec": {"minMember": 2}}, [field], junk))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(FIELDS), JSON)
def test_the_core_keeps_scheduling_around_broken_objects(field: str, junk: Any) -> None:
    core = SchedulingCore(build_profile())
    core.apply_node("ADDED", node_obj("good", gpus=2), 0)
    core.apply_node("ADDED", corrupt(node_obj("bad", gpus=2), [field], junk), 0)
    core.apply_pod("ADDED", corrupt(pod_obj("broken", gpus=1), [field], junk), 0)
    core.apply_pod("ADDED", pod_obj("fine", gpus=1), 0)
    while core.schedule_next(1) is not None:
        pass
    assert core.cache.is_assumed("uid-default-fine") or any(
        p.name == "fine" and p.node_name for p in core.cache.pods()
    )


def test_a_non_mapping_object_is_read_as_empty() -> None:
    assert "malformed" in pod_from_api([]).problems[0]  # type: ignore[arg-type]
    assert node_from_api("x").name == ""  # type: ignore[arg-type]
