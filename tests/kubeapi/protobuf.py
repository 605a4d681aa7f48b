"""Kubernetes' protobuf encoding, decoded for the types a client sends in it here: core/v1
Secret and the DeleteOptions of a delete (Helm's release storage writes and deletes its
Secrets through client-go's typed client, which sends protobuf for built-in types).

The envelope (k8s.io/apimachinery/pkg/runtime/serializer/protobuf): the magic bytes
"k8s\\0", then a runtime.Unknown message: typeMeta (1: apiVersion 1, kind 2), raw (2:
the object's message), contentEncoding (3), contentType (4). Field numbers of Secret and
ObjectMeta are those of k8s.io/api/core/v1/generated.proto and
k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto. EMULATOR GUESS: only the fields
a client sets on create and update are read (name, generateName, namespace,
resourceVersion, labels, annotations, finalizers; data, type, stringData, immutable;
every field of DeleteOptions);
any other field of ObjectMeta that is set is refused rather than dropped unseen.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    pass


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ProtobufError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field: an int for varints, bytes for length-delimited."""
    at = 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            length, at = _varint(data, at)
            if at + length > len(data):
                raise ProtobufError("truncated field")
            yield number, data[at : at + length]
            at += length
        else:
            raise ProtobufError(f"wire type {wire} is not used by these messages")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a string")
    return value.decode()


def _entry(value: int | bytes) -> tuple[str, bytes]:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a map entry")
    key, item = "", b""
    for number, part in fields(value):
        if number == 1:
            key = _text(part)
        elif number == 2 and isinstance(part, bytes):
            item = part
    return key, item


_META_STRINGS = {1: "name", 2: "generateName", 3: "namespace", 6: "resourceVersion"}


def _object_meta(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for number, value in fields(data):
        if number in _META_STRINGS:
            meta[_META_STRINGS[number]] = _text(value)
        elif number in (11, 12):
            key, item = _entry(value)
            meta.setdefault("labels" if number == 11 else "annotations", {})[key] = item.decode()
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
        elif value in (b"", 0):
            continue  # the encoder writes every non-pointer field, unset ones empty
        else:
            raise ProtobufError(f"ObjectMeta field {number} is not decoded here")
    return meta


def _secret(data: bytes) -> dict[str, Any]:
    secret: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret"}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            secret["metadata"] = _object_meta(value)
        elif number in (2, 4):
            key, item = _entry(value)
            if number == 2:
                secret.setdefault("data", {})[key] = base64.b64encode(item).decode()
            else:
                secret.setdefault("stringData", {})[key] = item.decode()
        elif number == 3:
            secret["type"] = _text(value)
        elif number == 5:
            secret["immutable"] = bool(value)
        elif value not in (b"", 0):
            raise ProtobufError(f"Secret field {number} is not decoded here")
    return secret


def _delete_options(data: bytes) -> dict[str, Any]:
    options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    for number, value in fields(data):
        if number == 1 and isinstance(value, int):
            options["gracePeriodSeconds"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 2 and isinstance(value, bytes):
            names = {1: "uid", 2: "resourceVersion"}
            options["preconditions"] = {names[n]: _text(v) for n, v in fields(value) if n in names}
        elif number == 3:
            options["orphanDependents"] = bool(value)
        elif number == 4:
            options["propagationPolicy"] = _text(value)
        elif number == 5:
            options.setdefault("dryRun", []).append(_text(value))
        elif value not in (b"", 0):
            raise ProtobufError(f"DeleteOptions field {number} is not decoded here")
    return options


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded Secret or DeleteOptions; ProtobufError for
    anything else."""
    if not body.startswith(MAGIC):
        raise ProtobufError("no protobuf magic")
    api_version = kind = ""
    raw = b""
    for number, value in fields(body[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            for part_number, part in fields(value):
                if part_number == 1:
                    api_version = _text(part)
                elif part_number == 2:
                    kind = _text(part)
        elif number == 2 and isinstance(value, bytes):
            raw = value
    if (api_version, kind) == ("v1", "Secret"):
        return _secret(raw)
    if kind == "DeleteOptions":
        return _delete_options(raw)
    raise ProtobufError(f"{api_version} {kind} is not decoded from protobuf here")
