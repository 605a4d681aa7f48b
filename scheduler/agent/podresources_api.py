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
As in kubelet_api.py, the message classes are built from a descriptor at import time
and each has a typed dataclass here; `encode_*` / `decode_*` convert at the boundary
(both sides: the tests play the kubelet).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "v1"
SERVICE = "v1.PodResourcesLister"
LIST_METHOD = f"/{SERVICE}/List"
GET_METHOD = f"/{SERVICE}/Get"
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _INT64, _MESSAGE = _F.TYPE_STRING, _F.TYPE_INT64, _F.TYPE_MESSAGE
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# (field name, number, type, label, message type name or "") per message, as api.proto.
_MESSAGES: dict[str, tuple[tuple[str, int, int, int, str], ...]] = {
    "ListPodResourcesRequest": (),
    "ListPodResourcesResponse": (("pod_resources", 1, _MESSAGE, _MANY, "PodResources"),),
    "PodResources": (
        ("name", 1, _STRING, _ONE, ""),
        ("namespace", 2, _STRING, _ONE, ""),
        ("containers", 3, _MESSAGE, _MANY, "ContainerResources"),
    ),
    "ContainerResources": (
        ("name", 1, _STRING, _ONE, ""),
        ("devices", 2, _MESSAGE, _MANY, "ContainerDevices"),
        ("cpu_ids", 3, _INT64, _MANY, ""),
    ),
    "ContainerDevices": (
        ("resource_name", 1, _STRING, _ONE, ""),
        ("device_ids", 2, _STRING, _MANY, ""),
        ("topology", 3, _MESSAGE, _ONE, "TopologyInfo"),
    ),
    "TopologyInfo": (("nodes", 1, _MESSAGE, _MANY, "NUMANode"),),
    "NUMANode": (("ID", 1, _INT64, _ONE, ""),),
    "GetPodResourcesRequest": (
        ("pod_name", 1, _STRING, _ONE, ""),
        ("pod_namespace", 2, _STRING, _ONE, ""),
    ),
    "GetPodResourcesResponse": (("pod_resources", 1, _MESSAGE, _ONE, "PodResources"),),
}


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="k8s.io/kubelet/pkg/apis/podresources/v1/api.proto",
        package=PACKAGE,
        syntax="proto3",
    )
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            added = message.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                added.type_name = f".{PACKAGE}.{type_name}"
    service = proto.service.add(name=SERVICE.split(".", 1)[1])
    for method, request, response in (
        ("List", "ListPodResourcesRequest", "ListPodResourcesResponse"),
        ("Get", "GetPodResourcesRequest", "GetPodResourcesResponse"),
    ):
        service.method.add(
            name=method,
            input_type=f".{PACKAGE}.{request}",
            output_type=f".{PACKAGE}.{response}",
        )
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())
# Dynamic classes: typed as Any on purpose, and used only through the functions below.
_CLASSES: dict[str, Any] = {
    name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))
    for name in _MESSAGES
}


def _parse(name: str, data: bytes) -> Any:
    message = _CLASSES[name]()
    message.ParseFromString(data)
    return message


def _bytes(message: Any) -> bytes:
    data = message.SerializeToString()
    assert isinstance(data, bytes)
    return data


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
    return _CLASSES["PodResources"](
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            _CLASSES["ContainerResources"](
                name=container.name,
                devices=[
                    _CLASSES["ContainerDevices"](
                        resource_name=devices.resource, device_ids=list(devices.ids)
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
    return _bytes(_CLASSES["ListPodResourcesRequest"]())


def decode_list_request(data: bytes) -> None:
    _parse("ListPodResourcesRequest", data)


def encode_list_response(pods: Sequence[PodResources]) -> bytes:
    return _bytes(
        _CLASSES["ListPodResourcesResponse"](pod_resources=[_pod_message(pod) for pod in pods])
    )


def decode_list_response(data: bytes) -> list[PodResources]:
    return [_read_pod(pod) for pod in _parse("ListPodResourcesResponse", data).pod_resources]


# --- Get ---------------------------------------------------------------------------------------
def encode_get_request(request: GetRequest) -> bytes:
    return _bytes(
        _CLASSES["GetPodResourcesRequest"](pod_name=request.name, pod_namespace=request.namespace)
    )


def decode_get_request(data: bytes) -> GetRequest:
    message = _parse("GetPodResourcesRequest", data)
    return GetRequest(str(message.pod_namespace), str(message.pod_name))


def encode_get_response(pod: PodResources) -> bytes:
    return _bytes(_CLASSES["GetPodResourcesResponse"](pod_resources=_pod_message(pod)))


def decode_get_response(data: bytes) -> PodResources:
    return _read_pod(_parse("GetPodResourcesResponse", data).pod_resources)
