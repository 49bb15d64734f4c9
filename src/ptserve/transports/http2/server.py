"""The native gRPC listener: HTTP/2 connections served on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from typing import Any

from ptserve.transports.http2.connection import Connection
from ptserve.transports.http2.policing import DEFAULT_LIMITS, Limits


class NativeGrpcServer:
    """Serves method handlers (``grpc.RpcMethodHandler``, keyed by ``/service/method``) with the
    same ``start`` / ``stop(grace)`` as ``grpc.aio.Server``."""

    def __init__(
        self, methods: Mapping[str, Any], max_message: int, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self._methods = dict(methods)
        self._max_message = max_message
        self._limits = limits
        self._connections: set[Connection] = set()
        self._listener: asyncio.Server | None = None

    def _connection(self) -> Connection:
        connection = Connection(
            self._methods, self._max_message, self._connections.discard, self._limits
        )
        self._connections.add(connection)
        return connection

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        """Raises OSError when the address cannot be bound."""
        if tls is not None:
            tls.set_alpn_protocols(["h2"])
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            self._connection, host or None, port, ssl=tls, reuse_address=True
        )

    @property
    def port(self) -> int:
        assert self._listener is not None
        port: int = self._listener.sockets[0].getsockname()[1]
        return port

    async def stop(self, grace: float | None) -> None:
        """Stop listening; calls in progress get ``grace`` seconds, then end."""
        if self._listener is not None:
            self._listener.close()
        connections = list(self._connections)
        for connection in connections:
            connection.go_away()
        if grace and connections:
            # Idle connections close once their peer has read the GOAWAY (or after lingering).
            waiting = [asyncio.ensure_future(c.closed.wait()) for c in connections]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiting), grace)
            for task in waiting:
                task.cancel()
        for connection in list(self._connections):
            connection.abort()
        if self._listener is not None:
            await self._listener.wait_closed()
