"""What the HTTP routes of the console call: its files, and two read-only routes it needs that
the v2 API lacks.

- ``GET /console/...``: the page and its files (``assets``), plus ``model-config-schema.json``
  made from the protobuf descriptors (``schema``).
- ``GET /v2/metrics``: the metrics port's Prometheus text, on the HTTP port. A page may only
  call its own origin, and the metrics port is another one; CPU and GPU memory, failures by
  reason and the latency summaries are only there.
- ``GET /v2/server/info``: what the page cannot learn from the v2 API: the model control mode
  (load and unload work only in ``explicit``) and the uptime.

Nothing is kept per viewer: every answer is computed from the server's state alone.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from ptserve.core.metrics import CONTENT_TYPE, Metrics
from ptserve.core.server import InferenceServer
from ptserve.frontends.console.assets import (
    INDEX,
    SECURITY_HEADERS,
    Asset,
    load_static,
    make_asset,
)
from ptserve.frontends.console.schema import config_schema
from ptserve.transports.http1 import HttpResponse

SCHEMA_FILE = "model-config-schema.json"
CONSOLE_OFF = "the console is off on this server (--allow-console=false)"
METRICS_OFF = "metrics are off on this server (--allow-metrics=false)"
# Which reader's CPU-utilization window a render advances (see ``Metrics.render``).
METRICS_READER = "http"

# When the process imported its frontends, i.e. started (before its models loaded).
_STARTED = time.monotonic()

_REASONS = {
    "none": "the server runs with --model-control-mode=none: every model loads at start and "
    "the repository API may not load or unload (start it with --model-control-mode=explicit)",
    "poll": "the server runs with --model-control-mode=poll: it loads, reloads and unloads "
    "what changes in the repository, and the repository API may not (start it with "
    "--model-control-mode=explicit)",
}


class Console:
    """The console's routes for one HTTP listener."""

    def __init__(self, server: InferenceServer, metrics: Metrics | None = None) -> None:
        self.server = server
        self.metrics = metrics
        self.files: dict[str, Asset] = load_static()
        self.files[SCHEMA_FILE] = make_asset(SCHEMA_FILE, orjson.dumps(config_schema()))

    def file(self, path: str, name: str | None) -> HttpResponse:
        """``path`` as requested and ``name`` the part after ``/console/`` (None for none)."""
        if name is None:
            if path == "/console":
                # Relative, so that the page's relative URLs work behind a proxy's path prefix.
                response = HttpResponse(308, [], content_type="")
                response.headers.append(("Location", "console/"))
                return response
            if path != "/console/":
                return HttpResponse.error(404, f"not found: {path}")
            name = INDEX
        asset = self.files.get(name)
        if asset is None:
            return HttpResponse.error(404, f"not found: {path}")
        return HttpResponse(
            200,
            [asset.body],
            content_type=asset.content_type,
            headers=[*SECURITY_HEADERS, ("ETag", asset.etag)],
        )

    async def metrics_text(self) -> HttpResponse:
        if self.metrics is None:
            return HttpResponse.error(404, METRICS_OFF)
        text = await asyncio.to_thread(self.metrics.render, METRICS_READER)
        return HttpResponse(
            200, [text.encode()], content_type=CONTENT_TYPE, headers=[("Cache-Control", "no-store")]
        )

    def info(self) -> HttpResponse:
        options = self.server.options
        mode = options.model_control_mode
        body: dict[str, Any] = {
            "uptime_seconds": round(time.monotonic() - _STARTED, 3),
            "model_control_mode": mode,
            "load_unload": mode == "explicit",
            "load_unload_reason": _REASONS.get(mode, ""),
            "strict_readiness": options.strict_readiness,
            "metrics": self.metrics is not None,
        }
        if mode == "poll":
            body["repository_poll_secs"] = options.repository_poll_secs
        response = HttpResponse.json(body)
        response.headers.append(("Cache-Control", "no-store"))
        return response
