"""The HTTP listener: the HTTP/1.1 transport serving the v2 routes."""

from __future__ import annotations

import asyncio
import ssl

from ptserve.core.server import InferenceServer
from ptserve.frontends.console.service import Console
from ptserve.frontends.http.app import HttpApp
from ptserve.frontends.restrictions import Restrictions
from ptserve.transports.http1 import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT,
    Connections,
    HttpLimits,
    HttpProtocol,
)

DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024


async def start_http_server(
    server: InferenceServer,
    host: str,
    port: int,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
    restrictions: Restrictions | None = None,
    ssl_context: ssl.SSLContext | None = None,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    console: Console | None = None,
) -> asyncio.Server:
    """Listen on ``host:port``; the returned server is closed to stop accepting connections.

    ``max_connections`` (0: no limit) counts this listener's open connections; one beyond it
    is answered 503 and closed. ``console``: the web console's routes (None: off)."""
    app = HttpApp(server, max_input_size, restrictions, console)
    limits = HttpLimits(read_timeout=read_timeout, idle_timeout=idle_timeout)
    connections = Connections(max_connections)
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HttpProtocol(app, max_input_size, limits=limits, connections=connections),
        host,
        port,
        reuse_address=True,
        backlog=1024,
        ssl=ssl_context,
    )
