"""Parsing of quantities, pods, nodes and PodGroups from API JSON."""

from __future__ import annotations

import json

import pytest

from cache.gpu import (
    TOPOLOGY_ANNOTATION,
    GpuRequest,
    format_assignment,
    gpu_request,
    parse_assignment,
    parse_topology,
)
from cache.node import node_from_api
from cache.pod import pod_from_api, pod_requests
from cache.podgroup import podgroup_from_api
from cache.quantity import QuantityError, parse_quantity, to_milli, to_units
from tests.factories import dgx_links, node_obj, pod_obj


@pytest.mark.parametrize(
    ("text", "milli"),
    [("500m", 500), ("1", 1000), ("2.5", 2500), ("1e3", 1_000_000), ("0.1", 100), (3, 3000)],
)
def test_cpu_quantities(text: object, milli: int) -> None:
    assert to_milli(text) == milli


def test_memory_quantities() -> None:
    assert to_units("4Gi") == 4 * 2**30
    assert to_units("1k") == 1000
    assert to_units("1.5Ki") == 1536
    assert to_units("100m") == 1  # rounded up, as Kubernetes does for byte counts
    assert parse_quantity("-1") == -1


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "4GB", "1e99", None, True, float("nan")])
def test_malformed_quantities_raise_quantity_error(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


@pytest.mark.parametrize("bad", ["", "abc", "4GB", "1e99"])
def test_remembered_quantities_still_refuse_a_malformed_string_every_time(bad: str) -> None:
    for _ in range(2):  # the memo of parsed strings keeps results, never failures
        with pytest.raises(QuantityError):
            to_milli(bad)
        with pytest.raises(QuantityError):
            to_units(bad)
    assert [to_milli("250m"), to_milli("250m"), to_units("2Ki"), to_units("2Ki")] == [
        250,
        250,
        2048,
        2048,
    ]


def test_requests_follow_kube_scheduler_rules() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}},
        ],
        "initContainers": [
            {"resources": {"requests": {"cpu": "5"}}},
            {"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
            {"resources": {"requests": {"memory": "4Gi"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    requests = pod_requests(spec)
    # containers 3 cpu + sidecar 0.5 = 3.5; first init alone 5 -> max 5; + overhead 0.1
    assert requests["cpu"] == 5100
    # containers 1Gi; third init runs with the sidecar: 4Gi -> max 4Gi
    assert requests["memory"] == 4 * 2**30
    assert requests["nvidia.com/gpu"] == 1


def test_gpu_request_shapes() -> None:
    assert gpu_request({"nvidia.com/gpu": 2}) == GpuRequest(2, 1000)
    assert gpu_request({"nvidia.com/vgpu": 470}) == GpuRequest(1, 470)
    assert gpu_request({"nvidia.com/vgpu": 3000}) == GpuRequest(3, 1000)
    assert gpu_request({}) == GpuRequest()
    with pytest.raises(ValueError, match="whole multiple"):
        gpu_request({"nvidia.com/vgpu": 1500})
    with pytest.raises(ValueError, match="ask for one"):
        gpu_request({"nvidia.com/vgpu": 500, "nvidia.com/gpu": 1})


def test_pod_with_bad_values_records_problems_instead_of_raising() -> None:
    obj = pod_obj("p", vgpu=1500)
    pod = pod_from_api(obj)
    assert pod.problems and "whole multiple" in pod.problems[0]
    obj["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    assert "not a Kubernetes quantity" in pod_from_api(obj).problems[0]
    obj = pod_obj(
        "p",
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]
                }
            }
        },
    )
    assert "operator" in pod_from_api(obj).problems[0]
    assert pod_from_api({}).problems == ("the pod has no metadata.name; it cannot be bound",)


def test_assignment_is_trusted_only_on_bound_pods() -> None:
    annotations = {"gang-scheduler.io/gpu-devices": "0:1000,1:1000"}
    assert pod_from_api(pod_obj("p", gpus=2, annotations=annotations)).assignment is None
    bound = pod_from_api(pod_obj("p", gpus=2, annotations=annotations, node_name="n"))
    assert bound.assignment == ((0, 1000), (1, 1000))
    broken = pod_from_api(
        pod_obj("p", gpus=1, annotations={"gang-scheduler.io/gpu-devices": "x"}, node_name="n")
    )
    assert broken.assignment is None and "not <device index>:<milli>" in broken.problems[0]


def test_assignment_round_trip_and_refusals() -> None:
    assert parse_assignment(format_assignment(((1, 300), (4, 1000)))) == ((1, 300), (4, 1000))
    for bad in ("0:0", "0:1001", "0:10,0:20", "a:1", "3"):
        with pytest.raises(ValueError):
            parse_assignment(bad)


def test_gang_keys_from_label_and_volcano_annotation() -> None:
    assert pod_from_api(pod_obj("p", gang="train")).gang_key == "default/train"
    obj = pod_obj("p", annotations={"scheduling.k8s.io/group-name": "vc"})
    assert pod_from_api(obj).gang_key == "default/vc"
    assert pod_from_api(pod_obj("solo")).gang_key == "default/pod:solo"
    # An annotation that could collide with another gang's key is refused, clearly.
    clash = pod_from_api(pod_obj("p", annotations={"scheduling.k8s.io/group-name": "pod:x"}))
    assert clash.gang_key == "default/pod:p" and "not a valid group name" in clash.problems[0]


def test_node_devices_from_topology_annotation() -> None:
    node = node_from_api(node_obj("n", gpus=8, model="A100", links=dgx_links()))
    assert len(node.devices) == 8 and node.devices[3].uuid == "GPU-n-3"
    assert node.pair_scores is not None and node.pair_scores[0][1] == 1200
    assert node.gpu_free == [1000] * 8 and not node.problems


def test_node_devices_fall_back_to_capacity_when_annotation_is_malformed() -> None:
    obj = node_obj("n", gpus=4, model="T4")
    obj["metadata"]["annotations"][TOPOLOGY_ANNOTATION] = "{not json"
    node = node_from_api(obj)
    assert len(node.devices) == 4 and node.pair_scores is None
    assert node.devices[0].model == "T4"
    assert "not JSON" in node.problems[0]


def test_topology_validation_messages() -> None:
    good = {
        "version": 1,
        "devices": [{"index": 0}, {"index": 1}],
        "links": [["X", "PIX"], ["PIX", "X"]],
    }
    assert parse_topology(json.dumps(good)).pair_scores == ((0, 50), (50, 0))
    for broken, words in [
        ({**good, "version": 2}, "version"),
        ({**good, "links": [["X", "PIX"], ["SYS", "X"]]}, "!="),
        ({**good, "links": [["X", "WARP"], ["WARP", "X"]]}, "unknown GPU link level"),
        ({**good, "devices": [{"index": 1}, {"index": 0}]}, "by index"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_topology(json.dumps(broken))


def test_vgpu_only_node_has_one_device_per_thousand() -> None:
    obj = node_obj("n", extra={"nvidia.com/vgpu": "3000"})
    assert len(node_from_api(obj).devices) == 3


def test_podgroup_parsing() -> None:
    group = podgroup_from_api(
        {
            "metadata": {"name": "g", "namespace": "ml"},
            "spec": {"minMember": 4, "scheduleTimeoutSeconds": 60},
        }
    )
    assert (group.key, group.min_member, group.schedule_timeout_seconds) == ("ml/g", 4, 60)
    bad = podgroup_from_api({"metadata": {"name": "g"}, "spec": {"minMember": "four"}})
    assert bad.min_member is None and "minMember" in bad.problems[0]
