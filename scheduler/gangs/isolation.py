"""Crash isolation: an exception raised for one object or one gang stays with it.

The scheduler reads objects that tenants write. Parsing bounds every value it knows of
(cache.limits), but a bug or a shape nobody thought of must not end the process: the
process would restart, relist the same object and die again (a crash loop anyone who
may create a pod can cause). So the core applies each watch event, and plans each gang,
inside a guard: an exception is logged once with the object's key, becomes a problem of
that object (a Warning event and PodScheduled=False on a pod of ours, a failed attempt
with backoff for a gang), and everything else keeps being scheduled. Every watched kind
is guarded: pods, nodes and PodGroups with repairs of their own (SchedulingCore), every
other kind (namespaces, ElasticQuotas, other APIs' PodGroups, claims, PVs,
StorageClasses, CSINodes) by forgetting the object until an event of it applies.

What is never caught: BaseExceptions that are not Exceptions (asyncio.CancelledError,
KeyboardInterrupt, SystemExit: they stop the task or the process on purpose) and
MemoryError (the process as a whole is in trouble; restarting is the remedy).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cache.jsonobj import mapping, metadata

log = logging.getLogger(__name__)

ObjectKind = Literal[
    "Pod",
    "Node",
    "PodGroup",
    "Gang",
    # Every other watched kind (scheduler/kube/informer.py): a failed event makes the
    # object absent until one of its events applies cleanly (SchedulingCore._guarded).
    "Namespace",
    "ElasticQuota",
    "GangGroup",  # Volcano's and Kubernetes' own PodGroups (cache/gang_groups.py)
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "CSINode",
    "ResourceSlice",
    "DeviceClass",
    "ResourceClaim",
]

# Exceptions that are not one object's fault: re-raised, never isolated.
FATAL: tuple[type[BaseException], ...] = (MemoryError,)

# How much of an exception's message goes into a problem or a log line.
MESSAGE_CHARS = 200
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,251}[A-Za-z0-9])?$")
_GROUP_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def describe(error: BaseException) -> str:
    """`<ExcType>: message`, shortened; never raises."""
    try:
        text = str(error)
    except Exception:  # a message whose __str__ fails is no reason to fail here
        text = ""
    if len(text) > MESSAGE_CHARS:
        text = text[:MESSAGE_CHARS] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@dataclass(frozen=True, slots=True)
class Identity:
    """Who an object is, read without trusting any of its fields: a field that is not
    a plain name reads as empty."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def _name_of(value: object) -> str:
    return value if isinstance(value, str) and _NAME.match(value) else ""


def is_group_name(value: object) -> bool:
    """A gang name that cannot collide with another gang's key (as cache.pod checks)."""
    return isinstance(value, str) and _GROUP_NAME.match(value) is not None


def identify(obj: Mapping[str, Any], namespaced: bool = True) -> Identity:
    meta = metadata(obj)
    namespace = (_name_of(meta.get("namespace")) or "default") if namespaced else ""
    name = _name_of(meta.get("name"))
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > 256:
        uid = f"{namespace}/{name}"
    return Identity(namespace, name, uid)


def text_field(obj: Mapping[str, Any], *path: str) -> str:
    """A string field found by `path` from `obj`, or "" (any other type)."""
    value: object = obj
    for part in path:
        value = mapping(value).get(part)
    return value if isinstance(value, str) and len(value) <= 253 else ""


class FailureLog:
    """Failures seen per object, so each is logged once (a pod updated every second
    with the same broken field logs one line, not one a second). An entry goes when
    its object applies cleanly again or is deleted, so memory stays per live object."""

    def __init__(self) -> None:
        self._last: dict[tuple[ObjectKind, str], str] = {}

    def __len__(self) -> int:
        return len(self._last)

    def failed(self, kind: ObjectKind, key: str, what: str, error: BaseException) -> str:
        """Record the failure; logs it (with traceback) unless it repeats the last one
        for this object. Returns the problem message."""
        message = f"internal error while {what}: {describe(error)}"
        if self._last.get((kind, key)) != message:
            self._last[(kind, key)] = message
            log.error("%s %s: %s", kind, key, message, exc_info=error)
        return message

    def cleared(self, kind: ObjectKind, key: str) -> None:
        if self._last:
            self._last.pop((kind, key), None)

    def current(self) -> dict[tuple[ObjectKind, str], str]:
        return dict(self._last)
