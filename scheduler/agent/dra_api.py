"""The kubelet's plugin registration API and its DRA API (`v1`, Kubernetes 1.36's
current version), without generated code.

- Plugin registration (`k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.proto`,
  package `pluginregistration`): the plugin serves `pluginregistration.Registration`
  on a socket in the kubelet's `plugins_registry` directory; the kubelet's plugin
  watcher finds the socket, calls GetInfo (type `DRAPlugin`, the driver's name, the
  endpoint of the DRA service, the services it offers: `v1.DRAPlugin`), connects to
  the endpoint, and says how it went with NotifyRegistrationStatus.
- DRA (`k8s.io/kubelet/pkg/apis/dra/v1/api.proto`, package
  `k8s.io.kubelet.pkg.apis.dra.v1`): the kubelet calls `DRAPlugin.NodePrepareResources`
  before a pod's containers start and `NodeUnprepareResources` after they are gone,
  naming claims by namespace, name and uid; the answer maps each claim's uid to its
  devices (with their CDI device IDs) or an error.

Message and field names and numbers are the protos' (what the wire carries), described
here and built by protobuf_messages.py. `share_id` is proto3 `optional` there; it is a
plain string here, the same bytes on the wire when set (an empty one is not sent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.agent.protobuf_messages import (
    BOOL,
    MANY,
    MESSAGE,
    ONE,
    STRING,
    Field,
    Method,
    ProtoFile,
    serialize,
)

REGISTRATION_PACKAGE = "pluginregistration"
REGISTRATION_SERVICE = f"{REGISTRATION_PACKAGE}.Registration"
DRA_PACKAGE = "k8s.io.kubelet.pkg.apis.dra.v1"
DRA_SERVICE = f"{DRA_PACKAGE}.DRAPlugin"
# What GetInfo lists in supported_versions: the DRA gRPC services the plugin offers
# (k8s.io/kubelet/pkg/apis/dra/v1.DRAPluginService).
DRA_SERVICE_VERSION = "v1.DRAPlugin"
DRA_PLUGIN_TYPE = "DRAPlugin"

_REGISTRATION_MESSAGES: dict[str, tuple[Field, ...]] = {
    "PluginInfo": (
        ("type", 1, STRING, ONE, ""),
        ("name", 2, STRING, ONE, ""),
        ("endpoint", 3, STRING, ONE, ""),
        ("supported_versions", 4, STRING, MANY, ""),
    ),
    "RegistrationStatus": (
        ("plugin_registered", 1, BOOL, ONE, ""),
        ("error", 2, STRING, ONE, ""),
    ),
    "RegistrationStatusResponse": (),
    "InfoRequest": (),
}

_REGISTRATION = ProtoFile(
    "k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.proto",
    REGISTRATION_PACKAGE,
    _REGISTRATION_MESSAGES,
    {
        REGISTRATION_SERVICE: (
            Method("GetInfo", "InfoRequest", "PluginInfo"),
            Method("NotifyRegistrationStatus", "RegistrationStatus", "RegistrationStatusResponse"),
        )
    },
)

_DRA_MESSAGES: dict[str, tuple[Field, ...]] = {
    "NodePrepareResourcesRequest": (("claims", 1, MESSAGE, MANY, "Claim"),),
    "NodePrepareResourcesResponse": (
        ("claims", 1, MESSAGE, MANY, "NodePrepareResourcesResponse.ClaimsEntry"),
    ),
    "NodePrepareResourceResponse": (
        ("devices", 1, MESSAGE, MANY, "Device"),
        ("error", 2, STRING, ONE, ""),
    ),
    "Device": (
        ("request_names", 1, STRING, MANY, ""),
        ("pool_name", 2, STRING, ONE, ""),
        ("device_name", 3, STRING, ONE, ""),
        ("cdi_device_ids", 4, STRING, MANY, ""),
        ("share_id", 5, STRING, ONE, ""),
    ),
    "NodeUnprepareResourcesRequest": (("claims", 1, MESSAGE, MANY, "Claim"),),
    "NodeUnprepareResourcesResponse": (
        ("claims", 1, MESSAGE, MANY, "NodeUnprepareResourcesResponse.ClaimsEntry"),
    ),
    "NodeUnprepareResourceResponse": (("error", 1, STRING, ONE, ""),),
    "Claim": (
        ("namespace", 1, STRING, ONE, ""),
        ("uid", 2, STRING, ONE, ""),
        ("name", 3, STRING, ONE, ""),
    ),
}

_DRA = ProtoFile(
    "k8s.io/kubelet/pkg/apis/dra/v1/api.proto",
    DRA_PACKAGE,
    _DRA_MESSAGES,
    {
        DRA_SERVICE: (
            Method(
                "NodePrepareResources",
                "NodePrepareResourcesRequest",
                "NodePrepareResourcesResponse",
            ),
            Method(
                "NodeUnprepareResources",
                "NodeUnprepareResourcesRequest",
                "NodeUnprepareResourcesResponse",
            ),
        )
    },
    map_entries={
        "NodePrepareResourcesResponse": (("ClaimsEntry", "NodePrepareResourceResponse"),),
        "NodeUnprepareResourcesResponse": (("ClaimsEntry", "NodeUnprepareResourceResponse"),),
    },
)


# --- typed messages ----------------------------------------------------------------------------
@dataclass(frozen=True)
class PluginInfo:
    type: str
    name: str
    endpoint: str
    supported_versions: tuple[str, ...]


@dataclass(frozen=True)
class RegistrationStatus:
    plugin_registered: bool
    error: str = ""


@dataclass(frozen=True)
class Claim:
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class PreparedDevice:
    """One device of a prepared claim: the requests it serves, where it is, and the CDI
    device IDs the runtime injects for it."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str = ""


@dataclass(frozen=True)
class PrepareResult:
    """One claim's answer: its devices, or an error (then the devices are ignored)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class UnprepareResult:
    error: str = ""


@dataclass(frozen=True)
class PrepareResponse:
    claims: Mapping[str, PrepareResult] = field(default_factory=dict)


@dataclass(frozen=True)
class UnprepareResponse:
    claims: Mapping[str, UnprepareResult] = field(default_factory=dict)


# --- registration ------------------------------------------------------------------------------
def encode_info_request(_: object = None) -> bytes:
    return serialize(_REGISTRATION.new("InfoRequest"))


def decode_info_request(data: bytes) -> None:
    _REGISTRATION.parse("InfoRequest", data)


def encode_plugin_info(info: PluginInfo) -> bytes:
    return serialize(
        _REGISTRATION.new(
            "PluginInfo",
            type=info.type,
            name=info.name,
            endpoint=info.endpoint,
            supported_versions=list(info.supported_versions),
        )
    )


def decode_plugin_info(data: bytes) -> PluginInfo:
    message = _REGISTRATION.parse("PluginInfo", data)
    return PluginInfo(
        message.type, message.name, message.endpoint, tuple(message.supported_versions)
    )


def encode_registration_status(status: RegistrationStatus) -> bytes:
    return serialize(
        _REGISTRATION.new(
            "RegistrationStatus", plugin_registered=status.plugin_registered, error=status.error
        )
    )


def decode_registration_status(data: bytes) -> RegistrationStatus:
    message = _REGISTRATION.parse("RegistrationStatus", data)
    return RegistrationStatus(bool(message.plugin_registered), message.error)


def encode_registration_status_response(_: object = None) -> bytes:
    return serialize(_REGISTRATION.new("RegistrationStatusResponse"))


def decode_registration_status_response(data: bytes) -> None:
    _REGISTRATION.parse("RegistrationStatusResponse", data)


# --- DRA ---------------------------------------------------------------------------------------
def _claims(claims: tuple[Claim, ...]) -> list[Any]:
    return [_DRA.new("Claim", namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


def _read_claims(message: Any) -> tuple[Claim, ...]:
    return tuple(Claim(c.namespace, c.uid, c.name) for c in message.claims)


def encode_prepare_request(claims: tuple[Claim, ...]) -> bytes:
    return serialize(_DRA.new("NodePrepareResourcesRequest", claims=_claims(claims)))


def decode_prepare_request(data: bytes) -> tuple[Claim, ...]:
    return _read_claims(_DRA.parse("NodePrepareResourcesRequest", data))


def encode_unprepare_request(claims: tuple[Claim, ...]) -> bytes:
    return serialize(_DRA.new("NodeUnprepareResourcesRequest", claims=_claims(claims)))


def decode_unprepare_request(data: bytes) -> tuple[Claim, ...]:
    return _read_claims(_DRA.parse("NodeUnprepareResourcesRequest", data))


def _device(device: PreparedDevice) -> Any:
    return _DRA.new(
        "Device",
        request_names=list(device.request_names),
        pool_name=device.pool_name,
        device_name=device.device_name,
        cdi_device_ids=list(device.cdi_device_ids),
        share_id=device.share_id,
    )


def encode_prepare_response(response: PrepareResponse) -> bytes:
    message = _DRA.new("NodePrepareResourcesResponse")
    for uid, result in response.claims.items():
        entry = message.claims[uid]
        entry.error = result.error
        entry.devices.extend(_device(d) for d in result.devices)
    return serialize(message)


def decode_prepare_response(data: bytes) -> PrepareResponse:
    message = _DRA.parse("NodePrepareResourcesResponse", data)
    return PrepareResponse(
        {
            uid: PrepareResult(
                tuple(
                    PreparedDevice(
                        tuple(d.request_names),
                        d.pool_name,
                        d.device_name,
                        tuple(d.cdi_device_ids),
                        d.share_id,
                    )
                    for d in result.devices
                ),
                result.error,
            )
            for uid, result in message.claims.items()
        }
    )


def encode_unprepare_response(response: UnprepareResponse) -> bytes:
    message = _DRA.new("NodeUnprepareResourcesResponse")
    for uid, result in response.claims.items():
        message.claims[uid].error = result.error
    return serialize(message)


def decode_unprepare_response(data: bytes) -> UnprepareResponse:
    message = _DRA.parse("NodeUnprepareResourcesResponse", data)
    return UnprepareResponse(
        {uid: UnprepareResult(result.error) for uid, result in message.claims.items()}
    )
