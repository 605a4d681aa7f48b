"""The kubelet's side of the device plugin API, for the tests: the Registration service
on `kubelet.sock` (grpcio, a real unix socket) and a client for the plugin's socket."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from scheduler.agent import kubelet_api as api
from tests.agent.unix_grpc import serve_on_socket, stop_serving


class FakeKubelet:
    """Serves v1beta1.Registration on <directory>/kubelet.sock and keeps every
    RegisterRequest; `refuse` answers the next registrations with that error."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.registrations: list[api.RegisterRequest] = []
        self.attempts = 0  # Register calls, refused ones included
        self.refuse: str | None = None
        self._server: grpc.aio.Server | None = None

    @property
    def socket(self) -> Path:
        return self.directory / api.KUBELET_SOCKET

    async def start(self) -> None:
        async def register(
            request: api.RegisterRequest, context: grpc.aio.ServicerContext[Any, Any]
        ) -> None:
            self.attempts += 1
            if self.refuse is not None:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.refuse)
            self.registrations.append(request)

        self._server = await serve_on_socket(
            self.socket,
            api.REGISTRATION_SERVICE,
            {
                "Register": grpc.unary_unary_rpc_method_handler(
                    register,
                    request_deserializer=api.decode_register_request,
                    response_serializer=api.encode_empty,
                )
            },
        )

    async def stop(self, remove_plugin_sockets: bool = True) -> None:
        """Stop; as a kubelet does when it restarts, remove the sockets in the directory."""
        await stop_serving(self._server, self.socket)
        self._server = None
        if remove_plugin_sockets:
            for path in self.directory.glob("*.sock"):
                path.unlink(missing_ok=True)


class PluginClient:
    """The kubelet's calls on the plugin's socket."""

    def __init__(self, socket: Path) -> None:
        self.channel = grpc.aio.insecure_channel(f"unix://{socket}")

    async def close(self) -> None:
        await self.channel.close()

    async def options(self) -> api.PluginOptions:
        call = self.channel.unary_unary(
            f"/{api.DEVICE_PLUGIN_SERVICE}/GetDevicePluginOptions",
            request_serializer=api.encode_empty,
            response_deserializer=api.decode_options,
        )
        result: api.PluginOptions = await call(None, timeout=5)
        return result

    async def list_and_watch(self) -> AsyncGenerator[list[api.Device], None]:
        call = self.channel.unary_stream(
            f"/{api.DEVICE_PLUGIN_SERVICE}/ListAndWatch",
            request_serializer=api.encode_empty,
            response_deserializer=api.decode_devices,
        )
        stream = call(None)
        try:
            async for devices in stream:
                yield devices
        finally:
            stream.cancel()

    async def allocate(self, *containers: list[str]) -> list[api.ContainerAllocation]:
        call = self.channel.unary_unary(
            f"/{api.DEVICE_PLUGIN_SERVICE}/Allocate",
            request_serializer=api.encode_allocate_request,
            response_deserializer=api.decode_allocate_response,
        )
        result: list[api.ContainerAllocation] = await call(list(containers), timeout=5)
        return result

    async def preferred(self, *requests: api.ContainerPreferredRequest) -> list[list[str]]:
        call = self.channel.unary_unary(
            f"/{api.DEVICE_PLUGIN_SERVICE}/GetPreferredAllocation",
            request_serializer=api.encode_preferred_request,
            response_deserializer=api.decode_preferred_response,
        )
        result: list[list[str]] = await call(list(requests), timeout=5)
        return result

    async def pre_start(self, ids: list[str]) -> None:
        call = self.channel.unary_unary(
            f"/{api.DEVICE_PLUGIN_SERVICE}/PreStartContainer",
            request_serializer=api.encode_prestart_request,
            response_deserializer=api.decode_empty,
        )
        await call(ids, timeout=5)

    async def admit(
        self, available: list[str], size: int, reusable: Sequence[str] = ()
    ) -> tuple[list[str], api.ContainerAllocation]:
        """One container's admission as the kubelet's device manager runs it (its
        devicesToAllocate, without a topology manager hint): first the devices the
        pod's init containers held (`reusable`), then, when it still needs some and has
        more free ones than that, GetPreferredAllocation over the free ones and those
        it took (which the answer must include), the preferred ones it still has free,
        topped up from the rest in its own order; then Allocate with those. Returns
        the IDs it picked and the answer."""
        picked = list(reusable)[:size]
        free = [i for i in available if i not in picked]
        if len(picked) < size and size - len(picked) < len(free):
            [preferred] = await self.preferred(
                api.ContainerPreferredRequest(tuple(free + picked), tuple(picked), size)
            )
            picked += [i for i in preferred if i in free][: size - len(picked)]
        picked += [i for i in free if i not in picked][: size - len(picked)]
        [answer] = await self.allocate(picked)
        return picked, answer


async def first_list(client: PluginClient) -> list[api.Device]:
    """The first device list ListAndWatch sends."""
    async for devices in client.list_and_watch():
        return devices
    raise AssertionError("ListAndWatch ended without a list")
