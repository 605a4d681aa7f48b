"""The node agent as the kubelet's DRA plugin for `gpu.gang-scheduler.io` (DRA mode).

- Registration: `pluginregistration.Registration` on
  `<registry dir>/gpu.gang-scheduler.io-reg.sock` (the kubelet's plugin watcher finds
  it there): GetInfo names the driver, the DRA endpoint and `v1.DRAPlugin`;
  NotifyRegistrationStatus says whether the kubelet took it.
- DRA service: `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin` on
  `<plugins dir>/gpu.gang-scheduler.io/dra.sock`.
- NodePrepareResources: per claim, the ResourceClaim read from the API (GET by
  namespace and name, its uid compared with the kubelet's), the results of this driver
  in its allocation checked against this node (the pool is the node's, the device is
  one of its GPUs), a CDI spec written for it (cdi.py) and its CDI device IDs returned.
  A claim this node cannot serve gets an error naming why; the others are prepared.
- NodeUnprepareResources: the claim's CDI spec deleted.

Both are idempotent (a prepared claim is answered from its spec file, a missing file is
unprepared) and survive a restart at any point (the spec file is written whole, a
leftover temporary file is removed at start). Calls run one at a time. Every
`watch_interval` seconds the two sockets are checked; one that is gone (the directory
wiped, a kubelet that removed it) makes both be served afresh, which the kubelet's
watcher takes as a new registration.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from math import ceil
from pathlib import Path
from typing import Any, Protocol

import grpc
import grpc.aio

from cache.quantity import parse_quantity
from cache.resources import MILLI_PER_GPU
from scheduler.agent import cdi
from scheduler.agent import dra_api as api
from scheduler.agent.discovery import DeviceReport, Discovery
from scheduler.agent.dra_slices import DRIVER, MILLI, device_name
from scheduler.agent.publisher import is_transient
from scheduler.kube.client import ApiError, KubeClient

log = logging.getLogger("gang_scheduler.dra_plugin")

DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
DEFAULT_WATCH_INTERVAL = 1.0
CLAIMS_PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
_PARTITION = re.compile(r"^gpu-\d+-mig-")

JsonObject = dict[str, Any]


class ClaimApi(Protocol):
    async def get_claim(self, namespace: str, name: str) -> JsonObject: ...


class KubeClaimApi:
    """ClaimApi over the raw-JSON client (RBAC: get on resourceclaims)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def get_claim(self, namespace: str, name: str) -> JsonObject:
        return await self.client.request_json(
            "GET", CLAIMS_PATH.format(namespace=namespace, name=name)
        )


@dataclass(frozen=True)
class DraPluginConfig:
    node_name: str
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    cdi_dir: Path = cdi.DEFAULT_CDI_DIR
    watch_interval: float = DEFAULT_WATCH_INTERVAL

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{DRIVER}-reg.sock"

    @property
    def endpoint(self) -> Path:
        return self.plugins_dir / DRIVER / "dra.sock"


class Refused(Exception):
    """A claim this node will not prepare; the message goes to the kubelet (and from
    there into the pod's events)."""


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _share_milli(result: Mapping[str, Any], where: str) -> int | None:
    """The milli a share consumed (None: no consumed capacity, the whole GPU)."""
    consumed = _mapping(result.get("consumedCapacity"))
    if MILLI not in consumed and f"{DRIVER}/{MILLI}" not in consumed:
        return None
    raw = consumed.get(MILLI, consumed.get(f"{DRIVER}/{MILLI}"))
    try:
        amount = parse_quantity(raw)
    except (TypeError, ValueError):
        raise Refused(f"{where}: consumed capacity {raw!r} is not a quantity") from None
    if not 0 < amount <= MILLI_PER_GPU:
        raise Refused(f"{where}: consumed capacity {raw!r} is outside 1..{MILLI_PER_GPU}")
    return ceil(amount)


@dataclass
class DraPlugin:
    """The kubelet's DRA plugin of this node; `discovery` gives the agent's latest
    discovery (None before the first pass)."""

    config: DraPluginConfig
    claims: ClaimApi
    discovery: Callable[[], Discovery | None]
    # Told when the kubelet registers the plugin: a kubelet that starts deletes its
    # node's ResourceSlices (KEP-4381) and then registers the plugins again, so the
    # agent publishes at once instead of an interval later.
    on_registered: Callable[[], None] | None = None
    registered: bool = field(default=False, init=False)
    registrations: int = field(default=0, init=False)
    _servers: list[grpc.aio.Server] = field(default_factory=list, init=False)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    # --- life ---
    async def start(self) -> None:
        """Serve both sockets (the DRA endpoint first: it must exist when the kubelet
        reads GetInfo), after removing what a crash left in the CDI directory."""
        with suppress(OSError):
            for leftover in cdi.remove_leftovers(self.config.cdi_dir):
                log.info("removed %s, left by an interrupted NodePrepareResources", leftover)
        await self._stop_servers()
        self._servers = [
            await self._serve(self.config.endpoint, api.DRA_SERVICE, self._dra_handlers()),
            await self._serve(
                self.config.registration_socket,
                api.REGISTRATION_SERVICE,
                self._registration_handlers(),
            ),
        ]
        self.registered = False
        log.info(
            "DRA plugin %s serving on %s (registration %s)",
            DRIVER,
            self.config.endpoint,
            self.config.registration_socket,
        )

    async def run(self) -> None:
        await self.start()
        try:
            while not self._stopping.is_set():
                with suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), self.config.watch_interval)
                if not self._stopping.is_set():
                    await self.check_sockets()
        finally:
            await self._stop_servers()

    def stop(self) -> None:
        self._stopping.set()

    async def check_sockets(self) -> None:
        """Serve afresh when a socket is gone."""
        if self.config.endpoint.exists() and self.config.registration_socket.exists():
            return
        log.warning("a DRA plugin socket is gone; serving again")
        await self.start()

    async def _serve(
        self, socket: Path, service: str, handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> grpc.aio.Server:
        socket.parent.mkdir(parents=True, exist_ok=True)
        socket.unlink(missing_ok=True)
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(service, dict(handlers))
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        return server

    async def _stop_servers(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            await server.stop(0.5)
        for socket in (self.config.registration_socket, self.config.endpoint):
            socket.unlink(missing_ok=True)

    # --- registration ---
    def info(self) -> api.PluginInfo:
        return api.PluginInfo(
            type=api.DRA_PLUGIN_TYPE,
            name=DRIVER,
            endpoint=str(self.config.endpoint),
            supported_versions=(api.DRA_SERVICE_VERSION,),
        )

    def _registration_handlers(self) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
        return {
            "GetInfo": grpc.unary_unary_rpc_method_handler(
                self._get_info,
                request_deserializer=api.decode_info_request,
                response_serializer=api.encode_plugin_info,
            ),
            "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(
                self._notify,
                request_deserializer=api.decode_registration_status,
                response_serializer=api.encode_registration_status_response,
            ),
        }

    async def _get_info(
        self, _: None, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.PluginInfo:
        return self.info()

    async def _notify(
        self, status: api.RegistrationStatus, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        self.registered = status.plugin_registered
        if status.plugin_registered:
            self.registrations += 1
            log.info("the kubelet registered DRA plugin %s", DRIVER)
            if self.on_registered is not None:
                self.on_registered()
        else:
            log.error("the kubelet refused DRA plugin %s: %s", DRIVER, status.error)

    # --- the DRA service ---
    def _dra_handlers(self) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
        return {
            "NodePrepareResources": grpc.unary_unary_rpc_method_handler(
                self._prepare_call,
                request_deserializer=api.decode_prepare_request,
                response_serializer=api.encode_prepare_response,
            ),
            "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(
                self._unprepare_call,
                request_deserializer=api.decode_unprepare_request,
                response_serializer=api.encode_unprepare_response,
            ),
        }

    async def _prepare_call(
        self, claims: tuple[api.Claim, ...], context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.PrepareResponse:
        return await self.prepare(claims)

    async def _unprepare_call(
        self, claims: tuple[api.Claim, ...], context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.UnprepareResponse:
        return await self.unprepare(claims)

    async def prepare(self, claims: Sequence[api.Claim]) -> api.PrepareResponse:
        answers: dict[str, api.PrepareResult] = {}
        async with self._lock:
            for claim in claims:
                try:
                    devices = await self._prepare_claim(claim)
                except Refused as refusal:
                    log.warning(
                        "NodePrepareResources %s/%s: %s", claim.namespace, claim.name, refusal
                    )
                    answers[claim.uid] = api.PrepareResult(error=str(refusal))
                else:
                    answers[claim.uid] = api.PrepareResult(devices=tuple(devices))
        return api.PrepareResponse(answers)

    async def unprepare(self, claims: Sequence[api.Claim]) -> api.UnprepareResponse:
        answers: dict[str, api.UnprepareResult] = {}
        async with self._lock:
            for claim in claims:
                if not cdi.valid_uid(claim.uid):
                    answers[claim.uid] = api.UnprepareResult(
                        f"claim uid {claim.uid!r} is not a uid"
                    )
                    continue
                try:
                    if cdi.remove_spec(self.config.cdi_dir, claim.uid):
                        log.info("unprepared claim %s/%s", claim.namespace, claim.name)
                    answers[claim.uid] = api.UnprepareResult()
                except OSError as error:
                    answers[claim.uid] = api.UnprepareResult(f"cannot remove its CDI spec: {error}")
        return api.UnprepareResponse(answers)

    async def _prepare_claim(self, claim: api.Claim) -> list[api.PreparedDevice]:
        what = f"ResourceClaim {claim.namespace}/{claim.name}"
        if not cdi.valid_uid(claim.uid):
            raise Refused(f"{what}: uid {claim.uid!r} is not a uid")
        recorded = cdi.read_prepared(self.config.cdi_dir, claim.uid)
        if recorded is not None:
            return recorded  # prepared before (a repeated call, or before a restart)
        discovery = self.discovery()
        if discovery is None or not discovery.found:
            raise Refused(f"{what}: this node's GPUs are not discovered yet; try again")
        obj = await self._read_claim(claim, what)
        uid = _text(_mapping(obj.get("metadata")).get("uid"))
        if uid != claim.uid:
            raise Refused(f"{what} has uid {uid!r}, not {claim.uid!r}: it was replaced")
        grants = self._grants(obj, discovery, what)
        spec, prepared = cdi.claim_spec(claim.uid, grants)
        try:
            cdi.write_spec(self.config.cdi_dir, claim.uid, spec)
        except OSError as error:
            raise Refused(f"{what}: cannot write its CDI spec: {error}") from None
        log.info(
            "prepared %s: %s",
            what,
            ", ".join(f"{g.device} for request {g.request}" for g in grants),
        )
        return prepared

    async def _read_claim(self, claim: api.Claim, what: str) -> JsonObject:
        try:
            return await self.claims.get_claim(claim.namespace, claim.name)
        except ApiError as error:
            if error.status == 404:
                raise Refused(f"{what} does not exist") from None
            raise Refused(f"{what} cannot be read: {error}") from None
        except Exception as error:
            if not is_transient(error):
                raise
            raise Refused(f"{what} cannot be read: {type(error).__name__}: {error}") from None

    def _grants(self, obj: JsonObject, discovery: Discovery, what: str) -> list[cdi.GrantedGpu]:
        allocation = _mapping(_mapping(obj.get("status")).get("allocation"))
        if not allocation:
            raise Refused(f"{what} is not allocated")
        raw_results = _mapping(allocation.get("devices")).get("results")
        results = [_mapping(r) for r in raw_results] if isinstance(raw_results, list) else []
        ours = [r for r in results if r.get("driver") == DRIVER]
        if not ours:
            drivers = sorted({_text(r.get("driver")) or "(none)" for r in results})
            raise Refused(
                f"{what} has no device of driver {DRIVER} in its allocation "
                f"(it names {', '.join(drivers) or 'no device'})"
            )
        by_name = {device_name(report.index): report for report in discovery.devices}
        node = self.config.node_name
        grants = []
        for number, result in enumerate(ours):
            pool, device = _text(result.get("pool")), _text(result.get("device"))
            where = f"{what}: device {pool}/{device}"
            if pool != node:
                raise Refused(f"{where} belongs to node {pool!r}, not to this node {node!r}")
            report: DeviceReport | None = by_name.get(device)
            if report is None:
                if _PARTITION.match(device):
                    raise Refused(
                        f"{where} is a MIG partition, which this driver cannot prepare yet"
                    )
                raise Refused(f"{where}: node {node} has no such device")
            if report.minor is None:
                raise Refused(
                    f"{where}: its device node is unknown (nvmlDeviceGetMinorNumber failed)"
                )
            if not report.uuid:
                raise Refused(f"{where}: its UUID is unknown (the GPU failed its queries)")
            grants.append(
                cdi.GrantedGpu(
                    request=_text(result.get("request")) or f"result-{number}",
                    device=device,
                    pool=pool,
                    uuid=report.uuid,
                    minor=report.minor,
                    index=report.index,
                    share_id=_text(result.get("shareID")),
                    milli=_share_milli(result, where),
                )
            )
        return grants
