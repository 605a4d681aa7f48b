"""The kubelet's pod-resources API for the tests: `v1.PodResourcesLister` (List and
Get) served with grpcio on a real unix socket, answering what the test put in `pods`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from scheduler.agent import podresources_api as api
from tests.agent.unix_grpc import serve_on_socket, stop_serving


class FakePodResources:
    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.pods: list[api.PodResources] = []
        self.calls = 0
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        async def list_pods(_: None, context: grpc.aio.ServicerContext[Any, Any]) -> list[Any]:
            self.calls += 1
            return list(self.pods)

        async def get_pod(
            request: api.GetRequest, context: grpc.aio.ServicerContext[Any, Any]
        ) -> api.PodResources:
            self.calls += 1
            for pod in self.pods:
                if (pod.namespace, pod.name) == (request.namespace, request.name):
                    return pod
            # As the kubelet's server_v1.go answers a pod it does not run: a plain Go
            # error, which gRPC sends as UNKNOWN.
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.name} in namespace {request.namespace} not found",
            )
            raise AssertionError("abort returns no value")

        self._server = await serve_on_socket(
            self.socket,
            api.SERVICE,
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    list_pods,
                    request_deserializer=api.decode_list_request,
                    response_serializer=api.encode_list_response,
                ),
                "Get": grpc.unary_unary_rpc_method_handler(
                    get_pod,
                    request_deserializer=api.decode_get_request,
                    response_serializer=api.encode_get_response,
                ),
            },
        )

    async def stop(self) -> None:
        await stop_serving(self._server, self.socket)
        self._server = None


def holding(namespace: str, name: str, resource: str, *ids: str) -> api.PodResources:
    """A pod whose one container `main` holds `ids` of `resource`."""
    return api.PodResources(
        namespace, name, (api.ContainerResources("main", (api.Devices(resource, ids),)),)
    )
