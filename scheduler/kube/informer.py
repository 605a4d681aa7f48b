"""Informers: list, then watch, and feed every change to the scheduling core.

One `Informer` per resource (pods of all namespaces, nodes, PodGroups, namespaces, the
claims, PVs, StorageClasses and CSINodes a pod's volumes need, and DRA's
ResourceSlices, DeviceClasses and ResourceClaims). Its loop:

1. The initial state, as a watch-list stream where the server serves it (kinds that
   are always served: a watch with `sendInitialEvents=true`, whose ADDED events are
   reconciled network read by network read until the BOOKMARK annotated
   `k8s.io/initial-events-end`, after which the same stream is the watch of step 2;
   a 400 or 422 answer falls back to paged lists for good), else a LIST (paged). Each
   page, or each read of the stream, goes to the core's reconciliation (`relist_*`) as it
   arrives: what the list lacks is gone at the end, reservations of pods that still
   exist survive. At most two pages are in memory at a time (the next one is asked
   for while this one is applied: KubeClient.list_pages), and the event loop serves
   binds and scrapes between two pages, so a relist of 150,000 pods neither holds
   their JSON all at once nor stops the scheduler for seconds.
2. WATCH from the list's resourceVersion with bookmarks and a jittered timeoutSeconds.
   Every event is applied to the core in stream order, synchronously, as soon as its
   network read is decoded (the core is single-threaded; all informers share one event
   loop, so no lock is needed and nothing else runs between reading and applying).
   Bookmarks only advance the resourceVersion.
3. When the server ends the stream cleanly (its timeout), watch again from the last
   resourceVersion seen. On anything else, relist (step 1): `410 Gone` (an HTTP 410 or
   an ERROR event with code 410), any other ERROR event or refused watch, a cut
   connection, a read timeout, an undecodable line, a stream closed at once without an
   event (client-go's "very short watch"). A relist is always correct: the API tells
   the truth and the core reconciles to it.

Retries use tenacity with jittered exponential backoff capped at `backoff_max`, so a
server that is down or answers errors is never hammered. The backoff resets once a
list-and-watch session has been healthy for `healthy_after` seconds: a watch broken
after hours relists at once, one broken a second after its list waits.

PodGroups are optional: when their list answers 404 (the CRD is not installed) the
informer logs it once, reconciles the core to no PodGroups, counts as synced, and lists
again every `crd_recheck` seconds. So are the other CRDs' kinds, Kubernetes' own
PodGroups and the DRA kinds (an API group that is off, or older than the version read).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import aiohttp
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter

from cache.gang_groups import GroupParser
from cache.jsonobj import mapping, metadata
from cache.kai import KAI_GROUP, KAI_PLURAL, KAI_VERSION, kai_podgroup_from_api
from cache.native_gang import NATIVE_GROUP, NATIVE_PLURAL, NATIVE_VERSION, native_podgroup_from_api
from cache.pod import GangKeys
from cache.podgroup import PODGROUP_GROUP, PODGROUP_PLURAL, PODGROUP_VERSION
from cache.quota import QUOTA_GROUP, QUOTA_PLURAL, QUOTA_VERSION
from cache.volcano import VOLCANO_GROUP, VOLCANO_PLURAL, VOLCANO_VERSION, volcano_podgroup_from_api
from cache.workloads import JOB, JOBSET, MPIJOB, PYTORCHJOB, RAYCLUSTER, OwnerKind
from scheduler.cycle.core import Reconciliation, SchedulingCore
from scheduler.gangs.isolation import FATAL
from scheduler.kube.client import ApiError, JsonObject, KubeClient, WatchBroken
from scheduler.kube.decoding import PLAIN, Decoder, SlimPodDecoder

log = logging.getLogger(__name__)

ApplyEvent = Callable[[str, Mapping[str, Any], float], None]
BeginRelist = Callable[[], Reconciliation]

OBJECT_EVENTS = frozenset(("ADDED", "MODIFIED", "DELETED"))

# What makes an informer relist (after a backoff) rather than stop.
RECOVERABLE: tuple[type[BaseException], ...] = (
    ApiError,
    WatchBroken,
    aiohttp.ClientError,
    TimeoutError,
    OSError,
    # A list page nested deeper than json.loads follows (the API's structural schemas
    # make this unlikely): retried with backoff rather than ending the process.
    RecursionError,
)

# A watch that ends this fast with no event at all is a failure, not a timeout.
VERY_SHORT_WATCH = 1.0
# The BOOKMARK that ends a watch-list stream's initial state carries this annotation.
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# What a server without the watch-list stream answers its query: 422 from the options'
# validation (the WatchList feature gate off), 400 from one that does not know the
# parameters and refuses them. Any other failure is retried as a failed list would be.
WATCH_LIST_REFUSED = frozenset({400, 422})


class WatchListRefused(Exception):
    """The API server does not serve the watch-list stream: list in pages instead."""


@dataclass(frozen=True)
class ResourceKind:
    name: str  # as metrics label it: pods, nodes, podgroups
    path: str  # the cluster-wide collection
    optional: bool = False  # a custom resource whose CRD may be absent


PODS = ResourceKind("pods", "/api/v1/pods")
NODES = ResourceKind("nodes", "/api/v1/nodes")
# Namespace labels, which pod affinity's namespaceSelector reads.
NAMESPACES = ResourceKind("namespaces", "/api/v1/namespaces")
PODGROUPS = ResourceKind(
    "podgroups", f"/apis/{PODGROUP_GROUP}/{PODGROUP_VERSION}/{PODGROUP_PLURAL}", optional=True
)
# ElasticQuotas (docs/quotas.md), optional like PodGroups.
ELASTIC_QUOTAS = ResourceKind(
    "elasticquotas", f"/apis/{QUOTA_GROUP}/{QUOTA_VERSION}/{QUOTA_PLURAL}", optional=True
)
# Gang definitions of other APIs, each optional like PodGroups (a 404 means the CRD or
# the API group is off): (kind, parser), applied by SchedulingCore.apply_gang_group.
VOLCANO_PODGROUPS = ResourceKind(
    "volcano-podgroups",
    f"/apis/{VOLCANO_GROUP}/{VOLCANO_VERSION}/{VOLCANO_PLURAL}",
    optional=True,
)
# Kubernetes' own PodGroups (1.36 alpha): a 404 where the GenericWorkload gate is off.
NATIVE_PODGROUPS = ResourceKind(
    "native-podgroups", f"/apis/{NATIVE_GROUP}/{NATIVE_VERSION}/{NATIVE_PLURAL}", optional=True
)
# KAI-Scheduler's PodGroups (docs/migration.md): a 404 where KAI's CRD is not installed.
KAI_PODGROUPS = ResourceKind(
    "kai-podgroups", f"/apis/{KAI_GROUP}/{KAI_VERSION}/{KAI_PLURAL}", optional=True
)
GANG_GROUP_KINDS: tuple[tuple[ResourceKind, GroupParser], ...] = (
    (VOLCANO_PODGROUPS, volcano_podgroup_from_api),
    (NATIVE_PODGROUPS, native_podgroup_from_api),
    (KAI_PODGROUPS, kai_podgroup_from_api),
)
# The workloads whose gangs are inferred (cache/workloads.py), each optional like
# PodGroups, read only where gangInference.namespaces lists any: (kind, owner kind).
WORKLOAD_KINDS: tuple[tuple[ResourceKind, OwnerKind], ...] = (
    (ResourceKind("jobs", "/apis/batch/v1/jobs", optional=True), JOB),
    (ResourceKind("jobsets", "/apis/jobset.x-k8s.io/v1alpha2/jobsets", optional=True), JOBSET),
    (ResourceKind("pytorchjobs", "/apis/kubeflow.org/v1/pytorchjobs", optional=True), PYTORCHJOB),
    (ResourceKind("mpijobs", "/apis/kubeflow.org/v2beta1/mpijobs", optional=True), MPIJOB),
    (ResourceKind("rayclusters", "/apis/ray.io/v1/rayclusters", optional=True), RAYCLUSTER),
)
# What a pod's volumes need (policies/filters/volume_binding.py), by VolumeCache store.
VOLUME_KINDS = {
    "claims": ResourceKind("persistentvolumeclaims", "/api/v1/persistentvolumeclaims"),
    "volumes": ResourceKind("persistentvolumes", "/api/v1/persistentvolumes"),
    "classes": ResourceKind("storageclasses", "/apis/storage.k8s.io/v1/storageclasses"),
    "csinodes": ResourceKind("csinodes", "/apis/storage.k8s.io/v1/csinodes"),
}

# DRA (docs/dra.md), applied by SchedulingCore.apply_dra_object under these names.
# Optional: a cluster without resource.k8s.io/v1 (before Kubernetes 1.34, or with the
# group off) answers 404, which the informer logs once and checks again later.
DRA_API = "/apis/resource.k8s.io/v1"
DRA_KINDS = (
    ResourceKind("resourceslices", f"{DRA_API}/resourceslices", optional=True),
    ResourceKind("deviceclasses", f"{DRA_API}/deviceclasses", optional=True),
    ResourceKind("resourceclaims", f"{DRA_API}/resourceclaims", optional=True),
)


@dataclass(frozen=True)
class InformerOptions:
    # Each watch asks the server to end it after a random timeoutSeconds in [T, 2T), as
    # client-go does, so informers of many replicas do not re-watch in step.
    watch_timeout: float = 300.0
    page_size: int = 500
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    healthy_after: float = 10.0
    crd_recheck: float = 180.0
    connect_timeout: float = 10.0
    # Longest silence tolerated while reading a list; a watch tolerates its own timeout
    # plus `watch_read_slack` (bookmarks and the server's timeout normally come first).
    list_read_timeout: float = 60.0
    watch_read_slack: float = 30.0
    # Read the initial state of a kind that is always served (pods, nodes...) as a
    # watch-list stream (`sendInitialEvents`) where the server offers it, else in pages.
    watch_list: bool = True


class Informer:
    """Keeps one resource of the core current. `run()` until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        kind: ResourceKind,
        apply: ApplyEvent,
        begin_relist: BeginRelist,
        *,
        clock: Callable[[], float] = time.monotonic,
        options: InformerOptions | None = None,
        on_relist: Callable[[str], None] | None = None,
        on_change: Callable[[], None] | None = None,
        label_selector: str = "",
        field_selector: str = "",
        decoder: Decoder = PLAIN,
    ) -> None:
        self.client = client
        # How its lists and events are decoded: pods slim (decoding.py says why).
        self.decoder = decoder
        self.kind = kind
        self.options = options or InformerOptions()
        self._apply = apply
        self._begin_relist = begin_relist
        self._clock = clock
        self._on_relist = on_relist
        self._on_change = on_change
        self._selectors: list[tuple[str, str]] = []
        if label_selector:
            self._selectors.append(("labelSelector", label_selector))
        if field_selector:
            self._selectors.append(("fieldSelector", field_selector))
        self.synced = asyncio.Event()  # set after the first list (or a 404 of an optional kind)
        self.resource_version = ""  # the last one seen: list, event or bookmark
        self.relists = 0
        self.present: bool | None = None  # for an optional kind: is it served?
        # Set once the server refused the watch-list stream: pages from then on.
        self.watch_list_refused = False
        self.streamed = 0  # initial states read as a watch-list stream (tests read it)
        # True while a relist is being reconciled (its first page or read is in, its
        # end is not): the scheduler goes on scheduling meanwhile (tests read it).
        self.reconciling = False

    # --- the loop -----------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            retrying = AsyncRetrying(
                wait=wait_exponential_jitter(
                    multiplier=self.options.backoff_initial,
                    max=self.options.backoff_max,
                    jitter=self.options.backoff_initial,
                ),
                retry=retry_if_exception_type(RECOVERABLE),
                before_sleep=self._log_retry,
                reraise=True,
            )
            await retrying(self._session)

    async def _session(self) -> None:
        """The initial state (a watch-list stream, or a paged list), then watches until
        a relist is needed. Raises (so the caller backs off) unless the session was
        healthy long enough to relist at once."""
        started = time.monotonic()
        if self._streams_initial_state():
            synced = [False]
            try:
                await self._watch_list(synced)
            except WatchListRefused as err:
                self.watch_list_refused = True
                log.info("%s: no watch-list stream (%s); listing in pages", self.kind.name, err)
            except RECOVERABLE as err:
                if not synced[0] or time.monotonic() - started < self.options.healthy_after:
                    raise
                self._log_break(err)
                return
            else:
                await self._watch_on(started)
                return
        if not await self.relist():
            await asyncio.sleep(self.options.crd_recheck)
            return
        await self._watch_on(started)

    async def _watch_on(self, started: float) -> None:
        try:
            while True:
                await self._watch_once()
        except RECOVERABLE as err:
            if time.monotonic() - started < self.options.healthy_after:
                raise
            self._log_break(err)

    def _streams_initial_state(self) -> bool:
        # Optional kinds keep the paged list, whose 404 says the CRD is absent.
        return self.options.watch_list and not self.kind.optional and not self.watch_list_refused

    def _log_retry(self, state: RetryCallState) -> None:
        outcome = state.outcome
        err = outcome.exception() if outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        if err is not None:
            self._log_break(err, f"; relisting in {wait:.1f} s")

    def _log_break(self, err: BaseException, then: str = "; relisting") -> None:
        if isinstance(err, ApiError) and err.gone:
            log.info("%s: watch expired (%s)%s", self.kind.name, err, then)
        else:
            log.warning("%s: %s: %s%s", self.kind.name, type(err).__name__, err, then)

    # --- list ---------------------------------------------------------------------------
    async def relist(self) -> bool:
        """List and reconcile the core; False when an optional kind is not served."""
        began = time.monotonic()
        timeout = aiohttp.ClientTimeout(
            sock_connect=self.options.connect_timeout, sock_read=self.options.list_read_timeout
        )
        reconciliation: Reconciliation | None = None
        pages = self.client.list_pages(
            self.kind.path,
            query=self._selectors,
            page_size=self.options.page_size,
            timeout=timeout,
            decoder=self.decoder,
        )
        version = ""
        try:
            async for page in pages:
                if page.first:
                    reconciliation = self._begin_relist()
                    self.reconciling = True
                    self._found_again()
                assert reconciliation is not None
                reconciliation.add(page.items, self._clock())
                version = page.resource_version
        except ApiError as err:
            if self.kind.optional and err.status == 404 and reconciliation is None:
                self._absent()
                return False
            raise
        finally:
            self.reconciling = False
        assert reconciliation is not None  # list_pages yields at least one page or raises
        reconciliation.finish(self._clock())
        self.resource_version = version
        self._relisted()
        log.info(
            "%s: listed %d at resourceVersion %s in %.2f s",
            self.kind.name,
            len(reconciliation.listed),
            version,
            time.monotonic() - began,
        )
        return True

    def _found_again(self) -> None:
        if self.present is False:
            log.info("%s: %s is served again; using it", self.kind.name, self.kind.path)
        self.present = True

    def _absent(self) -> None:
        if self.present is not False:
            log.warning(
                "%s: %s is not served (CRD not installed, or API off): running without them, "
                "checking again every %.0f s",
                self.kind.name,
                self.kind.path,
                self.options.crd_recheck,
            )
            self.present = False
            self._begin_relist().finish(self._clock())
            self.resource_version = ""
            self._relisted()

    def _relisted(self) -> None:
        self.relists += 1
        if self._on_relist is not None:
            self._on_relist(self.kind.name)
        self.synced.set()
        self._changed()

    # --- watch-list: the initial state as a stream ---------------------------------------
    async def _watch_list(self, synced: list[bool]) -> None:
        """Read the initial state as a watch-list stream (`sendInitialEvents=true`):
        ADDED events of every object, then a BOOKMARK annotated initial-events-end at
        the state's resourceVersion; the same stream then goes on as a watch. Each
        network read's objects are reconciled as they arrive (as a list's pages are), so
        memory stays flat however many objects come. Returns when the server ends the
        stream after the initial state (`synced[0]` is set then); WatchListRefused when
        it refuses the query; WatchBroken when it ends the stream before the bookmark."""
        seconds = int(self.options.watch_timeout * (1.0 + random.random()))
        query = [
            *self._selectors,
            ("sendInitialEvents", "true"),
            ("resourceVersionMatch", "NotOlderThan"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(seconds)),
        ]
        timeout = aiohttp.ClientTimeout(
            sock_connect=self.options.connect_timeout,
            sock_read=seconds + self.options.watch_read_slack,
        )
        began = time.monotonic()
        opened = False
        reconciliation: Reconciliation | None = None
        try:
            watch = self.client.watch(
                self.kind.path, query=query, timeout=timeout, decoder=self.decoder
            )
            async with watch as stream:
                opened = True
                reconciliation = self._begin_relist()
                self.reconciling = True
                self._found_again()
                async for batch in stream.batches():
                    if reconciliation is None:
                        self.handle(batch)
                        continue
                    rest = self._initial_events(batch, reconciliation)
                    if rest is None:
                        continue
                    self.streamed += 1
                    synced[0] = True
                    log.info(
                        "%s: streamed %d at resourceVersion %s in %.2f s",
                        self.kind.name,
                        len(reconciliation.listed),
                        self.resource_version,
                        time.monotonic() - began,
                    )
                    reconciliation = None
                    self.reconciling = False
                    self._relisted()
                    if rest:
                        self.handle(rest)
        except ApiError as err:
            if not opened and err.status in WATCH_LIST_REFUSED:
                raise WatchListRefused(str(err)) from err
            raise
        finally:
            self.reconciling = False
        if reconciliation is not None:
            raise WatchBroken("the watch-list stream ended before its initial state did")

    def _initial_events(
        self, batch: Sequence[JsonObject], reconciliation: Reconciliation
    ) -> Sequence[JsonObject] | None:
        """Reconcile the initial events of `batch`; returns the events after the
        initial-events-end bookmark (the state is then complete), else None."""
        now = self._clock()
        objects: list[Mapping[str, Any]] = []
        try:
            for index, event in enumerate(batch):
                kind = event.get("type")
                obj = event.get("object")
                if not isinstance(obj, Mapping):
                    log.warning("%s: watch event without an object: %.200r", self.kind.name, event)
                    continue
                if kind == "ADDED":
                    objects.append(obj)
                elif kind == "BOOKMARK":
                    if (
                        str(mapping(metadata(obj).get("annotations")).get(INITIAL_EVENTS_END))
                        == "true"
                    ):
                        reconciliation.add(objects, now)
                        objects = []
                        reconciliation.finish(now)
                        self._advance(obj)
                        return batch[index + 1 :]
                elif kind == "ERROR":
                    raise ApiError.from_status(obj)
                else:
                    # The initial state is ADDED events only: anything else is not the
                    # stream this informer asked for.
                    raise WatchBroken(f"a {kind!r} event before the initial state ended")
        finally:
            reconciliation.add(objects, now)
        return None

    # --- watch --------------------------------------------------------------------------
    async def _watch_once(self) -> None:
        """Watch from the last resourceVersion until the server ends the stream
        (returns) or something calls for a relist (raises)."""
        seconds = int(self.options.watch_timeout * (1.0 + random.random()))
        query = [
            *self._selectors,
            ("resourceVersion", self.resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(seconds)),
        ]
        timeout = aiohttp.ClientTimeout(
            sock_connect=self.options.connect_timeout,
            sock_read=seconds + self.options.watch_read_slack,
        )
        opened = time.monotonic()
        events = 0
        watch = self.client.watch(
            self.kind.path, query=query, timeout=timeout, decoder=self.decoder
        )
        async with watch as stream:
            async for batch in stream.batches():
                events += self.handle(batch)
        if events == 0 and time.monotonic() - opened < VERY_SHORT_WATCH:
            raise WatchBroken("very short watch: the server closed it at once, with no event")

    def handle(self, batch: Sequence[JsonObject]) -> int:
        """Apply decoded watch events in order; returns how many were read. Raises
        ApiError on an ERROR event (after applying the events before it)."""
        now = self._clock()
        applied = 0
        try:
            for event in batch:
                kind = event.get("type")
                obj = event.get("object")
                if not isinstance(obj, Mapping):
                    log.warning("%s: watch event without an object: %.200r", self.kind.name, event)
                    continue
                if kind in OBJECT_EVENTS:
                    self._apply_one(str(kind), obj, now)
                    applied += 1
                    self._advance(obj)
                elif kind == "BOOKMARK":
                    self._advance(obj)
                elif kind == "ERROR":
                    raise ApiError.from_status(obj)
                else:
                    log.warning("%s: unknown watch event type %r", self.kind.name, kind)
        finally:
            if applied:
                self._changed()
        return len(batch)

    def _apply_one(self, kind: str, obj: Mapping[str, Any], now: float) -> None:
        """Hand one event to the core. The core keeps an object's exception with that
        object (SchedulingCore._guarded and the repairs of pods, nodes and PodGroups);
        this is the last line, for an apply that has no guard (a bug): the event is
        logged and skipped, and the informer goes on, rather than end the scheduler on
        one object a tenant wrote."""
        try:
            self._apply(kind, obj, now)
        except FATAL:
            raise
        except Exception:
            meta = metadata(obj)
            log.exception(
                "%s: %s event of %.100r/%.100r could not be applied; skipped",
                self.kind.name,
                kind,
                meta.get("namespace"),
                meta.get("name"),
            )

    def _advance(self, obj: Mapping[str, Any]) -> None:
        version = metadata(obj).get("resourceVersion")
        if version:
            self.resource_version = str(version)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


def _configured(
    kinds: tuple[tuple[ResourceKind, GroupParser], ...], keys: GangKeys
) -> list[tuple[ResourceKind, GroupParser]]:
    """The gang-definition parsers with the configuration they read: Volcano's with the
    tiers its networkTopology is mapped by (topology.volcanoTiers)."""
    return [
        (kind, partial(volcano_podgroup_from_api, tiers=keys.volcano_tiers))
        if parse is volcano_podgroup_from_api
        else (kind, parse)
        for kind, parse in kinds
    ]


class ClusterInformers:
    """The informers that keep one SchedulingCore current: pods, nodes, PodGroups.

    `changed` is set whenever the core received something (the run loop waits on it and
    clears it); `wait_synced()` returns once every informer has listed once (/readyz).
    `run()` runs them all; an unexpected exception (a bug, not an API or network
    failure: those are retried) ends it, and the caller should treat that as fatal.
    """

    def __init__(
        self,
        core: SchedulingCore,
        client: KubeClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        options: InformerOptions | None = None,
        on_relist: Callable[[str], None] | None = None,
        on_change: Callable[[], None] | None = None,
        pod_field_selector: str = "",
        podgroups: bool = True,
    ) -> None:
        self.changed = asyncio.Event()
        self._on_change = on_change

        def informer(kind: ResourceKind, apply: ApplyEvent, relist: BeginRelist) -> Informer:
            return Informer(
                client,
                kind,
                apply,
                relist,
                clock=clock,
                options=options,
                on_relist=on_relist,
                on_change=self._changed,
                field_selector=pod_field_selector if kind is PODS else "",
                decoder=SlimPodDecoder() if kind is PODS else PLAIN,
            )

        self.nodes = informer(NODES, core.apply_node, core.relist_nodes)
        self.pods = informer(PODS, core.apply_pod, core.relist_pods)
        self.podgroups = (
            informer(PODGROUPS, core.apply_podgroup, core.relist_podgroups) if podgroups else None
        )
        self.namespaces = informer(NAMESPACES, core.apply_namespace, core.relist_namespaces)
        self.quotas = informer(ELASTIC_QUOTAS, core.apply_elasticquota, core.relist_elasticquotas)
        # Other APIs' gang definitions: read wherever PodGroups are (`podgroups`).
        self.gang_groups = [
            informer(
                kind,
                partial(core.apply_gang_group, parse),
                partial(core.relist_gang_groups, parse, _api_group(kind)),
            )
            for kind, parse in (
                _configured(GANG_GROUP_KINDS, core.cache.gang_keys) if podgroups else ()
            )
        ]
        # Owners of inferred gangs: only where some namespace is opted in.
        inferring = bool(core.cache.gang_keys.infer_namespaces)
        self.gang_groups += [
            informer(
                kind,
                partial(core.apply_gang_group, owner.parse),
                partial(core.relist_gang_groups, owner.parse, owner.api),
            )
            for kind, owner in (WORKLOAD_KINDS if inferring else ())
        ]
        self.volumes = [
            informer(kind, _volume_apply(core, store), partial(core.relist_volume_objects, store))
            for store, kind in VOLUME_KINDS.items()
        ]
        # DRA: ResourceSlices, DeviceClasses, ResourceClaims (raw JSON, as every kind:
        # the generated client's models are never built).
        self.dra = [
            informer(
                kind,
                partial(core.apply_dra_object, kind.name),
                partial(core.relist_dra_objects, kind.name),
            )
            for kind in DRA_KINDS
        ]

    @property
    def informers(self) -> list[Informer]:
        found = [self.nodes, self.pods, self.namespaces, self.quotas]
        if self.podgroups is not None:
            found.append(self.podgroups)
        return found + self.gang_groups + self.volumes + self.dra

    @property
    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers)

    async def wait_synced(self) -> None:
        for informer in self.informers:
            await informer.synced.wait()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                group.create_task(informer.run(), name=f"informer-{informer.kind.name}")

    def _changed(self) -> None:
        self.changed.set()
        if self._on_change is not None:
            self._on_change()


def _volume_apply(core: SchedulingCore, store: str) -> ApplyEvent:
    def apply(event: str, obj: Mapping[str, Any], now: float) -> None:
        core.apply_volume_object(store, event, obj, now)

    return apply


def _api_group(kind: ResourceKind) -> str:
    """The API group of a collection path /apis/<group>/<version>/<plural>."""
    return kind.path.split("/")[2]
