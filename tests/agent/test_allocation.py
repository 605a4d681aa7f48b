"""The Allocate rule without sockets: reading pods, splitting an assignment over
containers, choosing among pods; and the kubelet API's wire format."""

from __future__ import annotations

from typing import Any

import pytest

from cache.gpu import ASSIGNMENT_ANNOTATION
from scheduler.agent import kubelet_api as api
from scheduler.agent.allocation import (
    ALLOCATED_ANNOTATION,
    Candidate,
    GpuState,
    Match,
    NoMatch,
    Refused,
    allocated_patch,
    choose,
    device_ids,
    gpu_of,
    preferred_ids,
    read_pod,
    share_ids,
    split_assignment,
    uuid_of,
    valid_unit,
)
from tests.factories import pod_obj

NODE = "gpu-1"
SCHEDULERS = ("gang-scheduler",)


def pod(
    name: str = "p", milli: int = 500, assignment: str | None = "0:500", **kwargs: Any
) -> dict[str, Any]:
    annotations = kwargs.pop("annotations", {})
    if assignment is not None:
        annotations[ASSIGNMENT_ANNOTATION] = assignment
    kwargs.setdefault("node_name", NODE)
    return pod_obj(name, vgpu=milli, annotations=annotations, **kwargs)


def read(obj: dict[str, Any], unit: int = 1) -> Candidate | Refused | None:
    return read_pod(obj, NODE, unit, SCHEDULERS)


# --- share-devices -----------------------------------------------------------------------------
def test_share_ids_and_units() -> None:
    assert share_ids("GPU-x", 250) == ["GPU-x::0", "GPU-x::1", "GPU-x::2", "GPU-x::3"]
    assert len(share_ids("GPU-x", 1)) == 1000
    assert uuid_of("GPU-x::17") == "GPU-x" and uuid_of("no-separator") == ""
    assert [u for u in (1, 3, 10, 300, 1000, 2000, 0) if valid_unit(u)] == [1, 10, 1000]


# --- splitting an assignment over containers ---------------------------------------------------
@pytest.mark.parametrize(
    ("shares", "requests", "parts"),
    [
        (((2, 470),), (("a", 470),), [((2, 470),)]),
        (((3, 1000),), (("a", 300), ("b", 700)), [((3, 300),), ((3, 700),)]),
        (((0, 1000), (1, 1000)), (("a", 1000), ("b", 1000)), [((0, 1000),), ((1, 1000),)]),
        (((0, 1000), (5, 1000)), (("a", 2000),), [((0, 1000), (5, 1000))]),
        (
            ((0, 1000), (1, 1000)),
            (("a", 300), ("b", 700), ("c", 1000)),
            [((0, 300),), ((0, 700),), ((1, 1000),)],
        ),
    ],
)
def test_containers_take_the_assignment_in_order(
    shares: tuple[tuple[int, int], ...],
    requests: tuple[tuple[str, int], ...],
    parts: list[tuple[tuple[int, int], ...]],
) -> None:
    split = split_assignment(shares, requests, 1)
    assert [part.shares for part in split] == parts
    assert [part.name for part in split] == [name for name, _ in requests]


@pytest.mark.parametrize(
    ("shares", "requests", "message"),
    [
        (((0, 1000), (1, 1000)), (("a", 700), ("b", 700), ("c", 600)), "container b's 700"),
        (((0, 500),), (("a", 400),), "gives 500 milli in all, but the containers ask for 400"),
        (((0, 1000), (1, 1000)), (("a", 500), ("b", 1000), ("c", 500)), "on whole GPUs"),
    ],
)
def test_a_split_that_does_not_work_out_is_refused(
    shares: tuple[tuple[int, int], ...], requests: tuple[tuple[str, int], ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        split_assignment(shares, requests, 1)


# --- reading pods ------------------------------------------------------------------------------
def test_a_bound_vgpu_pod_is_a_candidate() -> None:
    candidate = read(pod())
    assert isinstance(candidate, Candidate)
    assert candidate.key == "default/p" and candidate.allocated == frozenset()
    part = candidate.next_container()
    assert part is not None and (part.name, part.request, part.shares) == ("main", 500, ((0, 500),))


@pytest.mark.parametrize(
    "obj",
    [
        pod(node_name="other-node"),
        pod(phase="Succeeded"),
        pod(phase="Failed"),
        pod_obj("cpu-only", node_name=NODE),
        pod_obj("whole", gpus=1, node_name=NODE),
    ],
)
def test_pods_that_are_not_for_this_plugin_are_ignored(obj: dict[str, Any]) -> None:
    assert read(obj) is None


def test_a_terminating_pod_is_ignored() -> None:
    obj = pod()
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:05:00Z"
    assert read(obj) is None


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (pod(assignment=None), f"no {ASSIGNMENT_ANNOTATION} assignment"),
        (pod(assignment="0:500,0:500"), "repeats a device"),
        (pod(scheduler="default-scheduler"), "scheduled by 'default-scheduler'"),
    ],
)
def test_vgpu_pods_that_cannot_be_served_say_why(obj: dict[str, Any], reason: str) -> None:
    refused = read(obj)
    assert isinstance(refused, Refused) and reason in refused.reason


def test_malformed_values_are_a_refusal_not_an_exception() -> None:
    obj = pod()
    obj["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/vgpu"] = "lots"
    refused = read(obj)
    assert isinstance(refused, Refused) and "nvidia.com/vgpu" in refused.reason
    broken: dict[str, Any] = {"metadata": "x", "spec": {"nodeName": NODE, "containers": "y"}}
    assert read(broken) is None
    obj = pod()
    obj["spec"]["containers"].append("not a container")
    assert isinstance(read(obj), Candidate)


def test_init_containers_take_their_gpus_from_the_start_of_the_assignment() -> None:
    """The kubelet allocates init containers first, in spec order, then the app
    containers, which reuse the init containers' devices first (its device manager's
    devicesToReuse). So an ordinary init container, which runs alone (beside the sidecars
    started before it), takes its piece from the start of the tape, after those
    sidecars; sidecars (restartPolicy Always) and app containers take consecutive
    pieces, as kube-scheduler sums them."""
    two = ((0, 1000), (1, 1000))
    split = split_assignment(two, (("main", 2000),), 1, (("warmup", 1000, False),))
    assert [(p.name, p.shares, p.init) for p in split] == [
        ("warmup", ((0, 1000),), True),
        ("main", ((0, 1000), (1, 1000)), False),
    ]
    # A sidecar of 300 runs beside the init container of 700 and the app container of
    # 700: the pod needs max(300 + 700, 300 + 700) = 1000 milli.
    split = split_assignment(
        ((4, 1000),), (("main", 700),), 1, (("log", 300, True), ("warm", 700, False))
    )
    assert [(p.name, p.shares, p.init) for p in split] == [
        ("log", ((4, 300),), False),
        ("warm", ((4, 700),), True),
        ("main", ((4, 700),), False),
    ]
    # The init peak is larger than the app containers' sum: the assignment covers it.
    split = split_assignment(two, (("main", 1000),), 1, (("big", 2000, False),))
    assert [p.shares for p in split] == [((0, 1000), (1, 1000)), ((0, 1000),)]
    with pytest.raises(ValueError, match=r"in all, but the containers ask for 2000"):
        split_assignment(((0, 1000),), (("main", 1000),), 1, (("big", 2000, False),))


def test_a_pod_with_gpu_init_containers_is_served_init_first() -> None:
    obj = pod(milli=1000, assignment="0:1000,1:1000")
    obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/vgpu": "2000"}}
    obj["spec"]["initContainers"] = [
        {"name": "warmup", "resources": {"limits": {"nvidia.com/vgpu": "1000"}}},
        {"name": "cpu-only", "resources": {}},
    ]
    candidate = read(obj)
    assert isinstance(candidate, Candidate)
    assert [p.name for p in candidate.containers] == ["warmup", "main"]
    first = choose([obj], NODE, 1000, 1, SCHEDULERS)
    assert isinstance(first, Match) and first.container.name == "warmup"
    assert first.container.shares == ((0, 1000),)
    obj["metadata"]["annotations"][ALLOCATED_ANNOTATION] = "warmup"
    second = choose([obj], NODE, 2000, 1, SCHEDULERS)
    assert isinstance(second, Match) and second.container.name == "main"
    assert second.container.shares == ((0, 1000), (1, 1000))


# --- choosing ----------------------------------------------------------------------------------
def bound(obj: dict[str, Any], when: str) -> dict[str, Any]:
    obj["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": when}
    ]
    return obj


def test_the_pod_bound_first_wins_then_the_oldest_then_the_name() -> None:
    a = bound(pod("a", created="2026-01-01T00:00:01Z"), "2026-01-01T00:03:00Z")
    b = bound(pod("b", created="2026-01-01T00:00:09Z"), "2026-01-01T00:02:00Z")
    c = pod("c", created="2026-01-01T00:00:05Z")  # bind time unknown: creation counts
    d = pod("d", created="2026-01-01T00:00:05Z")
    order = []
    pods = [a, b, c, d]
    for _ in pods:
        match = choose(pods, NODE, 500, 1)
        assert isinstance(match, Match)
        order.append(match.pod.name)
        target = next(p for p in pods if p["metadata"]["name"] == match.pod.name)
        target["metadata"]["annotations"][ALLOCATED_ANNOTATION] = "main"
    assert order == ["c", "d", "b", "a"]
    assert isinstance(choose(pods, NODE, 500, 1), NoMatch)


def test_no_match_names_the_pods_that_were_close() -> None:
    result = choose([pod("small", 100, "1:100"), pod("bad", 500, "x")], NODE, 500, 1)
    assert isinstance(result, NoMatch)
    assert "default/bad: " in result.message
    assert "default/small container main asks for 100" in result.message


def test_the_patch_names_the_resource_version_and_keeps_earlier_containers() -> None:
    obj = pod(milli=300, assignment="3:1000", resource_version="42")
    obj["spec"]["containers"].append(
        {"name": "b", "resources": {"limits": {"nvidia.com/vgpu": "700"}}}
    )
    obj["metadata"]["annotations"][ALLOCATED_ANNOTATION] = "main"
    match = choose([obj], NODE, 700, 1)
    assert isinstance(match, Match) and match.container.name == "b"
    assert allocated_patch(match) == {
        "metadata": {"resourceVersion": "42", "annotations": {ALLOCATED_ANNOTATION: "b,main"}}
    }


def test_preferred_ids_come_from_the_assigned_gpus() -> None:
    match = choose([pod("p", 4, "1:1000,2:1000")], NODE, 4, 500)  # 4 units of 500
    assert isinstance(match, Match)
    gpus = {i: GpuState(i, f"G{i}", True) for i in range(3)}
    available = [f"G{i}::{k}" for i in range(3) for k in range(2)]
    assert preferred_ids(match, gpus, available, (), 4, 500) == ["G1::0", "G1::1", "G2::0", "G2::1"]
    # The kubelet insists on one ID: it stays, the rest still come from the assignment.
    assert preferred_ids(match, gpus, available, ("G0::1",), 4, 500) == [
        "G0::1",
        "G1::0",
        "G1::1",
        "G2::0",
    ]


# --- the wire format ---------------------------------------------------------------------------
def test_register_request_field_numbers_on_the_wire() -> None:
    data = api.encode_register_request(
        api.RegisterRequest("v1beta1", "a.sock", "x/y", api.PluginOptions(True, True))
    )
    # field 1 (version), 2 (endpoint), 3 (resource_name): length-delimited strings;
    # field 4 (options): a message holding field 1 and field 2, both true.
    expected = b"\x0a\x07v1beta1" + b"\x12\x06a.sock" + b"\x1a\x03x/y" + b"\x22\x04\x08\x01\x10\x01"
    assert data == expected
    assert api.decode_register_request(expected).options == api.PluginOptions(True, True)


def test_device_and_allocate_field_numbers_on_the_wire() -> None:
    # ListAndWatchResponse.devices = 1; Device.ID = 1, health = 2, topology = 3;
    # TopologyInfo.nodes = 1; NUMANode.ID = 1 (varint).
    device = b"\x0a\x01d" + b"\x12\x07Healthy" + b"\x1a\x04\x0a\x02\x08\x05"
    assert (
        api.encode_devices([api.Device("d", "Healthy", 5)])
        == b"\x0a" + bytes([len(device)]) + device
    )
    # AllocateRequest.container_requests = 1; ContainerAllocateRequest.devices_ids = 1.
    request = b"\x0a\x06\x0a\x01a\x0a\x01b"
    assert api.decode_allocate_request(request) == [["a", "b"]]
    # ContainerAllocateResponse.envs = 1 is map<string, string>: entries of key 1, value 2.
    answer = api.encode_allocate_response([api.ContainerAllocation({"K": "V"})])
    assert answer == b"\x0a\x08\x0a\x06\x0a\x01K\x12\x01V"


def test_containers_served_count_as_allocated_whatever_the_mark_says() -> None:
    first = pod("a", 500, "0:500")  # marks nothing: its mark was removed
    second = pod("b", 500, "1:500", created="2026-01-01T00:00:05Z")
    served = {"uid-default-a": frozenset({"main"})}
    match = choose([first, second], NODE, 500, 1, SCHEDULERS, served)
    assert isinstance(match, Match) and match.pod.name == "b"
    # Served containers are part of what the pod has allocated (and of the mark the
    # plugin writes for it), and a pod with nothing left to serve is no candidate.
    candidate = read_pod(first, NODE, 1, SCHEDULERS, served)
    assert isinstance(candidate, Candidate) and candidate.allocated == {"main"}
    assert choose([first], NODE, 500, 1, SCHEDULERS, served) == choose([], NODE, 500, 1)


# --- whole GPUs (nvidia.com/gpu) ---------------------------------------------------------------
def whole_pod(name: str, gpus: int, assignment: str, bound: str) -> dict[str, Any]:
    obj = pod_obj(name, gpus=gpus, node_name=NODE, annotations={ASSIGNMENT_ANNOTATION: assignment})
    obj["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}
    ]
    return obj


def test_whole_gpus_are_named_by_their_uuid() -> None:
    assert device_ids("GPU-x", 1000, whole=True) == ["GPU-x"]
    assert device_ids("GPU-x", 250, whole=False) == share_ids("GPU-x", 250)
    assert gpu_of("GPU-x", whole=True) == "GPU-x"
    assert gpu_of("GPU-x::3", whole=False) == "GPU-x"


def test_the_gpus_the_kubelet_names_choose_the_pod_before_bind_order() -> None:
    pods = [
        whole_pod("early", 2, "0:1000,1:1000", "2026-01-01T00:01:00Z"),
        whole_pod("late", 2, "2:1000,3:1000", "2026-01-01T00:02:00Z"),
        pod("share", 2000, "0:1000,1:1000"),  # nvidia.com/vgpu: not the whole plugin's
    ]

    def chosen(named: frozenset[int]) -> str:
        match = choose(pods, NODE, 2, 1000, SCHEDULERS, resource="nvidia.com/gpu", named=named)
        assert isinstance(match, Match)
        return match.pod.name

    assert chosen(frozenset({3, 2})) == "late"
    assert chosen(frozenset({0, 1})) == "early"
    # IDs that are no pod's assignment (the kubelet did not take the preference): the
    # bound-first rule, as for shares.
    assert chosen(frozenset({1, 2})) == "early"
    assert chosen(frozenset()) == "early"
    # The share plugin never sees whole-GPU pods.
    share = choose(pods, NODE, 2000, 1, SCHEDULERS)
    assert isinstance(share, Match) and share.pod.name == "share"


def test_preferred_whole_gpus_are_the_assigned_ones() -> None:
    match = choose(
        [whole_pod("p", 2, "1:1000,3:1000", "2026-01-01T00:01:00Z")],
        NODE,
        2,
        1000,
        SCHEDULERS,
        resource="nvidia.com/gpu",
    )
    assert isinstance(match, Match)
    gpus = {i: GpuState(i, f"G{i}", True) for i in range(4)}
    available = ["G0", "G1", "G2", "G3"]
    assert preferred_ids(match, gpus, available, (), 2, 1000, whole=True) == ["G1", "G3"]
    # GPU 3 taken in the kubelet's records: the assigned one it has, then its own order.
    assert preferred_ids(match, gpus, ["G0", "G1", "G2"], (), 2, 1000, whole=True) == [
        "G1",
        "G0",
    ]
