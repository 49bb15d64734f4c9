"""Opening the HTTP and gRPC listeners of a server from their settings: the one composition
that the ``ptserve`` command and the in-process API (``ptserve.Server.serve_http``) share, so
that an embedded server answers exactly as the command's does."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ptserve.core.metrics import Metrics
from ptserve.core.server import InferenceServer
from ptserve.frontends.console.service import Console
from ptserve.frontends.grpc.guard import protocol_restrictions
from ptserve.frontends.grpc.keepalive import Keepalive
from ptserve.frontends.grpc.server import TlsFiles, start_grpc_server
from ptserve.frontends.http.server import DEFAULT_MAX_INPUT_SIZE, start_http_server
from ptserve.frontends.restrictions import Restriction, Restrictions
from ptserve.transports.http1 import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS
from ptserve.transports.tls import server_ssl_context


@dataclass(slots=True)
class HttpSettings:
    """The HTTP listener's settings, with the defaults of the command's ``--http-*`` flags."""

    address: str = "0.0.0.0"
    port: int = 8000
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE
    restricted_api: list[Restriction] = field(default_factory=list)
    tls: TlsFiles | None = None  # (certificate, key, client CA or "")
    read_timeout: float = 60.0
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    console: bool = True


@dataclass(slots=True)
class GrpcSettings:
    """The gRPC listener's settings, with the defaults of the command's ``--grpc-*`` flags."""

    address: str = "0.0.0.0"
    port: int = 8001
    restricted_protocol: list[Restriction] = field(default_factory=list)
    tls: TlsFiles | None = None
    transport: str = "native"
    keepalive: Keepalive = field(default_factory=Keepalive)


async def start_http(
    server: InferenceServer, settings: HttpSettings, metrics: Metrics | None
) -> asyncio.Server:
    """Listen for HTTP; ValueError for restrictions that contradict each other, OSError when the
    address cannot be bound."""
    restrictions = Restrictions(list(settings.restricted_api))
    ssl_context = None if settings.tls is None else server_ssl_context(*settings.tls)
    return await start_http_server(
        server,
        settings.address,
        settings.port,
        settings.max_input_size,
        restrictions,
        ssl_context,
        settings.read_timeout,
        settings.idle_timeout,
        settings.max_connections,
        Console(server, metrics) if settings.console else None,
    )


async def start_grpc(server: InferenceServer, settings: GrpcSettings) -> Any:
    """Listen for gRPC; stop it with ``await result.stop(grace)``. OSError when the address
    cannot be bound or a TLS file cannot be read, ValueError for contradicting restrictions."""
    return await start_grpc_server(
        server,
        settings.address,
        settings.port,
        protocol_restrictions(list(settings.restricted_protocol)),
        settings.tls,
        settings.transport,
        settings.keepalive,
    )


def bound_port(listener: Any, requested: int) -> int:
    """The port a listener took: the system's choice when ``requested`` was 0."""
    sockets = getattr(listener, "sockets", None)
    if sockets:
        return int(sockets[0].getsockname()[1])
    port = getattr(listener, "port", None)
    return int(port) if isinstance(port, int) and port else requested
