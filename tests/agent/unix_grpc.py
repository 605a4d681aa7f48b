"""One gRPC service served with grpcio on a real unix socket, as the kubelet serves its
APIs: what the tests' fake kubelet servers (kubelet.py, podresources_server.py) share."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
import grpc.aio


async def serve_on_socket(
    socket: Path, service: str, methods: Mapping[str, grpc.RpcMethodHandler[Any, Any]]
) -> grpc.aio.Server:
    """Start serving `service` (its full name, `package.Service`) on `socket`."""
    handler = grpc.method_handlers_generic_handler(service, dict(methods))
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    return server


async def stop_serving(server: grpc.aio.Server | None, socket: Path) -> None:
    """Stop at once (calls in flight are cancelled) and remove the socket, as a kubelet
    that stops leaves none behind."""
    if server is not None:
        await server.stop(0)
    socket.unlink(missing_ok=True)
