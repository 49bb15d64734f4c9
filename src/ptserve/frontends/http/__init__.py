"""The KServe v2 HTTP/REST frontend with Triton's extensions."""

from __future__ import annotations

import asyncio
import ssl

from ptserve.core.server import InferenceServer
from ptserve.frontends.http.app import HttpApp
from ptserve.frontends.http.protocol import DEFAULT_READ_TIMEOUT, HttpProtocol
from ptserve.frontends.http.restrictions import Restrictions, parse_restriction
from ptserve.frontends.tls import server_ssl_context

DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024


async def start_http_server(
    server: InferenceServer,
    host: str,
    port: int,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
    restrictions: Restrictions | None = None,
    ssl_context: ssl.SSLContext | None = None,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
) -> asyncio.Server:
    """Listen on ``host:port``; the returned server is closed to stop accepting connections."""
    app = HttpApp(server, max_input_size, restrictions)
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HttpProtocol(app, max_input_size, read_timeout),
        host,
        port,
        reuse_address=True,
        backlog=1024,
        ssl=ssl_context,
    )


__all__ = [
    "DEFAULT_MAX_INPUT_SIZE",
    "HttpApp",
    "Restrictions",
    "parse_restriction",
    "server_ssl_context",
    "start_http_server",
]
