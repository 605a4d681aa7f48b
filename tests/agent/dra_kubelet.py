"""The kubelet's side of a DRA plugin, for the tests: its plugin watcher (a registration
socket found in the registry directory, GetInfo, the answer checked as the kubelet's
DRA plugin manager checks it, NotifyRegistrationStatus) and its DRA client
(NodePrepareResources, NodeUnprepareResources), over grpcio on real unix sockets."""

from __future__ import annotations

from pathlib import Path

import grpc
import grpc.aio

from scheduler.agent import dra_api as api

CALL_TIMEOUT = 10.0


class FakeDraKubelet:
    def __init__(self, registry_dir: Path) -> None:
        self.registry_dir = registry_dir
        self.info: api.PluginInfo | None = None
        self.notified: list[api.RegistrationStatus] = []

    async def register(self, refuse: str = "") -> api.PluginInfo:
        """What the plugin watcher does when a socket appears: GetInfo, check, notify.
        `refuse`: the kubelet does not take the plugin, with that error."""
        sockets = sorted(self.registry_dir.glob("*-reg.sock"))
        assert len(sockets) == 1, f"registration sockets: {sockets}"
        async with grpc.aio.insecure_channel(f"unix://{sockets[0]}") as channel:
            get_info = channel.unary_unary(
                f"/{api.REGISTRATION_SERVICE}/GetInfo",
                request_serializer=api.encode_info_request,
                response_deserializer=api.decode_plugin_info,
            )
            info: api.PluginInfo = await get_info(None, timeout=CALL_TIMEOUT)
            problem = refuse or self._problem(info)
            status = api.RegistrationStatus(plugin_registered=not problem, error=problem)
            notify = channel.unary_unary(
                f"/{api.REGISTRATION_SERVICE}/NotifyRegistrationStatus",
                request_serializer=api.encode_registration_status,
                response_deserializer=api.decode_registration_status_response,
            )
            await notify(status, timeout=CALL_TIMEOUT)
            self.notified.append(status)
        if not problem:
            self.info = info
        return info

    @staticmethod
    def _problem(info: api.PluginInfo) -> str:
        """pkg/kubelet/cm/dra/plugin: the type, a service it speaks, an endpoint."""
        if info.type != api.DRA_PLUGIN_TYPE:
            return f"plugin type {info.type!r} is not {api.DRA_PLUGIN_TYPE}"
        if api.DRA_SERVICE_VERSION not in info.supported_versions:
            return f"none of {info.supported_versions} is supported"
        if not Path(info.endpoint).exists():
            return f"endpoint {info.endpoint} does not exist"
        return ""

    def _endpoint(self) -> str:
        assert self.info is not None, "not registered"
        return f"unix://{self.info.endpoint}"

    async def prepare(self, *claims: api.Claim) -> api.PrepareResponse:
        async with grpc.aio.insecure_channel(self._endpoint()) as channel:
            call = channel.unary_unary(
                f"/{api.DRA_SERVICE}/NodePrepareResources",
                request_serializer=api.encode_prepare_request,
                response_deserializer=api.decode_prepare_response,
            )
            response: api.PrepareResponse = await call(tuple(claims), timeout=CALL_TIMEOUT)
            return response

    async def unprepare(self, *claims: api.Claim) -> api.UnprepareResponse:
        async with grpc.aio.insecure_channel(self._endpoint()) as channel:
            call = channel.unary_unary(
                f"/{api.DRA_SERVICE}/NodeUnprepareResources",
                request_serializer=api.encode_unprepare_request,
                response_deserializer=api.decode_unprepare_response,
            )
            response: api.UnprepareResponse = await call(tuple(claims), timeout=CALL_TIMEOUT)
            return response
