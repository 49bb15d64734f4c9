"""Starting and stopping the gRPC server that carries the inference and health services, on
either transport; both serve the same guarded method handlers."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from ptserve.core.server import InferenceServer
from ptserve.frontends.grpc import health
from ptserve.frontends.grpc.guard import guard_service
from ptserve.frontends.grpc.keepalive import Keepalive
from ptserve.frontends.grpc.servicer import WIRE_METHODS, InferenceServicer
from ptserve.frontends.grpc.status import group_of
from ptserve.frontends.restrictions import Restrictions
from ptserve.transports.http2.server import NativeGrpcServer
from ptserve.transports.tls import server_ssl_context

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
    handlers = collector.handlers
    for name in WIRE_METHODS:  # bytes in, bytes out
        handlers[name] = grpc.unary_unary_rpc_method_handler(handlers[name].unary_unary)
    return handlers


def api_groups() -> dict[str, str]:
    """The API group of every RPC of the service, as its servicer method declares it."""
    groups: dict[str, str] = {}
    for name in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name:
        group = group_of(getattr(InferenceServicer, name, None))
        if group is None:
            raise RuntimeError(f"{SERVICE}/{name} declares no API group")
        groups[name] = group
    return groups


TlsFiles = tuple[str, str, str]  # certificate, key, client CA ("" without mutual TLS)
TRANSPORTS = ("native", "aio")


def aio_credentials(tls: TlsFiles) -> Any:
    """grpc.aio's TLS; with a client CA clients must present a certificate it signed (mutual
    TLS). Raises OSError when a file cannot be read."""
    certfile, keyfile, root_certfile = tls
    cert, key = Path(certfile).read_bytes(), Path(keyfile).read_bytes()
    root = Path(root_certfile).read_bytes() if root_certfile else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=root is not None
    )


def guarded_methods(server: InferenceServer, restrictions: Restrictions) -> dict[str, Any]:
    """Every method of both services, guarded, keyed by ``/service/method``."""
    methods = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods_by_name
    request_types = {name: method.input_type.full_name for name, method in methods.items()}
    servicer = InferenceServicer(server)
    handlers = inference_handlers(servicer)
    services = {SERVICE: guard_service(handlers, request_types, api_groups(), restrictions)}
    health_handlers = health.health_handlers(server)
    services[health.SERVICE] = guard_service(
        health_handlers,
        dict.fromkeys(health_handlers, health.REQUEST_TYPE),
        dict.fromkeys(health_handlers, "health"),
        restrictions,
    )
    return {
        f"/{service}/{name}": handler
        for service, handlers in services.items()
        for name, handler in handlers.items()
    }


def _for_aio(handler: Any) -> Any:
    """grpcio's server awaits a unary behaviour only where ``inspect`` calls it a coroutine
    function (else it runs it on a thread); the compiled gate (``unary_gate.UnaryGate``) is an
    object whose call is a coroutine, so it gets a coroutine function in front. A method
    without a serializer answers with its message's bytes, or their parts (see
    ``calls.Reply``), which grpcio takes joined."""
    gate = handler.unary_unary
    if gate is None:
        return handler
    serializer = handler.response_serializer or _joined
    if inspect.iscoroutinefunction(gate):
        return grpc.unary_unary_rpc_method_handler(gate, handler.request_deserializer, serializer)

    async def unary(request: Any, context: Any) -> Any:
        return await gate(request, context)

    return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer, serializer)


def _joined(reply: Any) -> bytes:
    """A reply given as its bytes or as their parts, as one ``bytes``."""
    return b"".join(reply) if isinstance(reply, list) else bytes(reply)


async def _start_aio(
    methods: dict[str, Any], address: str, tls: TlsFiles | None, keepalive: Keepalive
) -> Any:
    grpc_server = grpc.aio.server(options=SERVER_OPTIONS + keepalive.options())
    by_service: dict[str, dict[str, Any]] = {}
    for path, handler in methods.items():
        service, name = path[1:].split("/")
        by_service.setdefault(service, {})[name] = _for_aio(handler)
    for service, handlers in by_service.items():
        grpc_server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, handlers),)
        )
        grpc_server.add_registered_method_handlers(service, handlers)
    try:
        if tls is None:
            bound = grpc_server.add_insecure_port(address)
        else:
            bound = grpc_server.add_secure_port(address, aio_credentials(tls))
    except RuntimeError as exc:
        raise OSError(f"cannot listen for gRPC on {address}: {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen for gRPC on {address}")
    await grpc_server.start()
    return grpc_server


async def start_grpc_server(
    server: InferenceServer,
    host: str,
    port: int,
    restrictions: Restrictions | None = None,
    tls: TlsFiles | None = None,
    transport: str = "native",
    keepalive: Keepalive | None = None,
) -> Any:
    """Listen on ``host:port`` (TLS when ``tls`` names the files) and start serving; stop it
    with ``await result.stop(grace)``. ``transport`` is ``native`` (HTTP/2 on the event loop)
    or ``aio`` (grpcio's server, whose own threads poll the connections).

    Raises OSError when the address cannot be bound or a TLS file cannot be read.
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown gRPC transport '{transport}', expected one of {TRANSPORTS}")
    methods = guarded_methods(server, restrictions or Restrictions([]))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if transport == "aio":
        return await _start_aio(methods, address, tls, keepalive or Keepalive())
    native = NativeGrpcServer(methods, MAX_MESSAGE_BYTES)
    try:
        await native.start(host, port, None if tls is None else server_ssl_context(*tls))
    except OSError as exc:
        raise OSError(f"cannot listen for gRPC on {address}: {exc}") from None
    return native
