"""Routes of the v2 HTTP protocol and Triton's extensions, answered from the core."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from ptserve.core.errors import ServerError, invalid_arg
from ptserve.core.server import InferenceServer
from ptserve.frontends.http import codec, compression
from ptserve.frontends.http.protocol import HttpRequest, HttpResponse
from ptserve.frontends.http.restrictions import Restrictions

log = logging.getLogger("ptserve.http")

Route = Callable[[HttpRequest, dict[str, str]], Awaitable[HttpResponse]]

_MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?"


def _error(exc: ServerError) -> HttpResponse:
    return HttpResponse.error(exc.status.http_status, exc.message)


class HttpApp:
    """Maps method and path to a handler; every client mistake becomes a 4xx with a message."""

    def __init__(
        self,
        server: InferenceServer,
        max_input_size: int,
        restrictions: Restrictions | None = None,
    ) -> None:
        self.server = server
        self.max_input_size = max_input_size
        self.restrictions = restrictions or Restrictions([])
        self.routes: list[tuple[re.Pattern[str], dict[str, Route]]] = [
            (re.compile(r"/v2/health/live"), {"GET": self.health_live}),
            (re.compile(r"/v2/health/ready"), {"GET": self.health_ready}),
            (re.compile(r"/v2"), {"GET": self.server_metadata}),
            (re.compile(r"/v2/models/stats"), {"GET": self.model_stats}),
            (re.compile(_MODEL + r"/ready"), {"GET": self.model_ready}),
            (re.compile(_MODEL + r"/config"), {"GET": self.model_config}),
            (re.compile(_MODEL + r"/stats"), {"GET": self.model_stats}),
            (re.compile(_MODEL + r"/infer"), {"POST": self.infer}),
            (re.compile(_MODEL), {"GET": self.model_metadata}),
        ]

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        path = request.path.rstrip("/") or "/"
        denial = self.restrictions.denial(path, request.headers)
        if denial is not None:
            return HttpResponse.error(403, denial)
        for pattern, methods in self.routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            handler = methods.get(request.method)
            if handler is None:
                return HttpResponse.error(
                    405, f"method {request.method} is not allowed for {request.path}"
                )
            params = {k: _unquote(v) for k, v in match.groupdict().items() if v is not None}
            try:
                return await handler(request, params)
            except ServerError as exc:
                return _error(exc)
        return HttpResponse.error(404, f"not found: {request.path}")

    # --- health and metadata ---------------------------------------------------------------

    async def health_live(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse.empty(200 if self.server.live else 400)

    async def health_ready(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse.empty(200 if self.server.ready else 400)

    async def server_metadata(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse.json(self.server.metadata())

    async def model_metadata(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse.json(
            self.server.model_metadata(params["model"], params.get("version", ""))
        )

    async def model_ready(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        ready = self.server.model_ready(params["model"], params.get("version", ""))
        return HttpResponse.empty(200 if ready else 400)

    async def model_config(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse.json(
            self.server.model_config(params["model"], params.get("version", ""))
        )

    async def model_stats(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse.json(
            self.server.statistics(params.get("model", ""), params.get("version", ""))
        )

    # --- inference -------------------------------------------------------------------------

    async def infer(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        body = compression.decompress(
            request.body, request.headers.get("content-encoding", ""), self.max_input_size
        )
        header_length = _header_length(request.headers.get(codec.HEADER_LENGTH))
        infer_request = codec.decode_request(
            params["model"], params.get("version", ""), body, header_length
        )
        binary_default = _binary_default(infer_request.parameters)
        response = await self.server.infer(infer_request)
        encoded = codec.encode_response(response, binary_default)
        parts: list[bytes | memoryview] = [encoded.header, *encoded.binary]
        result = HttpResponse(200, parts)
        if encoded.binary:
            result.content_type = "application/octet-stream"
            result.headers.append(("Inference-Header-Content-Length", str(len(encoded.header))))
        encoding = compression.choose_encoding(request.headers.get("accept-encoding", ""))
        if encoding:
            result.body = [compression.compress(parts, encoding)]
            result.headers.append(("Content-Encoding", encoding))
        return result


def _header_length(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit():
        raise invalid_arg(
            f"Inference-Header-Content-Length must be a non-negative integer, got '{value}'"
        )
    return int(text)


def _binary_default(parameters: dict[str, Any]) -> bool:
    value = parameters.get("binary_data_output", False)
    if not isinstance(value, bool):
        raise invalid_arg(f"binary_data_output must be true or false, got {value!r}")
    return value


def _unquote(value: str) -> str:
    from urllib.parse import unquote

    return unquote(value)
