"""The kubelet's device plugin API, `v1beta1`, without generated code.

The kubelet speaks gRPC over unix sockets in its device-plugin directory
(`/var/lib/kubelet/device-plugins/`): a plugin calls `v1beta1.Registration/Register`
on `kubelet.sock`, then the kubelet calls the plugin's `v1beta1.DevicePlugin` service
on the socket the plugin named. The messages are those of the kubelet's
`k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto` (proto3, package `v1beta1`):
the same message names, field names and field numbers, which are what the wire
carries. They are described here with `descriptor_pb2` and turned into classes at
import time, so there is no protoc step and no generated file to keep in step.

The message classes are dynamic, so nothing outside this module touches them: each
message the agent sends or receives has a typed dataclass here, and `encode_*` /
`decode_*` convert at the boundary (they are the serializers the gRPC handlers use).
The plugin fills DeviceSpec and CDIDevice in an Allocate answer only in the isolation
modes that use them (isolation.py); Mount it never fills, but it is described all the
same, so that what a kubelet sends always decodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

REGISTRATION_SERVICE = "v1beta1.Registration"
DEVICE_PLUGIN_SERVICE = "v1beta1.DevicePlugin"
REGISTER_METHOD = f"/{REGISTRATION_SERVICE}/Register"

_F = descriptor_pb2.FieldDescriptorProto
_STRING, _BOOL, _INT32, _INT64, _MESSAGE = (
    _F.TYPE_STRING,
    _F.TYPE_BOOL,
    _F.TYPE_INT32,
    _F.TYPE_INT64,
    _F.TYPE_MESSAGE,
)
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# (field name, number, type, label, message type name or "") per message, as api.proto.
_MESSAGES: dict[str, tuple[tuple[str, int, int, int, str], ...]] = {
    "DevicePluginOptions": (
        ("pre_start_required", 1, _BOOL, _ONE, ""),
        ("get_preferred_allocation_available", 2, _BOOL, _ONE, ""),
    ),
    "RegisterRequest": (
        ("version", 1, _STRING, _ONE, ""),
        ("endpoint", 2, _STRING, _ONE, ""),
        ("resource_name", 3, _STRING, _ONE, ""),
        ("options", 4, _MESSAGE, _ONE, "DevicePluginOptions"),
    ),
    "Empty": (),
    "ListAndWatchResponse": (("devices", 1, _MESSAGE, _MANY, "Device"),),
    "TopologyInfo": (("nodes", 1, _MESSAGE, _MANY, "NUMANode"),),
    "NUMANode": (("ID", 1, _INT64, _ONE, ""),),
    "Device": (
        ("ID", 1, _STRING, _ONE, ""),
        ("health", 2, _STRING, _ONE, ""),
        ("topology", 3, _MESSAGE, _ONE, "TopologyInfo"),
    ),
    "PreStartContainerRequest": (("devices_ids", 1, _STRING, _MANY, ""),),
    "PreStartContainerResponse": (),
    "PreferredAllocationRequest": (
        ("container_requests", 1, _MESSAGE, _MANY, "ContainerPreferredAllocationRequest"),
    ),
    "ContainerPreferredAllocationRequest": (
        ("available_deviceIDs", 1, _STRING, _MANY, ""),
        ("must_include_deviceIDs", 2, _STRING, _MANY, ""),
        ("allocation_size", 3, _INT32, _ONE, ""),
    ),
    "PreferredAllocationResponse": (
        ("container_responses", 1, _MESSAGE, _MANY, "ContainerPreferredAllocationResponse"),
    ),
    "ContainerPreferredAllocationResponse": (("deviceIDs", 1, _STRING, _MANY, ""),),
    "AllocateRequest": (("container_requests", 1, _MESSAGE, _MANY, "ContainerAllocateRequest"),),
    "ContainerAllocateRequest": (("devices_ids", 1, _STRING, _MANY, ""),),
    "AllocateResponse": (("container_responses", 1, _MESSAGE, _MANY, "ContainerAllocateResponse"),),
    "ContainerAllocateResponse": (
        ("envs", 1, _MESSAGE, _MANY, "ContainerAllocateResponse.EnvsEntry"),
        ("mounts", 2, _MESSAGE, _MANY, "Mount"),
        ("devices", 3, _MESSAGE, _MANY, "DeviceSpec"),
        ("annotations", 4, _MESSAGE, _MANY, "ContainerAllocateResponse.AnnotationsEntry"),
        ("cdi_devices", 5, _MESSAGE, _MANY, "CDIDevice"),
    ),
    "Mount": (
        ("container_path", 1, _STRING, _ONE, ""),
        ("host_path", 2, _STRING, _ONE, ""),
        ("read_only", 3, _BOOL, _ONE, ""),
    ),
    "DeviceSpec": (
        ("container_path", 1, _STRING, _ONE, ""),
        ("host_path", 2, _STRING, _ONE, ""),
        ("permissions", 3, _STRING, _ONE, ""),
    ),
    "CDIDevice": (("name", 1, _STRING, _ONE, ""),),
}
# proto3 `map<string, string>` fields are repeated nested entry messages marked map_entry.
_MAP_ENTRIES = {"ContainerAllocateResponse": ("EnvsEntry", "AnnotationsEntry")}


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto",
        package=VERSION,
        syntax="proto3",
    )
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for entry_name in _MAP_ENTRIES.get(name, ()):
            entry = message.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=_STRING, label=_ONE, json_name="key")
            entry.field.add(name="value", number=2, type=_STRING, label=_ONE, json_name="value")
        for field_name, number, kind, label, type_name in fields:
            added = message.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                added.type_name = f".{VERSION}.{type_name}"
    for service, methods in (
        (REGISTRATION_SERVICE, (("Register", "RegisterRequest", "Empty", False),)),
        (
            DEVICE_PLUGIN_SERVICE,
            (
                ("GetDevicePluginOptions", "Empty", "DevicePluginOptions", False),
                ("ListAndWatch", "Empty", "ListAndWatchResponse", True),
                (
                    "GetPreferredAllocation",
                    "PreferredAllocationRequest",
                    "PreferredAllocationResponse",
                    False,
                ),
                ("Allocate", "AllocateRequest", "AllocateResponse", False),
                (
                    "PreStartContainer",
                    "PreStartContainerRequest",
                    "PreStartContainerResponse",
                    False,
                ),
            ),
        ),
    ):
        described = proto.service.add(name=service.split(".", 1)[1])
        for method, request, response, streams in methods:
            described.method.add(
                name=method,
                input_type=f".{VERSION}.{request}",
                output_type=f".{VERSION}.{response}",
                server_streaming=streams,
            )
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())
# Dynamic classes: typed as Any on purpose, and used only through the functions below.
_CLASSES: dict[str, Any] = {
    name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{VERSION}.{name}"))
    for name in _MESSAGES
}


def _new(name: str, **fields: Any) -> Any:
    return _CLASSES[name](**fields)


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
class PluginOptions:
    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False


@dataclass(frozen=True)
class RegisterRequest:
    version: str
    endpoint: str
    resource_name: str
    options: PluginOptions = field(default_factory=PluginOptions)


@dataclass(frozen=True)
class Device:
    """One device as ListAndWatch reports it; `numa` None when the node is unknown."""

    id: str
    health: str = HEALTHY
    numa: int | None = None


@dataclass(frozen=True)
class ContainerPreferredRequest:
    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int


@dataclass(frozen=True)
class DeviceSpec:
    """A device node the runtime creates in the container (and allows in its cgroup)."""

    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class ContainerAllocation:
    """What one container gets: environment variables, container annotations, device
    nodes, and CDI device names (fully qualified: `vendor.com/class=name`)."""

    envs: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    devices: tuple[DeviceSpec, ...] = ()
    cdi_devices: tuple[str, ...] = ()


# --- Empty -------------------------------------------------------------------------------------
def encode_empty(_: object = None) -> bytes:
    return _bytes(_new("Empty"))


def decode_empty(data: bytes) -> None:
    _parse("Empty", data)


# --- registration ------------------------------------------------------------------------------
def _options(options: PluginOptions) -> Any:
    return _new(
        "DevicePluginOptions",
        pre_start_required=options.pre_start_required,
        get_preferred_allocation_available=options.get_preferred_allocation_available,
    )


def _read_options(message: Any) -> PluginOptions:
    return PluginOptions(
        bool(message.pre_start_required), bool(message.get_preferred_allocation_available)
    )


def encode_register_request(request: RegisterRequest) -> bytes:
    return _bytes(
        _new(
            "RegisterRequest",
            version=request.version,
            endpoint=request.endpoint,
            resource_name=request.resource_name,
            options=_options(request.options),
        )
    )


def decode_register_request(data: bytes) -> RegisterRequest:
    message = _parse("RegisterRequest", data)
    return RegisterRequest(
        str(message.version),
        str(message.endpoint),
        str(message.resource_name),
        _read_options(message.options),
    )


def encode_options(options: PluginOptions) -> bytes:
    return _bytes(_options(options))


def decode_options(data: bytes) -> PluginOptions:
    return _read_options(_parse("DevicePluginOptions", data))


# --- ListAndWatch ------------------------------------------------------------------------------
def encode_devices(devices: Sequence[Device]) -> bytes:
    listed = []
    for device in devices:
        message = _new("Device", ID=device.id, health=device.health)
        if device.numa is not None:
            message.topology.nodes.add(ID=device.numa)
        listed.append(message)
    return _bytes(_new("ListAndWatchResponse", devices=listed))


def decode_devices(data: bytes) -> list[Device]:
    message = _parse("ListAndWatchResponse", data)
    result = []
    for device in message.devices:
        nodes = [int(node.ID) for node in device.topology.nodes]
        result.append(Device(str(device.ID), str(device.health), nodes[0] if nodes else None))
    return result


# --- GetPreferredAllocation --------------------------------------------------------------------
def encode_preferred_request(requests: Sequence[ContainerPreferredRequest]) -> bytes:
    return _bytes(
        _new(
            "PreferredAllocationRequest",
            container_requests=[
                _new(
                    "ContainerPreferredAllocationRequest",
                    available_deviceIDs=list(request.available),
                    must_include_deviceIDs=list(request.must_include),
                    allocation_size=request.size,
                )
                for request in requests
            ],
        )
    )


def decode_preferred_request(data: bytes) -> list[ContainerPreferredRequest]:
    message = _parse("PreferredAllocationRequest", data)
    return [
        ContainerPreferredRequest(
            tuple(str(i) for i in request.available_deviceIDs),
            tuple(str(i) for i in request.must_include_deviceIDs),
            int(request.allocation_size),
        )
        for request in message.container_requests
    ]


def encode_preferred_response(responses: Sequence[Sequence[str]]) -> bytes:
    return _bytes(
        _new(
            "PreferredAllocationResponse",
            container_responses=[
                _new("ContainerPreferredAllocationResponse", deviceIDs=list(ids))
                for ids in responses
            ],
        )
    )


def decode_preferred_response(data: bytes) -> list[list[str]]:
    message = _parse("PreferredAllocationResponse", data)
    return [[str(i) for i in response.deviceIDs] for response in message.container_responses]


# --- Allocate ----------------------------------------------------------------------------------
def encode_allocate_request(containers: Sequence[Sequence[str]]) -> bytes:
    return _bytes(
        _new(
            "AllocateRequest",
            container_requests=[
                _new("ContainerAllocateRequest", devices_ids=list(ids)) for ids in containers
            ],
        )
    )


def decode_allocate_request(data: bytes) -> list[list[str]]:
    message = _parse("AllocateRequest", data)
    return [[str(i) for i in request.devices_ids] for request in message.container_requests]


def encode_allocate_response(containers: Sequence[ContainerAllocation]) -> bytes:
    return _bytes(
        _new(
            "AllocateResponse",
            container_responses=[
                _new(
                    "ContainerAllocateResponse",
                    envs=dict(container.envs),
                    annotations=dict(container.annotations),
                    devices=[
                        _new(
                            "DeviceSpec",
                            container_path=device.container_path,
                            host_path=device.host_path,
                            permissions=device.permissions,
                        )
                        for device in container.devices
                    ],
                    # Not _new: its own first parameter is called `name` too.
                    cdi_devices=[_CLASSES["CDIDevice"](name=cdi) for cdi in container.cdi_devices],
                )
                for container in containers
            ],
        )
    )


def decode_allocate_response(data: bytes) -> list[ContainerAllocation]:
    message = _parse("AllocateResponse", data)
    return [
        ContainerAllocation(
            dict(response.envs),
            dict(response.annotations),
            tuple(
                DeviceSpec(d.container_path, d.host_path, d.permissions) for d in response.devices
            ),
            tuple(str(c.name) for c in response.cdi_devices),
        )
        for response in message.container_responses
    ]


# --- PreStartContainer -------------------------------------------------------------------------
def encode_prestart_request(ids: Sequence[str]) -> bytes:
    return _bytes(_new("PreStartContainerRequest", devices_ids=list(ids)))


def decode_prestart_request(data: bytes) -> list[str]:
    return [str(i) for i in _parse("PreStartContainerRequest", data).devices_ids]


def encode_prestart_response(_: object = None) -> bytes:
    return _bytes(_new("PreStartContainerResponse"))
