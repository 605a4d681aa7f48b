"""Slim pod decoding (scheduler/kube/decoding.py): the cache's records are the ones the
standard library's decoding gives, hostile pods included; what msgspec refuses falls
back object by object, never page by page, and never raises."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bench.kube import running_pod
from cache.pod import pod_from_api
from scheduler.kube.client import WatchBroken, _decode_event
from scheduler.kube.decoding import SlimPodDecoder
from tests.fuzz.hostile import hostile_pod


def encoded(obj: Any) -> bytes | None:
    """The object as the API would send it, or None where json cannot write it (an
    integer of 5,000 digits, a value nested past the recursion limit)."""
    try:
        return json.dumps(obj).encode()
    except (ValueError, RecursionError):
        return None


def record(obj: Any) -> str:
    # repr: a NaN in a record is not equal to itself.
    return repr(pod_from_api(obj)) if isinstance(obj, dict) else repr(obj)


def page_of(*items: bytes) -> bytes:
    return (
        b'{"kind":"PodList","metadata":{"resourceVersion":"7"},"items":[' + b",".join(items) + b"]}"
    )


def with_bulk(pod: dict[str, Any]) -> dict[str, Any]:
    """A pod with what a real cluster adds and the cache never reads."""
    pod = json.loads(json.dumps(pod))
    pod.setdefault("metadata", {})["managedFields"] = [{"manager": "kubelet", "fieldsV1": {}}]
    return pod


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(hostile_pod(), min_size=1, max_size=4))
def test_slim_records_equal_the_standard_librarys_for_hostile_pods(pods: list[Any]) -> None:
    raws = [encoded(pod) for pod in pods]
    assume(all(raw is not None for raw in raws))
    items = [raw for raw in raws if raw is not None]
    decoder = SlimPodDecoder()

    page = decoder.page(page_of(*items))
    expected = json.loads(page_of(*items))
    assert [record(item) for item in page["items"]] == [record(item) for item in expected["items"]]
    for raw in items:
        event = b'{"type":"MODIFIED","object":' + raw + b"}"
        assert record(_decode_event(event, decoder)["object"]) == record(json.loads(raw))


def test_slim_decoding_leaves_out_what_the_cache_does_not_read() -> None:
    pod = running_pod("web-0", "node-0", 0, "t")
    raw = json.dumps(with_bulk(pod)).encode()
    decoded = SlimPodDecoder().pod(raw)
    assert "managedFields" not in decoded["metadata"]
    assert set(decoded["spec"]["containers"][0]) == {"name", "resources", "ports"}
    assert decoded["status"] == {"phase": "Running"}
    assert record(decoded) == record(json.loads(raw))


def test_one_ill_typed_pod_falls_back_alone_and_the_page_is_kept() -> None:
    good = [json.dumps(with_bulk(running_pod(f"p{i}", "n", i, "t"))).encode() for i in range(3)]
    wrong_type = b'{"metadata":"not an object","spec":{"containers":7}}'
    not_an_object = b'"pod"'
    decoder = SlimPodDecoder()
    page = decoder.page(page_of(good[0], wrong_type, good[1], not_an_object, good[2]))
    assert decoder.fallbacks == 2
    items = page["items"]
    assert page["metadata"] == {"resourceVersion": "7"}
    assert len(items) == 5
    # The well-formed pods are slim; the others exactly as json.loads reads them.
    assert all("managedFields" not in items[i]["metadata"] for i in (0, 2, 4))
    assert items[1] == json.loads(wrong_type)
    assert pod_from_api(items[1]).problems  # a problem on that pod, not an exception
    assert items[3] == "pod"


def test_json_that_only_the_standard_library_reads_is_read_as_before() -> None:
    """NaN, 1e999 and lone surrogates (no API server writes them) are JSON to json.loads
    and not to msgspec: such a page is the standard library's, whole."""
    good = json.dumps(running_pod("p0", "n", 0, "t")).encode()
    not_finite = b'{"metadata":{"name":"nan","uid":"u-nan"},"spec":{"priority":NaN}}'
    surrogate = b'{"metadata":{"name":"s","uid":"u-s","labels":{"a":"\\ud800"}}}'
    raw = page_of(good, not_finite, surrogate)
    page = SlimPodDecoder().page(raw)
    assert [record(i) for i in page["items"]] == [record(i) for i in json.loads(raw)["items"]]
    assert pod_from_api(page["items"][1]).problems


def test_an_error_event_keeps_its_status() -> None:
    line = b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}'
    event = _decode_event(line, SlimPodDecoder())
    assert event["object"]["code"] == 410


@pytest.mark.parametrize(
    "line",
    [b'{"type": "ADDED", "object": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"{not json", b"[1]"],
)
def test_an_undecodable_pod_event_breaks_the_watch_as_before(line: bytes) -> None:
    with pytest.raises(WatchBroken):
        _decode_event(line, SlimPodDecoder())


def test_a_page_that_cannot_be_split_is_the_standard_librarys() -> None:
    raw = b'{"items":[{"metadata":{"name":"a"}}],"metadata":{"x":NaN}}'
    page = SlimPodDecoder().page(raw)
    assert page["items"] == [{"metadata": {"name": "a"}}]


def test_every_field_the_cache_reads_survives_slim_decoding() -> None:
    """A pod that sets every field pod_from_api reads beyond the fuzz suite's (a field
    missing from SlimPod would change its record)."""
    pod = with_bulk(running_pod("rich-0", "", 0, "t"))
    spec = pod["spec"]
    spec.update(
        {
            "hostNetwork": True,
            "overhead": {"cpu": "100m"},
            "resources": {"requests": {"cpu": "1"}},
            "nodeSelector": {"zone": "a"},
            "schedulingGates": [{"name": "wait"}],
            "schedulingGroup": {"podGroupName": "native-group"},
            "workloadRef": {"name": "w"},
            "resourceClaims": [{"name": "gpu"}],
            "preemptionPolicy": "Never",
            "priority": 7,
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
            ],
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 5, "preference": {"matchExpressions": []}}
                    ]
                }
            },
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
            ],
        }
    )
    spec["containers"][0]["ports"] = [
        {"containerPort": 80, "hostPort": 8080},
        {"containerPort": 90},
    ]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    pod["metadata"]["deletionTimestamp"] = "2026-11-01T09:00:00Z"
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "rich-0-gpu"}]
    raw = json.dumps(pod).encode()
    assert record(SlimPodDecoder().pod(raw)) == record(json.loads(raw))
    # Without a gang, a native gang field (workloadRef) is a problem of its own.
    del spec["schedulingGroup"]
    raw = json.dumps(pod).encode()
    assert record(SlimPodDecoder().pod(raw)) == record(json.loads(raw))


def test_a_gang_inferred_from_the_pods_owner_survives_slim_decoding() -> None:
    """cache/workload_labels.py reads metadata.ownerReferences: a Ray pod's gang comes
    from its label and its RayCluster owner (in a namespace opted in)."""
    pod = with_bulk(running_pod("ray-0", "", 0, "t"))
    pod["metadata"]["labels"]["ray.io/cluster"] = "r"
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": "r",
            "uid": "u",
            "controller": True,
        }
    ]
    raw = json.dumps(pod).encode()
    decoded = SlimPodDecoder().pod(raw)
    assert decoded["metadata"]["ownerReferences"] == pod["metadata"]["ownerReferences"]
    assert record(decoded) == record(json.loads(raw))


def test_kueues_topology_annotations_survive_slim_decoding() -> None:
    """cache/kueue_topology.py reads the pod's annotations: slim decoding keeps them
    whole, so the pod's requirement is the same either way."""
    pod = with_bulk(running_pod("tas-0", "", 0, "t"))
    pod["metadata"].setdefault("annotations", {}).update(
        {
            "kueue.x-k8s.io/podset-required-topology": "example.com/block",
            "kueue.x-k8s.io/podset-slice-required-topology": "example.com/rack",
            "kueue.x-k8s.io/podset-slice-size": "4",
        }
    )
    raw = json.dumps(pod).encode()
    slim = pod_from_api(SlimPodDecoder().pod(raw))
    assert slim.topology is not None and slim.topology.slice_size == 4
    assert slim == pod_from_api(json.loads(raw))
