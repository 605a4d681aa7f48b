"""PodGroup records (scheduling.x-k8s.io/v1alpha1, as kubernetes-sigs/scheduler-plugins)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cache.jsonobj import mapping, metadata
from cache.pod import parse_time

PODGROUP_GROUP = "scheduling.x-k8s.io"
PODGROUP_VERSION = "v1alpha1"
PODGROUP_PLURAL = "podgroups"


@dataclass(frozen=True, slots=True)
class PodGroupInfo:
    namespace: str
    name: str
    resource_version: str = ""
    min_member: int | None = None
    schedule_timeout_seconds: int | None = None
    created: float = 0.0
    problems: tuple[str, ...] = ()
    # Tells a PodGroup from one recreated under its name (status written, events).
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _positive_int(spec: Mapping[str, Any], field: str, problems: list[str]) -> int | None:
    value = spec.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"PodGroup spec.{field} must be a positive integer, got {value!r}")
        return None
    return value


def podgroup_from_api(obj: Mapping[str, Any]) -> PodGroupInfo:
    meta = metadata(obj)
    spec = mapping(mapping(obj).get("spec"))
    problems: list[str] = []
    min_member = _positive_int(spec, "minMember", problems)
    timeout = _positive_int(spec, "scheduleTimeoutSeconds", problems)
    return PodGroupInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        min_member=min_member,
        schedule_timeout_seconds=timeout,
        created=parse_time(meta.get("creationTimestamp")),
        problems=tuple(problems),
        uid=str(meta.get("uid") or ""),
    )
