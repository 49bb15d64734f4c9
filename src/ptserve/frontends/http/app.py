"""Routes of the v2 HTTP protocol and Triton's extensions, answered from the core."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import orjson

from ptserve.common import logging_setup
from ptserve.common.errors import ServerError, invalid_arg, not_found, unsupported
from ptserve.common.requests import InferResponse
from ptserve.core.server import InferenceServer
from ptserve.core.shared_memory import CUDA_SHM_UNSUPPORTED
from ptserve.core.trace_records import Incoming
from ptserve.core.tracing import Tracer
from ptserve.frontends.console.service import CONSOLE_OFF, Console
from ptserve.frontends.http import codec, compression, openapi
from ptserve.frontends.repository_api import load_parameters, unload_dependents
from ptserve.frontends.restrictions import Restrictions
from ptserve.transports.http1 import HttpRequest, HttpResponse

log = logging_setup.module_logger("ptserve.http", __file__)

Route = Callable[[HttpRequest, dict[str, str]], Awaitable[HttpResponse]]

_MODEL = r"/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?"
_REPO_MODEL = r"/v2/repository/models/(?P<model>[^/]+)"
_SHM = r"/v2/(?P<kind>system|cuda)sharedmemory(?:/region/(?P<region>[^/]+))?"
_SHM_REGION = r"/v2/(?P<kind>system|cuda)sharedmemory/region/(?P<region>[^/]+)"

# Every route: its path pattern, its API group (what ``--http-restricted-api`` names) and the
# ``HttpApp`` method that answers each HTTP method. Matched in this order.
ROUTES: tuple[tuple[str, str, dict[str, str]], ...] = (
    (_SHM + r"/status", "shared-memory", {"GET": "shm_status"}),
    (_SHM_REGION + r"/register", "shared-memory", {"POST": "shm_register"}),
    (_SHM + r"/unregister", "shared-memory", {"POST": "shm_unregister"}),
    (r"/v2/health/live", "health", {"GET": "health_live"}),
    (r"/v2/health/ready", "health", {"GET": "health_ready"}),
    (r"/v2", "metadata", {"GET": "server_metadata"}),
    (r"/v2/models/stats", "statistics", {"GET": "model_stats"}),
    (r"/v2/repository/index", "model-repository", {"POST": "repository_index"}),
    (_REPO_MODEL + r"/load", "model-repository", {"POST": "repository_load"}),
    (_REPO_MODEL + r"/unload", "model-repository", {"POST": "repository_unload"}),
    (r"/v2/logging", "logging", {"GET": "log_settings", "POST": "log_settings"}),
    (r"/v2/trace/setting", "trace", {"GET": "trace_settings", "POST": "trace_settings"}),
    (_MODEL + r"/trace/setting", "trace", {"GET": "trace_settings", "POST": "trace_settings"}),
    (_MODEL + r"/ready", "health", {"GET": "model_ready"}),
    (_MODEL + r"/config", "model-config", {"GET": "model_config"}),
    (_MODEL + r"/stats", "statistics", {"GET": "model_stats"}),
    (_MODEL + r"/infer", "inference", {"POST": "infer"}),
    (_MODEL, "metadata", {"GET": "model_metadata"}),
    # This API described; the web console's files and the two read-only routes it needs
    # (frontends/console). The console's files are "metadata": its first call is to /v2.
    (r"/v2/openapi\.json", "metadata", {"GET": "openapi"}),
    (r"/v2/metrics", "statistics", {"GET": "console_metrics"}),
    (r"/v2/server/info", "metadata", {"GET": "console_info"}),
    (r"/console(?:/(?P<asset>.+))?", "metadata", {"GET": "console_file"}),
)
_COMPILED = tuple((re.compile(pattern), group, names) for pattern, group, names in ROUTES)


def group_of(path: str) -> str | None:
    """The API group of a routed path; None for a path no route takes."""
    for pattern, group, _ in _COMPILED:
        if pattern.fullmatch(path):
            return group
    return None


# Routed paths remembered (most requests repeat a few paths); forgotten all at once when full.
_ROUTE_CACHE_SIZE = 1024


def _error(exc: ServerError) -> HttpResponse:
    return HttpResponse.error(exc.status.http_status, exc.message)


def _not_allowed(method: str, path: str, allowed: list[str]) -> HttpResponse:
    """A 405 naming the methods the path takes (HEAD wherever GET is)."""
    if "GET" in allowed and "HEAD" not in allowed:
        allowed = [*allowed, "HEAD"]
    response = HttpResponse.error(405, f"method {method} is not allowed for {path}")
    response.headers.append(("Allow", ", ".join(allowed)))
    return response


class _Routed:
    """What routing concluded for one path: its handlers by method, path parameters (shared
    by the requests for that path: read-only) and API group (for --http-restricted-api)."""

    __slots__ = ("group", "methods", "params")

    def __init__(self, methods: dict[str, Route], params: dict[str, str], group: str):
        self.methods = methods
        self.params = params
        self.group = group


class HttpApp:
    """Maps method and path to a handler; every client mistake becomes a 4xx with a message."""

    def __init__(
        self,
        server: InferenceServer,
        max_input_size: int,
        restrictions: Restrictions | None = None,
        console: Console | None = None,
    ) -> None:
        self.server = server
        self.tracer = server.tracer
        self.max_input_size = max_input_size
        self.console = console  # None: --allow-console=false
        self.restrictions = restrictions or Restrictions([])
        self._restricted = bool(self.restrictions)
        self.headers = codec.HeaderCache()  # infer headers seen before
        self.routes: list[tuple[re.Pattern[str], str, dict[str, Route]]] = [
            (pattern, group, {method: getattr(self, name) for method, name in names.items()})
            for pattern, group, names in _COMPILED
        ]
        # Inference first when the path ends so: it is nearly all of the traffic.
        self._infer_first = [r for r in self.routes if r[1] == "inference"]
        self._infer_first += [r for r in self.routes if r not in self._infer_first]
        self._routed: dict[str, _Routed] = {}

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        routed = self._routed.get(request.path)
        if routed is None:
            found = self._route(request.path.rstrip("/") or "/")
            if found is None:
                return HttpResponse.error(404, f"not found: {request.path}")
            routed = found
            if len(self._routed) >= _ROUTE_CACHE_SIZE:
                self._routed.clear()
            self._routed[request.path] = routed
        if self._restricted:
            denial = self.restrictions.check(routed.group, request.headers)
            if denial is not None:
                return HttpResponse.error(403, denial)
        handler = routed.methods.get(request.method)
        if handler is None:
            if request.method != "HEAD" or "GET" not in routed.methods:
                return _not_allowed(request.method, request.path, list(routed.methods))
            handler = routed.methods["GET"]  # (the protocol sends no body for HEAD)
        try:
            return await handler(request, routed.params)
        except ServerError as exc:
            return _error(exc)

    def _route(self, path: str) -> _Routed | None:
        # Inference first: it is nearly all of the traffic.
        routes = self.routes if not path.endswith("/infer") else self._infer_first
        for pattern, group, methods in routes:
            match = pattern.fullmatch(path)
            if match is not None:
                params = {k: _unquote(v) for k, v in match.groupdict().items() if v is not None}
                return _Routed(methods, params, group)
        return None

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

    # --- this API described, and the web console -----------------------------------------

    async def openapi(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        return HttpResponse.json(openapi.document())

    async def console_file(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if self.console is None:
            return HttpResponse.error(404, CONSOLE_OFF)
        return self.console.file(request.path, params.get("asset"))

    async def console_metrics(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if self.console is None:
            return HttpResponse.error(404, CONSOLE_OFF)
        return await self.console.metrics_text()

    async def console_info(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if self.console is None:
            return HttpResponse.error(404, CONSOLE_OFF)
        return self.console.info()

    # --- inference -------------------------------------------------------------------------

    async def infer(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        headers = request.headers
        incoming = None
        if self.tracer.otel is not None:  # OpenTelemetry: this request gets a server span
            incoming = _incoming(request, params, self.tracer)
        try:
            content_encoding = headers.get("content-encoding")
            body: bytes | bytearray = request.body
            if content_encoding:
                body = compression.decompress(request.body, content_encoding, self.max_input_size)
            header_length = _header_length(headers.get(codec.HEADER_LENGTH))
            infer_request = codec.decode_request(
                params["model"],
                params.get("version", ""),
                body,
                header_length,
                self.server.shared_memory,
                self.headers,
            )
            binary_default = _binary_default(infer_request.parameters)
            response = await self.server.infer(infer_request)
            accept = headers.get("accept-encoding")
            encoding = compression.choose_encoding(accept) if accept else ""
            result = self._answer(response, binary_default)
            if encoding:
                result.body = [compression.compress(result.body, encoding)]
                result.headers.append(("Content-Encoding", encoding))
        except BaseException as exc:
            if incoming is not None:
                status = exc.status.http_status if isinstance(exc, ServerError) else 500
                incoming.attributes["http.response.status_code"] = status
                self.tracer.answered(incoming, exc)
            raise
        if incoming is not None:
            incoming.attributes["http.response.status_code"] = 200
            self.tracer.answered(incoming)
        return result

    def _answer(self, response: InferResponse, binary_default: bool) -> HttpResponse:
        encoded = codec.encode_response(response, binary_default, self.server.shared_memory)
        if not encoded.binary:
            return HttpResponse(200, [encoded.header])
        return HttpResponse(
            200,
            [encoded.header, *encoded.binary],
            "application/octet-stream",
            [("Inference-Header-Content-Length", str(len(encoded.header)))],
        )

    # --- shared memory -----------------------------------------------------------------------

    async def shm_status(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if params["kind"] == "cuda":
            if params.get("region"):
                raise not_found(f"unable to find cuda shared memory region: '{params['region']}'")
            return HttpResponse.json([])
        regions = self.server.shared_memory.status(params.get("region", ""))
        return HttpResponse.json(
            [
                {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
                for r in regions
            ]
        )

    async def shm_register(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if params["kind"] == "cuda":
            raise unsupported(CUDA_SHM_UNSUPPORTED)
        body = json_body(request)
        key = body.get("key")
        if not isinstance(key, str):
            raise invalid_arg("register: 'key' must be a string naming the shared memory object")
        numbers = {}
        for field in ("offset", "byte_size"):
            value = body.get(field, 0 if field == "offset" else None)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise invalid_arg(f"register: '{field}' must be a non-negative integer")
            numbers[field] = value
        self.server.shared_memory.register(
            params["region"], key, numbers["offset"], numbers["byte_size"]
        )
        return HttpResponse.empty(200)

    async def shm_unregister(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if params["kind"] == "system":
            self.server.shared_memory.unregister(params.get("region", ""))
        return HttpResponse.empty(200)

    # --- repository, logging and trace ------------------------------------------------------

    async def repository_index(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        ready = json_body(request).get("ready", False)
        if not isinstance(ready, bool):
            raise invalid_arg(f"repository index: 'ready' must be true or false, got {ready!r}")
        return HttpResponse.json(self.server.repository_index(ready))

    async def repository_load(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        config, files = load_parameters(_parameters(json_body(request)), files_as_base64=True)
        await self.server.load_model(params["model"], config, files)
        return HttpResponse.empty(200)

    async def repository_unload(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        dependents = unload_dependents(_parameters(json_body(request)))
        await self.server.unload_model(params["model"], dependents)
        return HttpResponse.empty(200)

    async def log_settings(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        if request.method == "POST":
            return HttpResponse.json(self.server.update_log_settings(json_body(request)))
        return HttpResponse.json(self.server.log_settings())

    async def trace_settings(self, request: HttpRequest, params: dict[str, str]) -> HttpResponse:
        model = params.get("model", "")
        if request.method == "POST":
            changes = json_body(request)
            for key, value in changes.items():
                ok = (
                    value is None
                    or isinstance(value, str)
                    or (isinstance(value, list) and all(isinstance(v, str) for v in value))
                )
                if not ok:
                    raise invalid_arg(
                        f"trace setting '{key}' must be a string, a list of strings or null"
                    )
            return HttpResponse.json(self.server.update_trace_settings(changes, model))
        return HttpResponse.json(self.server.get_trace_settings(model))


def _parameters(body: dict[str, Any]) -> dict[str, Any]:
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        raise invalid_arg("'parameters' must be a JSON object")
    return parameters


def json_body(request: HttpRequest) -> dict[str, Any]:
    """A request body that must be a JSON object (an empty body is an empty object)."""
    if not request.body.strip():
        return {}
    try:
        value = orjson.loads(request.body)
    except orjson.JSONDecodeError as exc:
        raise invalid_arg(f"failed to parse the request JSON: {exc}") from None
    if not isinstance(value, dict):
        raise invalid_arg(f"the request JSON must be an object, got {type(value).__name__}")
    return value


def _incoming(request: HttpRequest, params: dict[str, str], tracer: Tracer) -> Incoming:
    """The inference request as the server span of its trace sees it (OpenTelemetry mode)."""
    route = (
        "/v2/models/{model}/versions/{version}/infer"
        if "version" in params
        else ("/v2/models/{model}/infer")
    )
    headers = request.headers
    return tracer.incoming(
        f"{request.method} {route}",
        {"http.request.method": request.method, "http.route": route, "url.path": request.path},
        headers.get("traceparent", ""),
        headers.get("tracestate", ""),
    )


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
    return unquote(value) if "%" in value else value
