"""KubeApiEmulator: an aiohttp server that answers as kube-apiserver does for a scheduler.

Served: core/v1 pods (with status and binding subresources), nodes (status), events;
events.k8s.io/v1 events; coordination.k8s.io/v1 leases; the PodGroup custom resource
scheduling.x-k8s.io/v1alpha1 (status subresource), which a switch removes; core/v1
persistentvolumeclaims and persistentvolumes (status), storage.k8s.io/v1 storageclasses
and csinodes; resource.k8s.io/v1 resourceslices, deviceclasses, resourceclaims (status)
and resourceclaimtemplates, validated as Kubernetes 1.36 does (tests/kubeapi/dra/,
docs/dra.md); discovery.
Verbs: list, watch, get, create, update, patch (merge, strategic merge, JSON patch),
delete. Behaviour that is not taken from the API reference or the apiserver source is
marked "EMULATOR GUESS" where it is implemented.

Known simplifications (each an EMULATOR GUESS or an omission, never needed by the
scheduler):
- list honours `limit`/`continue` (pager.py: later pages come from the first page's
  resourceVersion; a token expires with the watch history) but ignores
  `resourceVersion`/`resourceVersionMatch` (always the latest state, which satisfies
  "not older than"); the options the API server refuses are refused (list_options.py);
  a watch with `sendInitialEvents=true` (the watch-list stream, behind `watch_list`, the
  WatchList feature gate) starts with ADDED events of the current state and, when
  bookmarks are allowed, the initial-events-end BOOKMARK (watch_stream.py);
- namespaces need not exist; names and labels are validated (validation.py); finalizers
  hold a deleted object until removed (writes.py); the only admission is the not-ready
  taint on new Nodes, which an emulated node lifecycle controller takes off once the
  node is Ready (node_lifecycle.py); no authentication (plain HTTP), no server-side
  apply (415), no protobuf;
- a watch without timeoutSeconds stays open until the client leaves (the real server
  picks a random 30-60 min timeout);
- bookmarks come every `bookmark_interval` seconds (real: about every minute) and once
  2 s before the watch's timeout, as the watch cache does (watch_stream.py).

Everything runs on the caller's event loop; the fault-injection and seeding methods are
plain methods to call from the test between awaits.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.kubeapi import (
    admission,
    errors,
    eviction,
    list_options,
    node_lifecycle,
    protobuf,
    rbac,
    strategy,
    writes,
)
from tests.kubeapi.admission import AccessControl
from tests.kubeapi.errors import ApiError
from tests.kubeapi.pager import Pager
from tests.kubeapi.rbac import RbacAuthorizer
from tests.kubeapi.resources import (
    ALL_TYPES,
    CRD_TYPES,
    NODES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    ResourceType,
    find_type,
)
from tests.kubeapi.routing import (
    Route,
    discovery_document,
    json_response,
    parse_route,
    path_parts,
    verb_of,
)
from tests.kubeapi.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)
from tests.kubeapi.store import Store, StoredObject, dumps, event_line
from tests.kubeapi.watch_stream import StreamHold, WatchParams, WatchSettings, serve_watch

# What kube-apiserver says of a watch whose revision etcd compacted
# (k8s.io/apiserver storage/etcd3 watcher: errors.NewResourceExpired).
EXPIRED_WATCH = "The resourceVersion for the provided watch is too old."


@dataclass(frozen=True)
class RequestRecord:
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    status: int


@dataclass(frozen=True)
class BindRecord:
    namespace: str
    name: str
    node: str
    resource_version: int


@dataclass
class _Fault:
    verb: str
    resource: str
    subresource: str
    skip: int
    remaining: int
    status: int
    committed: bool  # apply the write, then answer the error anyway

    def fires(self, verb: str, resource: str, subresource: str) -> bool:
        if (verb, resource, subresource) != (self.verb, self.resource, self.subresource):
            return False
        if self.remaining <= 0:
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        self.remaining -= 1
        return True


class KubeApiEmulator:
    """An in-memory Kubernetes API server for tests and benchmarks."""

    def __init__(
        self,
        *,
        history_size: int = 10_000,
        bookmark_interval: float = 1.0,
        crd_present: bool = True,
        graceful_delete: bool = False,
        kubelet_delay: float | None = 0.0,
        max_watch_backlog: int | None = None,
        too_large_wait: float = 3.0,
        watch_list: bool = True,
        request_log_size: int = 10_000,
        node_ready_delay: float | None = 0.0,
    ) -> None:
        self.store = Store(ALL_TYPES, history_size)
        self.pager = Pager()
        self.bookmark_interval = bookmark_interval
        self.max_watch_backlog = max_watch_backlog
        self.too_large_wait = too_large_wait
        # The WatchList feature gate: False refuses `sendInitialEvents` on watches (422),
        # as a server without it does.
        self.watch_list = watch_list
        self._crd_present = crd_present
        self.down = False  # during an `outage`
        # Types answered 404, as where their CRD is not installed or their API is off.
        self.unserved: set[ResourceType] = set()
        self._graceful = graceful_delete
        self._kubelet_delay = kubelet_delay
        # Seconds after a Ready node's write until the emulated node lifecycle controller
        # takes its not-ready taint off; None: never (a node that stays not ready).
        self._node_ready_delay = node_ready_delay
        self._bind_delay = 0.0
        # hold_binds: binds let through before the hold, and the gate the rest wait at.
        self._binds_before_hold = 0
        self._bind_gate: asyncio.Event | None = None
        self.binds_held = 0  # binds waiting at the gate now
        self._faults: list[_Fault] = []
        # (verb, resource, subresource) of requests read and never answered, and the
        # handlers held on them (released at stop).
        self._black_holes: set[tuple[str, str, str]] = set()
        self._held: set[asyncio.Future[None]] = set()
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self.request_log: deque[RequestRecord] = deque(maxlen=request_log_size)
        self.bind_log: list[BindRecord] = []
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._host = "127.0.0.1"
        self._port = 0
        self._started = strategy.timestamp()
        self._timers: set[asyncio.TimerHandle] = set()
        # hold_watch_streams: the hold new watches of a resource (by plural) get.
        self._stream_holds: dict[str, StreamHold] = {}
        # None: every request is allowed (no authentication, no authorization).
        self.authorizer: RbacAuthorizer | None = None
        self._access: AccessControl | None = None

    @property
    def access(self) -> AccessControl | None:
        """Users by bearer token, RBAC per user and ValidatingAdmissionPolicies
        (tests/kubeapi/admission.py); None: no authentication, no admission."""
        return self._access

    @access.setter
    def access(self, access: AccessControl | None) -> None:
        self._access = access
        self.store.admit = access.admit_write if access is not None else None

    # ----------------------------------------------------------------- lifecycle
    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}"

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on host:port (0 picks a free port); returns the base URL."""
        # handler_cancellation: a client that goes away cancels its watch handler at once.
        self._runner = web.AppRunner(self.make_app(), handler_cancellation=True, access_log=None)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, host, port)
        await self._site.start()
        server = self._site._server
        assert isinstance(server, asyncio.base_events.Server)
        self._host, self._port = server.sockets[0].getsockname()[:2]
        return self.base_url

    async def stop(self) -> None:
        self.release_watch_streams()
        self.drop_watches()
        for held in list(self._held):
            held.cancel()
        for timer in list(self._timers):
            timer.cancel()
        self._timers.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None

    async def __aenter__(self) -> KubeApiEmulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def outage(self, seconds: float = 0.0, *, until: asyncio.Event | None = None) -> None:
        """Stop listening for `seconds`, or until `until` is set (connections refused,
        watches cut), then serve again on the same port: a kube-apiserver restart as
        clients see it. `down` is True while it lasts."""
        assert self._runner is not None and self._site is not None
        self.drop_watches()
        await self._site.stop()
        server = self._runner.server
        if server is not None:
            await server.shutdown(0.1)  # close kept-alive client connections too
        self.down = True
        try:
            if until is not None:
                await until.wait()
            else:
                await asyncio.sleep(seconds)
        finally:
            self.down = False
        self._site = web.TCPSite(self._runner, self._host, self._port)
        await self._site.start()

    # ------------------------------------------------------------ fault injection
    def fail_next_binds(
        self, count: int, status: int = 500, after: int = 0, *, committed: bool = False
    ) -> None:
        """Let `after` binds through, then fail the next `count` with `status`.

        With committed=True the pod is bound anyway and only the answer is an error
        (a response lost after the write).
        """
        self.fail_requests("create", "pods", "binding", count, status, after, committed=committed)

    def fail_requests(
        self,
        verb: str,
        resource: str,
        subresource: str = "",
        count: int = 1,
        status: int = 500,
        after: int = 0,
        *,
        committed: bool = False,
    ) -> None:
        """Generic form of fail_next_binds for any (verb, resource, subresource)."""
        self._faults.append(_Fault(verb, resource, subresource, after, count, status, committed))

    def black_hole(self, verb: str, resource: str, subresource: str = "") -> None:
        """Read every later request of this kind and never answer it (the connection
        stays open until the client gives up): a proxy or an overloaded API server that
        black-holes one kind of request. It is recorded with status 0 and counted."""
        self._black_holes.add((verb, resource, subresource))

    def lift_black_holes(self) -> None:
        """Answer later requests again (those already held stay unanswered)."""
        self._black_holes.clear()

    def clear_faults(self) -> None:
        """Forget every injected failure not yet used up: the server is healthy again."""
        self._faults.clear()

    def bind_delay(self, seconds: float) -> None:
        """Every later bind waits this long before it is processed."""
        self._bind_delay = seconds

    def hold_binds(self, after: int = 0) -> None:
        """Let `after` more binds through, then hold every later one before it is
        processed, until `release_binds`: a bind in flight for exactly as long as a test
        needs, whatever the machine's speed (`binds_held` counts those waiting)."""
        self._binds_before_hold = after
        self._bind_gate = asyncio.Event()

    def release_binds(self) -> None:
        """Process the held binds (as a slow server finally would) and hold no more."""
        if self._bind_gate is not None:
            self._bind_gate.set()
        self._bind_gate = None

    def drop_watches(self) -> int:
        """Cut every open watch connection abruptly; returns how many were cut."""
        return self._end_watches(abrupt=True)

    def end_watches(self) -> int:
        """End every open watch cleanly (as a server-side timeout does)."""
        return self._end_watches(abrupt=False)

    def _end_watches(self, *, abrupt: bool, rtype: ResourceType | None = None) -> int:
        count = 0
        for resource in self.store.by_type.values():
            if rtype is not None and resource.rtype is not rtype:
                continue
            for watcher in list(resource.watchers):
                watcher.end(abrupt=abrupt)
                count += 1
            resource.watchers.clear()
        return count

    def expire_watches(self, plural: str) -> int:
        """Compact the history of one resource past every open watch of it: each gets
        an ERROR event with a 410 Expired Status and ends, as the real server ends a
        watch whose revision etcd compacted (errors.NewResourceExpired); a watch from a
        version older than now gets 410 too. Returns how many watches were ended."""
        count = 0
        line = event_line("ERROR", dumps(errors.status_body(410, "Expired", EXPIRED_WATCH)))
        for resource in self.store.by_type.values():
            if resource.rtype.plural != plural:
                continue
            for watcher in list(resource.watchers):
                watcher.push(line)
                watcher.end(abrupt=False)
                count += 1
            resource.watchers.clear()
            resource.forget_history(self.store.rv)
        return count

    def hold_watch_streams(self, plural: str, after: int = 1) -> None:
        """Watches of `plural` opened from now on write `after` lines (their first
        socket write at least), then wait until release_watch_streams: a relist's
        stream held half-way, at a point the test chooses."""
        self._stream_holds[plural] = StreamHold(after)

    def watch_streams_held(self, plural: str) -> int:
        """Streams of `plural` waiting at the hold now."""
        hold = self._stream_holds.get(plural)
        return hold.waiting if hold is not None else 0

    def release_watch_streams(self) -> None:
        for hold in self._stream_holds.values():
            hold.gate.set()
        self._stream_holds.clear()

    def restart(self, new_history: bool = True) -> None:
        """A kube-apiserver restart: watches cut; with new_history the watch caches
        start over, so a watch resumed from an earlier resourceVersion gets 410.
        Objects survive and the resourceVersion keeps growing."""
        self.drop_watches()
        if new_history:
            self.pager.forget()
            for resource in self.store.by_type.values():
                resource.forget_history(self.store.rv)

    def crd_present(self, flag: bool) -> None:
        """Install or remove the PodGroup CRD. Removing it ends PodGroup watches and
        drops every PodGroup (EMULATOR GUESS: without the DELETED events a real CRD
        deletion would send first)."""
        if self._crd_present and not flag:
            for rtype in CRD_TYPES:  # PodGroups and ElasticQuotas
                self._end_watches(abrupt=False, rtype=rtype)
                resource = self.store.of(rtype)
                resource.objects.clear()
                resource.forget_history(self.store.rv)
        self._crd_present = flag

    @property
    def has_crd(self) -> bool:
        return self._crd_present

    def graceful(self, enabled: bool = True, kubelet_delay: float | None = 0.0) -> None:
        """Graceful pod deletion: DELETE of a bound, running pod sets deletionTimestamp
        (MODIFIED) and the emulated kubelet removes it `kubelet_delay` seconds later
        (None: never; call finish_deletion)."""
        self._graceful = enabled
        self._kubelet_delay = kubelet_delay

    # ------------------------------------------------------------- introspection
    def request_counts(self) -> Counter[tuple[str, str, str]]:
        return Counter(self._counts)

    def request_count(
        self, verb: str | None = None, resource: str | None = None, subresource: str | None = None
    ) -> int:
        return sum(
            n
            for (v, r, s), n in self._counts.items()
            if (verb is None or v == verb)
            and (resource is None or r == resource)
            and (subresource is None or s == subresource)
        )

    def reset_request_counts(self) -> None:
        self._counts.clear()
        self.request_log.clear()

    def open_watches(self, resource: str | None = None) -> int:
        """Watches serving events now: one that was ended (`drop_watches`) no longer
        counts, even before its handler has finished, so a test that cuts the watches can
        wait for the client's new one."""
        return sum(
            sum(1 for watcher in r.watchers if not watcher.closed)
            for r in self.store.by_type.values()
            if resource is None or r.rtype.plural == resource
        )

    @property
    def resource_version(self) -> int:
        return self.store.rv

    def get(self, rtype: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        stored = self.store.get(rtype, namespace, name)
        return stored.to_dict() if stored else None

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(PODS, namespace, name)

    def get_node(self, name: str) -> dict[str, Any] | None:
        return self.get(NODES, "", name)

    def objects(self, rtype: ResourceType) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.store.of(rtype).sorted_objects()]

    def pods(self) -> list[dict[str, Any]]:
        return self.objects(PODS)

    def nodes(self) -> list[dict[str, Any]]:
        return self.objects(NODES)

    # ------------------------------------------------------------------- seeding
    def put(self, rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or overwrite an object directly (no strategy, no validation), with the
        watch event a real write would cause. A given resourceVersion is ignored; uid
        and creationTimestamp are kept when given (or from the stored version)."""
        new = json.loads(json.dumps(obj))
        meta = new.setdefault("metadata", {})
        namespace = meta.get("namespace") or ("default" if rtype.namespaced else "")
        if rtype.namespaced:
            meta["namespace"] = namespace
        prev = self.store.get(rtype, namespace, meta["name"])
        if prev is not None:
            meta.setdefault("uid", prev.obj["metadata"].get("uid"))
            meta.setdefault("creationTimestamp", prev.obj["metadata"].get("creationTimestamp"))
        meta.setdefault("uid", strategy.new_uid())
        meta.setdefault("creationTimestamp", strategy.timestamp())
        new["kind"], new["apiVersion"] = rtype.kind, rtype.api_version
        return self.store.write(rtype, new, prev).to_dict()

    def put_node(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.put(NODES, obj)

    async def _seed(self, request: web.Request, plural: str) -> web.StreamResponse:
        """`POST /_emulator/seed/<plural>` with `{"items": [...]}`: `put` each object, as
        a restore from a backup would (for benchmarks that need 100,000 running pods
        without 200,000 creates and kubelet status writes). Not a Kubernetes path and not
        counted as a request."""
        rtype = find_type("", "v1", plural)
        if rtype is None:
            raise errors.path_not_found()
        items = (await self._body(request)).get("items") or []
        for obj in items:
            self.put(rtype, obj)
        return json_response(dumps({"seeded": len(items)}), 200)

    def put_pod(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.put(PODS, obj)

    def delete(self, rtype: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        """Remove an object at once (DELETED event); None when it does not exist."""
        prev = self.store.get(rtype, namespace, name)
        if prev is None:
            return None
        return self.store.remove(rtype, prev).to_dict()

    def delete_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.delete(PODS, namespace, name)

    def delete_node(self, name: str) -> dict[str, Any] | None:
        return self.delete(NODES, "", name)

    def finish_deletion(self, namespace: str, name: str) -> bool:
        """The kubelet confirms a gracefully deleted pod is gone; True if removed (a pod
        with finalizers stays until they are taken off)."""
        prev = self.store.get(PODS, namespace, name)
        if prev is None or not prev.obj["metadata"].get("deletionTimestamp"):
            return False
        return writes.remove_or_finalize(self.store, prev)[1]

    # ------------------------------------------------------------------- routing
    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._route(request)
        except ApiError as err:
            return json_response(dumps(err.body), err.code)

    def _record(self, verb: str, route: Route, status: int) -> None:
        resource = route.rtype.plural
        self._counts[(verb, resource, route.subresource)] += 1
        self.request_log.append(
            RequestRecord(
                verb, resource, route.subresource, route.namespace or "", route.name or "", status
            )
        )

    def _inject(self, verb: str, route: Route) -> _Fault | None:
        for fault in self._faults:
            if fault.fires(verb, route.rtype.plural, route.subresource):
                return fault
        return None

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = path_parts(request)
        if parts == ["_emulator", "requests"]:
            counts = [
                {"verb": v, "resource": r, "subresource": s, "count": n}
                for (v, r, s), n in sorted(self._counts.items())
            ]
            return json_response(dumps({"requests": counts, "binds": len(self.bind_log)}), 200)
        if parts[:2] == ["_emulator", "seed"] and len(parts) == 3 and request.method == "POST":
            return await self._seed(request, parts[2])
        if parts[:2] == ["_emulator", "expire"] and len(parts) == 3 and request.method == "POST":
            # For a benchmark in its own process (bench/relist_stall.py): expire_watches.
            return json_response(dumps({"expired": self.expire_watches(parts[2])}), 200)
        if request.method == "GET":
            doc = discovery_document(
                parts, request.host, self._crd_present, self._started, self.unserved
            )
            if doc is not None:
                return json_response(dumps(doc), 200)
        route = parse_route(parts, self._crd_present)
        if route.rtype in self.unserved:
            # An API group that is off, or a CRD not installed: the server has no such
            # path, and discovery does not list it.
            raise errors.path_not_found()
        verb = verb_of(request, route)
        handler: Callable[[web.Request, Route], Awaitable[web.StreamResponse]] | None = {
            "list": self._list,
            "watch": self._watch,
            "get": self._get,
            "create": self._create,
            "update": self._update,
            "patch": self._patch,
            "delete": self._delete,
        }.get(verb)
        if handler is None or (route.subresource in ("binding", "eviction") and verb != "create"):
            raise errors.method_not_allowed()
        if self.authorizer is not None:
            denial = self.authorizer.authorize(verb, route)
            if denial is not None:
                self._record(verb, route, denial.code)
                raise denial
            rbac.CURRENT.set(
                rbac.Authorizing(verb, self.authorizer.check, self.authorizer.policy.user)
            )
        if self._access is not None:
            self._authenticate(request, verb, route, self._access)
        if (verb, route.rtype.plural, route.subresource) in self._black_holes:
            self._record(verb, route, 0)
            held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._held.add(held)
            try:
                await held  # until the client goes away (its handler is cancelled) or stop
            finally:
                self._held.discard(held)
        fault = self._inject(verb, route)
        if fault is not None and not fault.committed:
            self._record(verb, route, fault.status)
            raise errors.injected(fault.status, f"injected failure of {verb} {route.rtype.plural}")
        try:
            response = await handler(request, route)
        except ApiError as err:
            self._record(verb, route, err.code)
            raise
        if fault is not None:
            self._record(verb, route, fault.status)
            raise errors.injected(
                fault.status, f"injected failure after {verb} {route.rtype.plural}"
            )
        if verb != "watch":
            self._record(verb, route, response.status)
        return response

    def _authenticate(
        self, request: web.Request, verb: str, route: Route, access: AccessControl
    ) -> None:
        try:
            account = access.authenticate(request.headers.get("Authorization"))
            denial = access.authorize(account, verb, route)
        except ApiError as err:
            denial = err
        if denial is not None:
            self._record(verb, route, denial.code)
            raise denial
        # This request's task sees it; admission of its writes reads it.
        admission.CURRENT.set(admission.Request(account.user, verb, route))
        if account.authorizer is not None:  # for the strategies' own checks
            node = account.user.extra.get(admission.NODE_NAME_EXTRA, ())
            rbac.CURRENT.set(
                rbac.Authorizing(
                    verb,
                    account.authorizer.check,
                    account.user.name,
                    node[0] if len(node) == 1 else "",
                )
            )

    # --------------------------------------------------------------------- reads
    def _stored(self, route: Route) -> StoredObject:
        assert route.name is not None
        stored = self.store.get(route.rtype, route.namespace or "", route.name)
        if stored is None:
            raise errors.not_found(route.rtype, route.name)
        return stored

    async def _get(self, request: web.Request, route: Route) -> web.StreamResponse:
        return json_response(self._stored(route).json(), 200)

    def _selectors(
        self, rtype: ResourceType, request: web.Request
    ) -> tuple[LabelSelector, FieldSelector]:
        try:
            labels = parse_label_selector(request.query.get("labelSelector"))
            fields = parse_field_selector(request.query.get("fieldSelector"))
        except SelectorError as err:
            raise errors.bad_request(str(err)) from err
        unknown = sorted(fields.fields - rtype.field_names())
        if unknown:
            raise errors.bad_request(f"field label not supported: {unknown[0]}")
        return labels, fields

    async def _list(self, request: web.Request, route: Route) -> web.StreamResponse:
        list_options.refuse(list_options.list_errors(request.query))
        labels, fields = self._selectors(route.rtype, request)
        try:
            limit = int(request.query.get("limit") or 0)
        except ValueError as err:
            raise errors.bad_request(f"invalid limit: {err}") from err
        token = request.query.get("continue")
        if token:
            floor = self.store.of(route.rtype).floor
            page = self.pager.next(token, limit, floor)
        else:
            items = []
            for stored in self.store.of(route.rtype).sorted_objects():
                if route.namespace is not None and stored.namespace != route.namespace:
                    continue
                if (labels.empty or labels.matches(stored.labels)) and (
                    fields.empty or fields.matches(stored.fields)
                ):
                    items.append(stored.list_item_json())
            counted = labels.empty and fields.empty
            page = self.pager.first(items, self.store.rv, limit, counted)
        meta: dict[str, Any] = {"resourceVersion": str(page.resource_version)}
        if page.continue_token:
            meta["continue"] = page.continue_token
        if page.remaining is not None:
            meta["remainingItemCount"] = page.remaining
        rtype = route.rtype
        head = b'{"kind":"%sList","apiVersion":"%s","metadata":%s,"items":[' % (
            rtype.kind.encode(),
            rtype.api_version.encode(),
            dumps(meta),
        )
        return json_response(head + b",".join(page.items) + b"]}", 200)

    async def _watch(self, request: web.Request, route: Route) -> web.StreamResponse:
        if route.name is not None:
            raise errors.path_not_found()
        list_options.refuse(list_options.watch_errors(request.query, self.watch_list))
        selectors = self._selectors(route.rtype, request)
        params = WatchParams.from_query(request.query)
        self._record("watch", route, 200)
        settings = WatchSettings(
            self.bookmark_interval,
            self.max_watch_backlog,
            self.too_large_wait,
            self._stream_holds.get(route.rtype.plural),
        )
        return await serve_watch(
            request, self.store, route.rtype, route.namespace, selectors, params, settings
        )

    # -------------------------------------------------------------------- writes
    async def _body(self, request: web.Request) -> Any:
        if request.content_type == protobuf.CONTENT_TYPE:
            # Only what clients send here (tests/kubeapi/protobuf.py); anything else is
            # answered as the real server answers a type it has no protobuf for (custom
            # resources). EMULATOR GUESS: the real server decodes every built-in type.
            try:
                return protobuf.decode(await request.read())
            except (protobuf.ProtobufError, UnicodeDecodeError) as err:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format ({err}) - accepted "
                    "media types include: application/json, application/yaml",
                ) from err
        raw = await request.read()
        try:
            return json.loads(raw)
        except ValueError as err:
            raise errors.bad_request(f"invalid JSON in request body: {err}") from err

    async def _create(self, request: web.Request, route: Route) -> web.StreamResponse:
        body = await self._body(request)
        if route.subresource == "binding":
            return await self._bind(route, body)
        if route.subresource == "eviction":
            return self._evict(route, body)
        if route.name is not None or route.subresource:
            raise errors.method_not_allowed()
        if route.rtype.namespaced and route.namespace is None:
            raise errors.method_not_allowed()
        stored = writes.create(self.store, route.rtype, route.namespace, body)
        self._node_written(stored)
        return json_response(stored.json(), 201)

    async def _update(self, request: web.Request, route: Route) -> web.StreamResponse:
        body = await self._body(request)
        assert route.name is not None
        stored, created = writes.update(
            self.store, route.rtype, route.namespace, route.name, route.subresource, body
        )
        self._node_written(stored)
        return json_response(stored.json(), 201 if created else 200)

    async def _patch(self, request: web.Request, route: Route) -> web.StreamResponse:
        body = await self._body(request)
        current = self._stored(route)
        stored = writes.patch(self.store, current, route.subresource, request.content_type, body)
        self._node_written(stored)
        return json_response(stored.json(), 200)

    async def _delete(self, request: web.Request, route: Route) -> web.StreamResponse:
        rtype = route.rtype
        if route.name is None or route.subresource:
            # EMULATOR GUESS: deletecollection is not emulated.
            raise errors.method_not_allowed()
        options: dict[str, Any] = {}
        if request.content_type == protobuf.CONTENT_TYPE:
            options = await self._body(request)
        elif request.can_read_body:
            raw = await request.read()
            if raw.strip():
                try:
                    parsed = json.loads(raw)
                except ValueError as err:
                    raise errors.bad_request(f"invalid DeleteOptions: {err}") from err
                if isinstance(parsed, dict):
                    options = parsed
        current = self._stored(route)
        if self._access is not None:
            self._access.admit(rtype.kind, "DELETE", None, current.obj)
        preconditions = options.get("preconditions") or {}
        errors.check_preconditions(
            rtype, current, preconditions.get("uid"), preconditions.get("resourceVersion")
        )
        if rtype is PODS:
            given = request.query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
            grace = writes.grace_period(current.obj, given)
            if self._graceful and grace > 0:
                if current.obj["metadata"].get("deletionTimestamp"):
                    return json_response(current.json(), 200)
                marked = strategy.mark_deleting(current.obj, grace)
                stored = self.store.write(rtype, marked, current)
                self._schedule_kubelet_removal(stored)
                return json_response(stored.json(), 200)
            # Pods return the deleted object (ReturnDeletedObject: true), or the object
            # waiting for its finalizers.
            return json_response(writes.remove_or_finalize(self.store, current)[0].json(), 200)
        final, gone = writes.remove_or_finalize(self.store, current)
        if not gone:  # held by finalizers: the object, with its deletionTimestamp
            return json_response(final.json(), 200)
        return json_response(dumps(writes.deleted_status(final)), 200)

    def _evict(self, route: Route, body: Any) -> web.StreamResponse:
        """pods/eviction (tests/kubeapi/eviction.py): budgets checked, then the pod is
        deleted as a DELETE without a grace period given would delete it."""
        assert route.name is not None
        eviction.check_eviction(route.name, body)
        current = self._stored(route)
        pod = current.obj
        options = body.get("deleteOptions") or {}
        preconditions = options.get("preconditions") or {}
        errors.check_preconditions(
            PODS, current, preconditions.get("uid"), preconditions.get("resourceVersion")
        )
        if not eviction.bypasses_budgets(pod):
            budgets = eviction.budgets_of(self.store, POD_DISRUPTION_BUDGETS, pod)
            if len(budgets) > 1:
                message = (
                    "This pod has more than one PodDisruptionBudget, which the eviction "
                    "subresource does not support."
                )
                return json_response(dumps(errors.status_body(500, "", message)), 500)
            if budgets:
                budget = budgets[0]
                pods = [p.obj for p in self.store.of(PODS).sorted_objects()]
                status = eviction.computed_status(budget.obj, pods)
                taken = eviction.decremented(budget.obj, status, current.name)
                self.store.write(POD_DISRUPTION_BUDGETS, taken, budget)
        grace = writes.grace_period(pod, options.get("gracePeriodSeconds"))
        if self._graceful and grace > 0:
            stored = self.store.write(PODS, strategy.mark_deleting(pod, grace), current)
            self._schedule_kubelet_removal(stored)
        else:
            writes.remove_or_finalize(self.store, current)
        return json_response(dumps(errors.success_body(201)), 201)

    def _schedule_kubelet_removal(self, stored: StoredObject) -> None:
        if self._kubelet_delay is None:
            return
        uid = stored.obj["metadata"].get("uid")
        namespace, name = stored.namespace, stored.name

        def remove() -> None:
            current = self.store.get(PODS, namespace, name)
            if current is not None and current.obj["metadata"].get("uid") == uid:
                writes.remove_or_finalize(self.store, current)

        loop = asyncio.get_running_loop()
        timer = loop.call_later(self._kubelet_delay, remove)
        self._timers.add(timer)

    def _node_written(self, stored: StoredObject) -> None:
        """Let the emulated node lifecycle controller take the not-ready taint off a
        node that is Ready (node_lifecycle.py)."""
        if stored.rtype is not NODES or self._node_ready_delay is None:
            return
        if node_lifecycle.readied(stored.obj) is None:
            return
        name = stored.name

        def ready() -> None:
            current = self.store.get(NODES, "", name)
            if current is None:
                return
            new = node_lifecycle.readied(current.to_dict())
            if new is not None:
                self.store.write(NODES, new, current)

        timer = asyncio.get_running_loop().call_later(self._node_ready_delay, ready)
        self._timers.add(timer)

    async def _bind(self, route: Route, body: Any) -> web.StreamResponse:
        if self._bind_delay > 0:
            await asyncio.sleep(self._bind_delay)
        gate = self._bind_gate
        if gate is not None and self._binds_before_hold > 0:
            self._binds_before_hold -= 1
        elif gate is not None:
            self.binds_held += 1
            try:
                await gate.wait()
            finally:
                self.binds_held -= 1
        assert route.name is not None
        if self._access is not None and isinstance(body, dict):
            self._access.admit("Binding", "CREATE", body, None)
        stored = writes.bind(self.store, route.namespace or "", route.name, body)
        node = stored.obj["spec"]["nodeName"]
        self.bind_log.append(BindRecord(stored.namespace, stored.name, node, stored.rv))
        return json_response(dumps(errors.success_body(201)), 201)
