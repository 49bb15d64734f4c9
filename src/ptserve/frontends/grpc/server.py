"""Starting and stopping the ``grpc.aio`` server that carries the inference service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from ptserve.core.server import InferenceServer
from ptserve.frontends.grpc import health
from ptserve.frontends.grpc.guard import PROTOCOL_OF, guard_service
from ptserve.frontends.grpc.servicer import InferenceServicer
from ptserve.frontends.restrictions import Restrictions

SERVICE = "inference.GRPCInferenceService"

# Clients may send (and expect to receive) messages up to 2 GiB.
MAX_MESSAGE_BYTES = 2**31 - 1

SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
]


class _Collector:
    """Takes the place of a server for the generated ``add_..._to_server``, keeping its method
    handlers so they can be guarded before the real server sees them."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.handlers.update(handlers)


def inference_handlers(servicer: InferenceServicer) -> dict[str, Any]:
    collector = _Collector()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, collector)
    if set(collector.handlers) != set(PROTOCOL_OF):
        raise RuntimeError(f"unexpected {SERVICE} methods: {sorted(collector.handlers)}")
    return collector.handlers


def server_credentials(certfile: str, keyfile: str, root_certfile: str = "") -> Any:
    """TLS for the listener; with ``root_certfile`` clients must present a certificate it
    signed (mutual TLS). Raises OSError when a file cannot be read."""
    cert, key = Path(certfile).read_bytes(), Path(keyfile).read_bytes()
    root = Path(root_certfile).read_bytes() if root_certfile else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=root is not None
    )


def _add_service(
    grpc_server: Any,
    service: str,
    handlers: dict[str, Any],
    request_types: dict[str, str],
    groups: dict[str, str],
    restrictions: Restrictions,
) -> None:
    guarded = guard_service(handlers, request_types, groups, restrictions)
    grpc_server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, guarded),))
    grpc_server.add_registered_method_handlers(service, guarded)


async def start_grpc_server(
    server: InferenceServer,
    host: str,
    port: int,
    restrictions: Restrictions | None = None,
    credentials: Any = None,
) -> Any:
    """Listen on ``host:port`` (TLS when ``credentials`` are given) and start serving; stop it
    with ``await result.stop(grace)``.

    Raises OSError when the address cannot be bound.
    """
    restrictions = restrictions or Restrictions([])
    grpc_server = grpc.aio.server(options=SERVER_OPTIONS)
    methods = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name
    request_types = {name: method.input_type.full_name for name, method in methods.items()}
    handlers = inference_handlers(InferenceServicer(server))
    _add_service(grpc_server, SERVICE, handlers, request_types, PROTOCOL_OF, restrictions)
    health_handlers = health.health_handlers(server)
    _add_service(
        grpc_server,
        health.SERVICE,
        health_handlers,
        dict.fromkeys(health_handlers, health.REQUEST_TYPE),
        dict.fromkeys(health_handlers, "health"),
        restrictions,
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if credentials is None:
            bound = grpc_server.add_insecure_port(address)
        else:
            bound = grpc_server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise OSError(f"cannot listen for gRPC on {address}: {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen for gRPC on {address}")
    await grpc_server.start()
    return grpc_server
