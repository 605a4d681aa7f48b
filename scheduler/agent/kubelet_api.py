"""The kubelet's device plugin API, `v1beta1`, without generated code.

The kubelet speaks gRPC over unix sockets in its device-plugin directory
(`/var/lib/kubelet/device-plugins/`): a plugin calls `v1beta1.Registration/Register`
on `kubelet.sock`, then the kubelet calls the plugin's `v1beta1.DevicePlugin` service
on the socket the plugin named. The messages are those of the kubelet's
`k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto` (proto3, package `v1beta1`):
the same message names, field names and field numbers, which are what the wire
carries. They are described here and turned into classes at import time by
protobuf_messages.py, so there is no protoc step and no generated file to keep in step.

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

from scheduler.agent.protobuf_messages import (
    BOOL,
    INT32,
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

VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

REGISTRATION_SERVICE = "v1beta1.Registration"
DEVICE_PLUGIN_SERVICE = "v1beta1.DevicePlugin"
REGISTER_METHOD = f"/{REGISTRATION_SERVICE}/Register"

# The messages, as api.proto names and numbers them.
_MESSAGES: dict[str, tuple[Field, ...]] = {
    "DevicePluginOptions": (
        ("pre_start_required", 1, BOOL, ONE, ""),
        ("get_preferred_allocation_available", 2, BOOL, ONE, ""),
    ),
    "RegisterRequest": (
        ("version", 1, STRING, ONE, ""),
        ("endpoint", 2, STRING, ONE, ""),
        ("resource_name", 3, STRING, ONE, ""),
        ("options", 4, MESSAGE, ONE, "DevicePluginOptions"),
    ),
    "Empty": (),
    "ListAndWatchResponse": (("devices", 1, MESSAGE, MANY, "Device"),),
    "TopologyInfo": (("nodes", 1, MESSAGE, MANY, "NUMANode"),),
    "NUMANode": (("ID", 1, INT64, ONE, ""),),
    "Device": (
        ("ID", 1, STRING, ONE, ""),
        ("health", 2, STRING, ONE, ""),
        ("topology", 3, MESSAGE, ONE, "TopologyInfo"),
    ),
    "PreStartContainerRequest": (("devices_ids", 1, STRING, MANY, ""),),
    "PreStartContainerResponse": (),
    "PreferredAllocationRequest": (
        ("container_requests", 1, MESSAGE, MANY, "ContainerPreferredAllocationRequest"),
    ),
    "ContainerPreferredAllocationRequest": (
        ("available_deviceIDs", 1, STRING, MANY, ""),
        ("must_include_deviceIDs", 2, STRING, MANY, ""),
        ("allocation_size", 3, INT32, ONE, ""),
    ),
    "PreferredAllocationResponse": (
        ("container_responses", 1, MESSAGE, MANY, "ContainerPreferredAllocationResponse"),
    ),
    "ContainerPreferredAllocationResponse": (("deviceIDs", 1, STRING, MANY, ""),),
    "AllocateRequest": (("container_requests", 1, MESSAGE, MANY, "ContainerAllocateRequest"),),
    "ContainerAllocateRequest": (("devices_ids", 1, STRING, MANY, ""),),
    "AllocateResponse": (("container_responses", 1, MESSAGE, MANY, "ContainerAllocateResponse"),),
    "ContainerAllocateResponse": (
        ("envs", 1, MESSAGE, MANY, "ContainerAllocateResponse.EnvsEntry"),
        ("mounts", 2, MESSAGE, MANY, "Mount"),
        ("devices", 3, MESSAGE, MANY, "DeviceSpec"),
        ("annotations", 4, MESSAGE, MANY, "ContainerAllocateResponse.AnnotationsEntry"),
        ("cdi_devices", 5, MESSAGE, MANY, "CDIDevice"),
    ),
    "Mount": (
        ("container_path", 1, STRING, ONE, ""),
        ("host_path", 2, STRING, ONE, ""),
        ("read_only", 3, BOOL, ONE, ""),
    ),
    "DeviceSpec": (
        ("container_path", 1, STRING, ONE, ""),
        ("host_path", 2, STRING, ONE, ""),
        ("permissions", 3, STRING, ONE, ""),
    ),
    "CDIDevice": (("name", 1, STRING, ONE, ""),),
}

_PROTO = ProtoFile(
    "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto",
    VERSION,
    _MESSAGES,
    {
        REGISTRATION_SERVICE: (Method("Register", "RegisterRequest", "Empty"),),
        DEVICE_PLUGIN_SERVICE: (
            Method("GetDevicePluginOptions", "Empty", "DevicePluginOptions"),
            Method("ListAndWatch", "Empty", "ListAndWatchResponse", server_streaming=True),
            Method(
                "GetPreferredAllocation",
                "PreferredAllocationRequest",
                "PreferredAllocationResponse",
            ),
            Method("Allocate", "AllocateRequest", "AllocateResponse"),
            Method("PreStartContainer", "PreStartContainerRequest", "PreStartContainerResponse"),
        ),
    },
    # proto3 `map<string, string>` fields: the entry messages nested in their message.
    map_entries={"ContainerAllocateResponse": ("EnvsEntry", "AnnotationsEntry")},
)


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
    return serialize(_PROTO.new("Empty"))


def decode_empty(data: bytes) -> None:
    _PROTO.parse("Empty", data)


# --- registration ------------------------------------------------------------------------------
def _options(options: PluginOptions) -> Any:
    return _PROTO.new(
        "DevicePluginOptions",
        pre_start_required=options.pre_start_required,
        get_preferred_allocation_available=options.get_preferred_allocation_available,
    )


def _read_options(message: Any) -> PluginOptions:
    return PluginOptions(
        bool(message.pre_start_required), bool(message.get_preferred_allocation_available)
    )


def encode_register_request(request: RegisterRequest) -> bytes:
    return serialize(
        _PROTO.new(
            "RegisterRequest",
            version=request.version,
            endpoint=request.endpoint,
            resource_name=request.resource_name,
            options=_options(request.options),
        )
    )


def decode_register_request(data: bytes) -> RegisterRequest:
    message = _PROTO.parse("RegisterRequest", data)
    return RegisterRequest(
        str(message.version),
        str(message.endpoint),
        str(message.resource_name),
        _read_options(message.options),
    )


def encode_options(options: PluginOptions) -> bytes:
    return serialize(_options(options))


def decode_options(data: bytes) -> PluginOptions:
    return _read_options(_PROTO.parse("DevicePluginOptions", data))


# --- ListAndWatch ------------------------------------------------------------------------------
def encode_devices(devices: Sequence[Device]) -> bytes:
    listed = []
    for device in devices:
        message = _PROTO.new("Device", ID=device.id, health=device.health)
        if device.numa is not None:
            message.topology.nodes.add(ID=device.numa)
        listed.append(message)
    return serialize(_PROTO.new("ListAndWatchResponse", devices=listed))


def decode_devices(data: bytes) -> list[Device]:
    message = _PROTO.parse("ListAndWatchResponse", data)
    result = []
    for device in message.devices:
        nodes = [int(node.ID) for node in device.topology.nodes]
        result.append(Device(str(device.ID), str(device.health), nodes[0] if nodes else None))
    return result


# --- GetPreferredAllocation --------------------------------------------------------------------
def encode_preferred_request(requests: Sequence[ContainerPreferredRequest]) -> bytes:
    return serialize(
        _PROTO.new(
            "PreferredAllocationRequest",
            container_requests=[
                _PROTO.new(
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
    message = _PROTO.parse("PreferredAllocationRequest", data)
    return [
        ContainerPreferredRequest(
            tuple(str(i) for i in request.available_deviceIDs),
            tuple(str(i) for i in request.must_include_deviceIDs),
            int(request.allocation_size),
        )
        for request in message.container_requests
    ]


def encode_preferred_response(responses: Sequence[Sequence[str]]) -> bytes:
    return serialize(
        _PROTO.new(
            "PreferredAllocationResponse",
            container_responses=[
                _PROTO.new("ContainerPreferredAllocationResponse", deviceIDs=list(ids))
                for ids in responses
            ],
        )
    )


def decode_preferred_response(data: bytes) -> list[list[str]]:
    message = _PROTO.parse("PreferredAllocationResponse", data)
    return [[str(i) for i in response.deviceIDs] for response in message.container_responses]


# --- Allocate ----------------------------------------------------------------------------------
def encode_allocate_request(containers: Sequence[Sequence[str]]) -> bytes:
    return serialize(
        _PROTO.new(
            "AllocateRequest",
            container_requests=[
                _PROTO.new("ContainerAllocateRequest", devices_ids=list(ids)) for ids in containers
            ],
        )
    )


def decode_allocate_request(data: bytes) -> list[list[str]]:
    message = _PROTO.parse("AllocateRequest", data)
    return [[str(i) for i in request.devices_ids] for request in message.container_requests]


def encode_allocate_response(containers: Sequence[ContainerAllocation]) -> bytes:
    return serialize(
        _PROTO.new(
            "AllocateResponse",
            container_responses=[
                _PROTO.new(
                    "ContainerAllocateResponse",
                    envs=dict(container.envs),
                    annotations=dict(container.annotations),
                    devices=[
                        _PROTO.new(
                            "DeviceSpec",
                            container_path=device.container_path,
                            host_path=device.host_path,
                            permissions=device.permissions,
                        )
                        for device in container.devices
                    ],
                    cdi_devices=[
                        _PROTO.new("CDIDevice", name=cdi) for cdi in container.cdi_devices
                    ],
                )
                for container in containers
            ],
        )
    )


def decode_allocate_response(data: bytes) -> list[ContainerAllocation]:
    message = _PROTO.parse("AllocateResponse", data)
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
    return serialize(_PROTO.new("PreStartContainerRequest", devices_ids=list(ids)))


def decode_prestart_request(data: bytes) -> list[str]:
    return [str(i) for i in _PROTO.parse("PreStartContainerRequest", data).devices_ids]


def encode_prestart_response(_: object = None) -> bytes:
    return serialize(_PROTO.new("PreStartContainerResponse"))
