"""Protobuf message classes described in Python, with no protoc step and no generated file.

The agent speaks two kubelet gRPC APIs (kubelet_api.py: device plugins;
podresources_api.py: pod resources). Each lists its messages as plain tuples (names
and field numbers copied from the kubelet's `api.proto`, which are what the wire
carries) and hands them to `ProtoFile`, which builds a file descriptor, adds it to a
pool of its own and makes the message classes at import time. The classes are
dynamic, so they are typed `Any`: each API module keeps them private and converts to
and from its own typed dataclasses at the boundary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
STRING, BOOL, INT32, INT64, MESSAGE = (
    _F.TYPE_STRING,
    _F.TYPE_BOOL,
    _F.TYPE_INT32,
    _F.TYPE_INT64,
    _F.TYPE_MESSAGE,
)
ONE, MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# (field name, number, type, label, message type name relative to the package, or "").
Field = tuple[str, int, int, int, str]


@dataclass(frozen=True)
class Method:
    """One rpc of a service: its request and response message names."""

    name: str
    request: str
    response: str
    server_streaming: bool = False


class ProtoFile:
    """The message classes of one proto3 file, built once from its description."""

    def __init__(
        self,
        path: str,
        package: str,
        messages: Mapping[str, Sequence[Field]],
        services: Mapping[str, Sequence[Method]],
        map_entries: Mapping[str, Sequence[str | tuple[str, str]]] | None = None,
    ) -> None:
        proto = descriptor_pb2.FileDescriptorProto(name=path, package=package, syntax="proto3")
        for name, fields in messages.items():
            message = proto.message_type.add(name=name)
            # proto3 `map<string, V>` fields are repeated nested entry messages marked
            # map_entry; the field itself names `Message.XEntry` as its type. An entry
            # given as a name alone has string values; as (name, message), values of
            # that message type (relative to the package).
            for entry_spec in (map_entries or {}).get(name, ()):
                entry_name, value_type = (
                    (entry_spec, "") if isinstance(entry_spec, str) else entry_spec
                )
                entry = message.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=STRING, label=ONE, json_name="key")
                value = entry.field.add(name="value", number=2, label=ONE, json_name="value")
                value.type = MESSAGE if value_type else STRING
                if value_type:
                    value.type_name = f".{package}.{value_type}"
            for field_name, number, kind, label, type_name in fields:
                added = message.field.add(name=field_name, number=number, type=kind, label=label)
                if type_name:
                    added.type_name = f".{package}.{type_name}"
        for service, methods in services.items():
            described = proto.service.add(name=service.removeprefix(f"{package}."))
            for method in methods:
                described.method.add(
                    name=method.name,
                    input_type=f".{package}.{method.request}",
                    output_type=f".{package}.{method.response}",
                    server_streaming=method.server_streaming,
                )
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        self._classes: dict[str, Any] = {
            name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
            for name in messages
        }

    # `name` is positional-only so that a message's own field may be called `name` too.
    def new(self, name: str, /, **fields: Any) -> Any:
        return self._classes[name](**fields)

    def parse(self, name: str, data: bytes) -> Any:
        message = self._classes[name]()
        message.ParseFromString(data)
        return message


def serialize(message: Any) -> bytes:
    data = message.SerializeToString()
    assert isinstance(data, bytes)
    return data
