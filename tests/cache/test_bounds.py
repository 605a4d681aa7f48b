"""Every number read from text a user or a node writes is bounded (cache/limits.py):
beyond the bound it is a problem message, never an exception, a hang or a huge object."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cache.cluster import is_older
from cache.gpu import (
    COUNT_LABEL,
    MEMORY_LABEL,
    TOPOLOGY_ANNOTATION,
    GpuDevice,
    format_topology,
    link_score,
    parse_assignment,
    parse_topology,
)
from cache.limits import MAX_GPUS_PER_NODE, shown
from cache.node import node_from_api
from cache.pod import pod_from_api
from cache.podgroup import podgroup_from_api
from cache.quantity import QuantityError, parse_quantity, to_milli
from cache.terms import parse_label_int
from scheduler.gangs.gang import parse_min_member
from tests.factories import node_obj, pod_obj

HOSTILE_QUANTITIES: list[object] = [
    "9" * 5000,
    "1e999999",
    "1E31",
    "9" * 4000 + "Ei",
    10**5000,
    2**63,
    "9223372036854775808",
    1e300,
    "-1",
    -5,
    "1" + "0" * 70,
]


@pytest.mark.parametrize("value", HOSTILE_QUANTITIES, ids=lambda v: shown(v)[:20])
def test_a_hostile_request_is_a_problem_of_its_pod(value: object) -> None:
    obj = pod_obj("p")
    obj["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/vgpu"] = value
    pod = pod_from_api(obj)
    assert pod.problems and "nvidia.com/vgpu" in pod.problems[0]
    assert len(pod.problems[0]) < 300


@pytest.mark.parametrize("value", HOSTILE_QUANTITIES, ids=lambda v: shown(v)[:20])
def test_a_hostile_capacity_is_a_problem_of_its_node(value: object) -> None:
    obj = node_obj("n", gpus=2)
    obj["status"]["allocatable"]["cpu"] = value
    node = node_from_api(obj)
    assert any("cpu" in problem for problem in node.problems)


def test_quantities_up_to_int64_still_parse() -> None:
    assert parse_quantity("9223372036854775807") == 2**63 - 1
    assert to_milli("7Ei") == 7 * 2**60 * 1000
    with pytest.raises(QuantityError, match="largest"):
        parse_quantity("8Ei")  # 2^63: one beyond


def test_gpu_requests_beyond_any_node_are_refused() -> None:
    pod = pod_from_api(pod_obj("p", gpus=MAX_GPUS_PER_NODE + 1))
    assert any(f"more than {MAX_GPUS_PER_NODE} GPUs" in p for p in pod.problems)
    assert not pod_from_api(pod_obj("ok", gpus=MAX_GPUS_PER_NODE)).problems


@pytest.mark.parametrize("priority", [2**31, -(2**31) - 1, 10**5000, "7", 1.5, True], ids=shown)
def test_a_priority_outside_int32_is_a_problem(priority: object) -> None:
    obj = pod_obj("p")
    obj["spec"]["priority"] = priority
    pod = pod_from_api(obj)
    assert pod.priority == 0
    assert any("spec.priority" in p for p in pod.problems)


def test_int32_priorities_are_kept() -> None:
    obj = pod_obj("p")
    obj["spec"]["priority"] = 2_000_000_000
    assert pod_from_api(obj).priority == 2_000_000_000


@pytest.mark.parametrize("text", ["9" * 5000, "0" * 5000 + "3", "2147483648", "99999999999"])
def test_min_member_annotations_beyond_int32_are_refused_unread(text: str) -> None:
    expected = 3 if text.endswith("3") and text.startswith("0") else None
    assert parse_min_member(text) == expected


@pytest.mark.parametrize("value", [2**31, 10**5000, 0, -1, 2.0, "4", True], ids=shown)
def test_podgroup_numbers_outside_positive_int32_are_problems(value: object) -> None:
    for field in ("minMember", "scheduleTimeoutSeconds"):
        group = podgroup_from_api({"metadata": {"name": "g"}, "spec": {field: value}})
        assert group.min_member is None and group.schedule_timeout_seconds is None
        assert any(field in problem for problem in group.problems)
        assert all(len(problem) < 200 for problem in group.problems)


def test_a_node_count_label_beyond_the_bound_offers_no_gpu() -> None:
    obj = node_obj("n", gpus=1)
    obj["metadata"]["labels"][COUNT_LABEL] = "9" * 5000
    node = node_from_api(obj)
    assert node.devices == ()
    assert any(str(MAX_GPUS_PER_NODE) in p for p in node.problems)


@pytest.mark.parametrize("label", ["²", "1" * 30, "-3", "12.5"])
def test_odd_count_and_memory_labels_are_ignored(label: str) -> None:
    obj = node_obj("n", gpus=2)
    obj["metadata"]["annotations"].pop(TOPOLOGY_ANNOTATION, None)
    obj["metadata"]["labels"][MEMORY_LABEL] = label
    if not label.startswith("1"):
        obj["metadata"]["labels"][COUNT_LABEL] = label
    node = node_from_api(obj)
    assert all(device.memory_mib == 0 for device in node.devices)
    assert len(node.devices) in (0, 2)


def test_a_gpu_capacity_beyond_the_bound_offers_no_gpu() -> None:
    node = node_from_api(node_obj("n", gpus=1, extra={"nvidia.com/gpu": str(10**6)}))
    assert node.devices == () and node.problems


def _topology(count: int) -> str:
    devices = [GpuDevice(i, f"GPU-{i}", "A100", 81920, 0) for i in range(count)]
    return format_topology(devices, None)


@pytest.mark.parametrize(
    "text",
    [
        _topology(MAX_GPUS_PER_NODE + 1),
        "[" * 100_000 + "]" * 100_000,
        " " * (300 * 1024) + "{}",
        '{"version": 1, "devices": [{"index": 0, "memoryMiB": ' + "9" * 5000 + "}]}",
        json.dumps({"version": 1, "devices": [{"index": 0, "numa": 2**40}]}),
        '{"version": ' + "9" * 5000 + ', "devices": []}',
        json.dumps(
            {
                "version": 1,
                "devices": [{"index": 0}, {"index": 1}],
                "links": [["X", "NV" + "9" * 5000], ["SYS", "X"]],
            }
        ),
    ],
    ids=["too-many", "deep", "too-long", "memory", "numa", "version", "nvlink"],
)
def test_hostile_topology_annotations_are_refused_with_a_message(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_topology(text)
    assert TOPOLOGY_ANNOTATION in str(refused.value) or "link" in str(refused.value)
    assert len(str(refused.value)) < 300
    obj = node_obj("n", gpus=2)
    obj["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = text
    node = node_from_api(obj)
    assert node.problems and len(node.devices) == 2  # the count from allocatable


def test_a_topology_of_the_largest_node_still_parses() -> None:
    assert len(parse_topology(_topology(MAX_GPUS_PER_NODE)).devices) == MAX_GPUS_PER_NODE


def test_nvlink_counts_are_bounded() -> None:
    assert link_score("NV18") == 1800
    with pytest.raises(ValueError):
        link_score("NV65")


@pytest.mark.parametrize("text", ["9" * 5000 + ":500", "0:" + "9" * 5000, "²:500", "0:²"])
def test_assignments_with_hostile_numbers_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_assignment(text)


def test_resource_versions_of_any_length_compare_without_int() -> None:
    assert is_older("9" * 5000, "1")
    assert not is_older("1", "9" * 5000)
    assert is_older("0010", "9")
    assert not is_older("²", "1") and not is_older("1", "²")


def test_label_integers_beyond_int64_never_match() -> None:
    assert parse_label_int("9" * 5000) is None
    assert parse_label_int("-" + "0" * 30 + "12") == -12


def test_shown_never_raises_and_stays_short() -> None:
    values: list[Any] = [10**5000, "x" * 10_000, [[[]]], {"a": 1}, None, 1.5, -(10**5000)]
    for value in values:
        assert len(shown(value)) <= 70
