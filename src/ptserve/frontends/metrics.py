"""The metrics port: ``GET /metrics`` in Prometheus text, on the HTTP/1.1 transport."""

from __future__ import annotations

import asyncio

from ptserve.core.metrics import CONTENT_TYPE, Metrics
from ptserve.transports.http1 import (
    Connections,
    HttpLimits,
    HttpProtocol,
    HttpRequest,
    HttpResponse,
)

METRICS_MAX_CONNECTIONS = 64


async def start_metrics_server(metrics: Metrics, host: str, port: int) -> asyncio.Server:
    """Serve ``GET /metrics`` (and HEAD) on ``host:port``, reusing the HTTP frontend's
    connection code with its default limits and at most ``METRICS_MAX_CONNECTIONS``
    connections (scrapers keep one each)."""

    async def handle(request: HttpRequest) -> HttpResponse:
        if request.path.rstrip("/") != "/metrics":
            return HttpResponse.error(404, f"not found: {request.path}")
        if request.method not in ("GET", "HEAD"):
            response = HttpResponse.error(405, f"method {request.method} is not allowed")
            response.headers.append(("Allow", "GET, HEAD"))
            return response
        text = await asyncio.to_thread(metrics.render)
        return HttpResponse(200, [text.encode()], content_type=CONTENT_TYPE)

    limits = HttpLimits()
    connections = Connections(METRICS_MAX_CONNECTIONS)
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: HttpProtocol(handle, 1 << 16, limits=limits, connections=connections),
        host,
        port,
        reuse_address=True,
    )
