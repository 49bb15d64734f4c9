"""The KServe v2 HTTP/REST frontend with Triton's extensions."""

from __future__ import annotations

import asyncio

from ptserve.core.server import InferenceServer
from ptserve.frontends.http.app import HttpApp
from ptserve.frontends.http.protocol import HttpProtocol

DEFAULT_MAX_INPUT_SIZE = 64 * 1024 * 1024


async def start_http_server(
    server: InferenceServer,
    host: str,
    port: int,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
) -> asyncio.Server:
    """Listen on ``host:port``; the returned server is closed to stop accepting connections."""
    app = HttpApp(server, max_input_size)
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HttpProtocol(app, max_input_size), host, port, reuse_address=True, backlog=1024
    )


__all__ = ["DEFAULT_MAX_INPUT_SIZE", "HttpApp", "start_http_server"]
