"""DeviceClasses as slim records: the selectors every request of the class applies, the
configuration passed to its devices, and the extended resource it may stand for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cache.dra import fields as f
from cache.jsonobj import MALFORMED, mapping, metadata, text_field


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    resource_version: str = ""
    selectors: tuple[str, ...] = ()  # CEL expressions, all must match
    config: tuple[f.OpaqueConfig, ...] = ()
    # spec.extendedResourceName (DRAExtendedResource): pods asking for that extended
    # resource on a node that does not advertise it get devices of this class
    # (docs/dra.md, "Extended resources"; the store says which class wins a name).
    extended_resource_name: str = ""
    problems: tuple[str, ...] = ()
    # metadata.creationTimestamp in seconds (0.0 when absent or unreadable): of two
    # classes naming one extended resource, the newer wins (kube-scheduler 1.36).
    created: float = 0.0


def _created(meta: Mapping[str, Any]) -> float:
    text = meta.get("creationTimestamp")
    if not isinstance(text, str) or not text:
        return 0.0
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def cel_selectors(raw: object, what: str) -> tuple[str, ...]:
    """DeviceSelectors: each must be a CEL selector (the only kind v1 knows; a future
    kind is refused rather than skipped, as the allocator refuses it)."""
    result = []
    for index, item in enumerate(f.items(raw, what, f.MAX_SELECTORS)):
        cel = mapping(item).get("cel")
        if cel is None:
            raise ValueError(f"{what}[{index}]: only CEL selectors are supported")
        result.append(
            f.text(
                mapping(cel).get("expression"),
                f"{what}[{index}].cel.expression",
                limit=f.MAX_CEL_TEXT,
                required=True,
            )
        )
    return tuple(result)


def class_from_api(obj: Mapping[str, Any]) -> DeviceClass:
    """Never raises: a class that cannot be read keeps its name and the problem (its
    requests are refused with it)."""
    meta = metadata(obj)
    name = text_field(meta, "name", f.MAX_NAME)
    version = text_field(meta, "resourceVersion", 64)
    spec = mapping(mapping(obj).get("spec"))
    try:
        selectors = cel_selectors(spec.get("selectors"), "spec.selectors")
        config = tuple(
            f.opaque_config(item, f"spec.config[{i}]")
            for i, item in enumerate(f.items(spec.get("config"), "spec.config", f.MAX_CONFIG))
        )
        extended = f.text(spec.get("extendedResourceName"), "spec.extendedResourceName")
    except MALFORMED as error:
        return DeviceClass(
            name=name,
            resource_version=version,
            problems=(f"deviceclass {name!r}: {error}",),
            created=_created(meta),
        )
    return DeviceClass(
        name=name,
        resource_version=version,
        selectors=selectors,
        config=config,
        extended_resource_name=extended,
        created=_created(meta),
    )
