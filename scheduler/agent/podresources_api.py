"""The kubelet's pod-resources API, `v1`, without generated code.

The kubelet serves `v1.PodResourcesLister` (gRPC over the unix socket
`/var/lib/kubelet/pod-resources/kubelet.sock`): `List` answers, for every pod it runs,
the devices each container was allocated (resource name and device IDs, as the device
plugin named them), which is what the kubelet really handed out, whoever scheduled the
pod. The messages are those of the kubelet's
`k8s.io/kubelet/pkg/apis/podresources/v1/api.proto` (proto3, package `v1`) that the
agent reads: the same names and field numbers. Fields the agent does not read (a
container's memory and dynamic resources, `GetAllocatableResources`) are left out: a
proto3 parser skips fields it does not know, so a newer kubelet's answer still decodes.
As in kubelet_api.py, protobuf_messages.py builds the message classes at import time
and each has a typed dataclass here; `encode_*` / `decode_*` convert at the boundary
(both sides: the tests play the kubelet).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.agent.protobuf_messages import (
    INT64,
    MANY,
    MESSAGE,
    ONE,
    STRING,
    Field,
    Method,
    ProtoFile,
    serialize,
)

PACKAGE = "v1"
SERVICE = "v1.PodResourcesLister"
LIST_METHOD = f"/{SERVICE}/List"
GET_METHOD = f"/{SERVICE}/Get"
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

# The messages the agent reads, as api.proto names and numbers them.
_MESSAGES: dict[str, tuple[Field, ...]] = {
    "ListPodResourcesRequest": (),
    "ListPodResourcesResponse": (("pod_resources", 1, MESSAGE, MANY, "PodResources"),),
    "PodResources": (
        ("name", 1, STRING, ONE, ""),
        ("namespace", 2, STRING, ONE, ""),
        ("containers", 3, MESSAGE, MANY, "ContainerResources"),
    ),
    "ContainerResources": (
        ("name", 1, STRING, ONE, ""),
        ("devices", 2, MESSAGE, MANY, "ContainerDevices"),
        ("cpu_ids", 3, INT64, MANY, ""),
    ),
    "ContainerDevices": (
        ("resource_name", 1, STRING, ONE, ""),
        ("device_ids", 2, STRING, MANY, ""),
        ("topology", 3, MESSAGE, ONE, "TopologyInfo"),
    ),
    "TopologyInfo": (("nodes", 1, MESSAGE, MANY, "NUMANode"),),
    "NUMANode": (("ID", 1, INT64, ONE, ""),),
    "GetPodResourcesRequest": (
        ("pod_name", 1, STRING, ONE, ""),
        ("pod_namespace", 2, STRING, ONE, ""),
    ),
    "GetPodResourcesResponse": (("pod_resources", 1, MESSAGE, ONE, "PodResources"),),
}

_PROTO = ProtoFile(
    "k8s.io/kubelet/pkg/apis/podresources/v1/api.proto",
    PACKAGE,
    _MESSAGES,
    {
        SERVICE: (
            Method("List", "ListPodResourcesRequest", "ListPodResourcesResponse"),
            Method("Get", "GetPodResourcesRequest", "GetPodResourcesResponse"),
        )
    },
)


# --- typed messages ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Devices:
    """The devices of one resource a container was allocated."""

    resource: str
    ids: tuple[str, ...]


@dataclass(frozen=True)
class ContainerResources:
    name: str
    devices: tuple[Devices, ...] = ()


@dataclass(frozen=True)
class PodResources:
    namespace: str
    name: str
    containers: tuple[ContainerResources, ...] = ()


@dataclass(frozen=True)
class GetRequest:
    namespace: str
    name: str


def _pod_message(pod: PodResources) -> Any:
    return _PROTO.new(
        "PodResources",
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            _PROTO.new(
                "ContainerResources",
                name=container.name,
                devices=[
                    _PROTO.new(
                        "ContainerDevices",
                        resource_name=devices.resource,
                        device_ids=list(devices.ids),
                    )
                    for devices in container.devices
                ],
            )
            for container in pod.containers
        ],
    )


def _read_pod(message: Any) -> PodResources:
    return PodResources(
        namespace=str(message.namespace),
        name=str(message.name),
        containers=tuple(
            ContainerResources(
                str(container.name),
                tuple(
                    Devices(str(devices.resource_name), tuple(str(i) for i in devices.device_ids))
                    for devices in container.devices
                ),
            )
            for container in message.containers
        ),
    )


# --- List --------------------------------------------------------------------------------------
def encode_list_request(_: object = None) -> bytes:
    return serialize(_PROTO.new("ListPodResourcesRequest"))


def decode_list_request(data: bytes) -> None:
    _PROTO.parse("ListPodResourcesRequest", data)


def encode_list_response(pods: Sequence[PodResources]) -> bytes:
    return serialize(
        _PROTO.new("ListPodResourcesResponse", pod_resources=[_pod_message(pod) for pod in pods])
    )


def decode_list_response(data: bytes) -> list[PodResources]:
    return [_read_pod(pod) for pod in _PROTO.parse("ListPodResourcesResponse", data).pod_resources]


# --- Get ---------------------------------------------------------------------------------------
def encode_get_request(request: GetRequest) -> bytes:
    return serialize(
        _PROTO.new("GetPodResourcesRequest", pod_name=request.name, pod_namespace=request.namespace)
    )


def decode_get_request(data: bytes) -> GetRequest:
    message = _PROTO.parse("GetPodResourcesRequest", data)
    return GetRequest(str(message.pod_namespace), str(message.pod_name))


def encode_get_response(pod: PodResources) -> bytes:
    return serialize(_PROTO.new("GetPodResourcesResponse", pod_resources=_pod_message(pod)))


def decode_get_response(data: bytes) -> PodResources:
    return _read_pod(_PROTO.parse("GetPodResourcesResponse", data).pod_resources)
