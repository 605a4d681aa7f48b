"""protobuf_messages.ProtoFile: message classes built from a description, as the two
kubelet API modules use it."""

from __future__ import annotations

from scheduler.agent.protobuf_messages import (
    INT64,
    MANY,
    MESSAGE,
    ONE,
    STRING,
    Method,
    ProtoFile,
    serialize,
)

_ITEM = (("name", 1, STRING, ONE, ""), ("labels", 2, MESSAGE, MANY, "Item.LabelsEntry"))


def _file(package: str, *item_extra: tuple[str, int, int, int, str]) -> ProtoFile:
    return ProtoFile(
        f"test/{package}/api.proto",
        package,
        {
            "Item": _ITEM + item_extra,
            "List": (("items", 1, MESSAGE, MANY, "Item"),),
        },
        {f"{package}.Lister": (Method("List", "List", "List", server_streaming=True),)},
        map_entries={"Item": ("LabelsEntry",)},
    )


def test_a_field_called_name_and_a_map_field_round_trip() -> None:
    proto = _file("one")
    data = serialize(proto.new("List", items=[proto.new("Item", name="a", labels={"k": "v"})]))
    items = proto.parse("List", data).items
    assert [(item.name, dict(item.labels)) for item in items] == [("a", {"k": "v"})]


def test_a_reader_without_a_field_skips_it() -> None:
    # What lets an older description read a newer kubelet's answer.
    newer, older = _file("newer", ("size", 3, INT64, ONE, "")), _file("older")
    data = serialize(newer.new("Item", name="a", size=7))
    assert older.parse("Item", data).name == "a"
    assert newer.parse("Item", data).size == 7


def test_the_service_is_described_in_the_package() -> None:
    proto = _file("svc")
    service = proto.new("List").DESCRIPTOR.file.services_by_name["Lister"]
    method = service.methods_by_name["List"]
    assert service.full_name == "svc.Lister"
    assert method.input_type.full_name == "svc.List"
    assert method.server_streaming
