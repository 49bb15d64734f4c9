"""Starting and stopping the ``grpc.aio`` server that carries the inference service."""

from __future__ import annotations

from typing import Any

import grpc
from tritonclient.grpc import service_pb2_grpc

from ptserve.core.server import InferenceServer
from ptserve.frontends.grpc.health import health_handler
from ptserve.frontends.grpc.servicer import InferenceServicer

# Clients may send (and expect to receive) messages up to 2 GiB.
MAX_MESSAGE_BYTES = 2**31 - 1

SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
]


async def start_grpc_server(server: InferenceServer, host: str, port: int) -> Any:
    """Listen on ``host:port`` and start serving; stop it with ``await result.stop(grace)``.

    Raises OSError when the address cannot be bound.
    """
    grpc_server = grpc.aio.server(options=SERVER_OPTIONS)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        InferenceServicer(server), grpc_server
    )
    grpc_server.add_generic_rpc_handlers((health_handler(server),))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = grpc_server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"cannot listen for gRPC on {address}: {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen for gRPC on {address}")
    await grpc_server.start()
    return grpc_server
