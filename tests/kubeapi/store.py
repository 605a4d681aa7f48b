"""In-memory object storage with one global resourceVersion counter and watch fan-out.

Like etcd behind kube-apiserver: every write to any resource takes the next revision of a
single counter, so resourceVersions are comparable across resources. Stored objects are
never mutated after they are stored (each write stores a new dict), which lets one
serialization per object version serve every GET, LIST and watch event.

Watch semantics follow the apiserver watch cache (staging/src/k8s.io/apiserver/pkg/
storage/cacher): each resource keeps a bounded history of changes; a watch may start at
any resourceVersion >= (oldest kept change - 1), and an older one gets an ERROR event
with a 410 Expired Status ("too old resource version: N (M)"). A watcher with selectors
sees an object that starts matching as ADDED and one that stops matching as DELETED
(carrying the previous content with the new resourceVersion), as cacheWatcher.
convertToWatchEvent does.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from tests.kubeapi.resources import ResourceType
from tests.kubeapi.selectors import FieldSelector, LabelSelector

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class StoredObject:
    """One version of one object, with its serializations computed once, on demand."""

    __slots__ = ("_body", "_fields", "obj", "rtype", "rv")

    def __init__(self, rtype: ResourceType, obj: dict[str, Any], rv: int) -> None:
        self.rtype = rtype
        self.obj = obj
        self.rv = rv
        self._body: bytes | None = None  # JSON of the object without kind/apiVersion
        self._fields: dict[str, str] | None = None

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace") or "")

    @property
    def labels(self) -> dict[str, str]:
        return self.obj["metadata"].get("labels") or {}

    @property
    def fields(self) -> dict[str, str]:
        if self._fields is None:
            self._fields = self.rtype.selectable_fields(self.obj)
        return self._fields

    def _type_free_body(self) -> bytes:
        if self._body is None:
            rest = {k: v for k, v in self.obj.items() if k not in ("kind", "apiVersion")}
            self._body = dumps(rest)
        return self._body

    def json(self) -> bytes:
        """The object as GET returns it: kind and apiVersion first."""
        head = b'{"kind":"%s","apiVersion":"%s"' % (
            self.rtype.kind.encode(),
            self.rtype.api_version.encode(),
        )
        body = self._type_free_body()
        return head + (b"," + body[1:] if body != b"{}" else b"}")

    def to_dict(self) -> dict[str, Any]:
        """A private deep copy the caller may change."""
        copy: dict[str, Any] = json.loads(self.json())
        return copy

    def list_item_json(self) -> bytes:
        # Built-in types omit kind/apiVersion on list items (kubernetes/kubernetes#3030,
        # #63676); custom resources are unstructured and keep them.
        return self.json() if self.rtype.custom else self._type_free_body()


class Change:
    """One write: the new version (None when deleted) and the one it replaced."""

    __slots__ = ("_line", "kind", "obj", "prev", "rv")

    def __init__(self, kind: str, rv: int, obj: StoredObject, prev: StoredObject | None) -> None:
        self.kind = kind
        self.rv = rv
        # For DELETED, `obj` is the last content stamped with the deletion's
        # resourceVersion, as the API sends it.
        self.obj = obj
        self.prev = prev
        self._line: bytes | None = None

    def line(self) -> bytes:
        """The watch event line, serialized once and shared by every watcher."""
        if self._line is None:
            self._line = event_line(self.kind, self.obj.json())
        return self._line


def event_line(kind: str, obj_json: bytes) -> bytes:
    return b'{"type":"%s","object":%s}\n' % (kind.encode(), obj_json)


class WatchEnd:
    """Queue sentinel: finish the stream (clean end) or cut it (abrupt)."""

    __slots__ = ("abrupt",)

    def __init__(self, abrupt: bool) -> None:
        self.abrupt = abrupt


QueueItem = bytes | WatchEnd


class Watcher:
    """One open watch: its filter and the queue its HTTP stream drains."""

    def __init__(
        self,
        rtype: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        *,
        bookmarks: bool,
        max_backlog: int | None,
    ) -> None:
        self.rtype = rtype
        self.namespace = namespace
        self.label_selector = labels
        self.field_selector = fields
        self.bookmarks = bookmarks
        self.max_backlog = max_backlog
        self.queue: asyncio.Queue[QueueItem] = asyncio.Queue()
        self.closed = False
        self.on_abort: Callable[[], None] | None = None  # cuts the TCP connection
        self._unfiltered = labels.empty and fields.empty

    def matches(self, stored: StoredObject) -> bool:
        if self.namespace is not None and stored.namespace != self.namespace:
            return False
        if self._unfiltered:
            return True
        return self.label_selector.matches(stored.labels) and self.field_selector.matches(
            stored.fields
        )

    def line_for(self, change: Change) -> bytes | None:
        """The event this watcher should see for a change, or None."""
        if self._unfiltered and self.namespace is None:
            return change.line()
        now = change.kind != DELETED and self.matches(change.obj)
        before = change.prev is not None and self.matches(change.prev)
        if now and before:
            return change.line()
        if now:
            return change.line() if change.kind == ADDED else event_line(ADDED, change.obj.json())
        if before:
            if change.kind == DELETED:
                return change.line()
            assert change.prev is not None
            return event_line(DELETED, with_resource_version(change.prev, change.rv).json())
        return None

    def push(self, item: QueueItem) -> None:
        if self.closed:
            return
        self.queue.put_nowait(item)
        if self.max_backlog is not None and self.queue.qsize() > self.max_backlog:
            # The watch cache terminates watchers that cannot keep up ("Forcing watcher
            # close due to unresponsiveness"); the client sees the stream end.
            self.end(abrupt=False, discard_backlog=True)

    def end(self, *, abrupt: bool, discard_backlog: bool = False) -> None:
        if self.closed:
            return
        if discard_backlog or abrupt:
            while not self.queue.empty():
                self.queue.get_nowait()
        self.queue.put_nowait(WatchEnd(abrupt))
        self.closed = True
        if abrupt and self.on_abort is not None:
            self.on_abort()


def with_resource_version(stored: StoredObject, rv: int) -> StoredObject:
    meta = dict(stored.obj["metadata"])
    meta["resourceVersion"] = str(rv)
    obj = dict(stored.obj)
    obj["metadata"] = meta
    return StoredObject(stored.rtype, obj, rv)


class TooOld(Exception):
    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")


class ResourceStore:
    """Objects and change history of one resource type."""

    def __init__(self, rtype: ResourceType, history_size: int) -> None:
        self.rtype = rtype
        self.objects: dict[tuple[str, str], StoredObject] = {}
        self.history: deque[Change] = deque()
        self.history_size = history_size
        # A watch may start at any RV >= floor: every change after it is in `history`.
        # (The watch cache allows RV >= oldest kept - 1; the floor is the last evicted
        # change, the same or slightly more lenient when other resources wrote between.)
        self.floor = 0
        self.watchers: set[Watcher] = set()

    def record(self, change: Change) -> None:
        self.history.append(change)
        while len(self.history) > self.history_size:
            self.floor = self.history.popleft().rv
        for watcher in list(self.watchers):
            line = watcher.line_for(change)
            if line is not None:
                watcher.push(line)

    def changes_since(self, rv: int) -> Iterator[Change]:
        if rv < self.floor:
            raise TooOld(rv, self.floor)
        for change in self.history:
            if change.rv > rv:
                yield change

    def forget_history(self, current_rv: int) -> None:
        self.history.clear()
        self.floor = current_rv

    def sorted_objects(self) -> list[StoredObject]:
        return [self.objects[key] for key in sorted(self.objects)]


class Store:
    """All resource stores, sharing one resourceVersion counter (etcd's revision)."""

    def __init__(self, types: tuple[ResourceType, ...], history_size: int) -> None:
        self.rv = 0
        self.by_type = {rtype: ResourceStore(rtype, history_size) for rtype in types}
        # Validating admission of every write (tests/kubeapi/admission.py): called with
        # the kind, the object about to be stored and the stored one (None: a create);
        # raises the ApiError that refuses it.
        self.admit: Callable[[str, dict[str, Any], dict[str, Any] | None], None] | None = None

    def of(self, rtype: ResourceType) -> ResourceStore:
        return self.by_type[rtype]

    def get(self, rtype: ResourceType, namespace: str, name: str) -> StoredObject | None:
        return self.by_type[rtype].objects.get((namespace, name))

    def write(
        self, rtype: ResourceType, obj: dict[str, Any], prev: StoredObject | None
    ) -> StoredObject:
        """Store a new version (create when prev is None) and notify watchers.

        `obj` must be a fresh dict the caller no longer mutates; its metadata gets the
        new resourceVersion.
        """
        if self.admit is not None:
            self.admit(rtype.kind, obj, prev.obj if prev else None)
        self.rv += 1
        meta = dict(obj["metadata"])
        meta["resourceVersion"] = str(self.rv)
        obj["metadata"] = meta
        stored = StoredObject(rtype, obj, self.rv)
        resource = self.by_type[rtype]
        resource.objects[(stored.namespace, stored.name)] = stored
        resource.record(Change(MODIFIED if prev else ADDED, self.rv, stored, prev))
        return stored

    def remove(self, rtype: ResourceType, prev: StoredObject) -> StoredObject:
        self.rv += 1
        resource = self.by_type[rtype]
        del resource.objects[(prev.namespace, prev.name)]
        final = with_resource_version(prev, self.rv)
        resource.record(Change(DELETED, self.rv, final, prev))
        return final
