"""The HTTP API as an OpenAPI 3.1 document, served at ``GET /v2/openapi.json``.

Every route of ``app.ROUTES`` is described with its API group (``x-api-group``, the name that
``--http-restricted-api`` takes), its request body and every answer it gives: successes, and
errors as ``{"error": "<message>"}``. tests/frontends/console/test_openapi.py checks the
document against the real server's answers, route by route and error by error.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ptserve.common.datatypes import BY_NAME
from ptserve.common.logging_setup import LOG_FORMATS
from ptserve.common.version import __version__

JSON = "application/json"
ERROR_REF = {"$ref": "#/components/schemas/Error"}

_DESCRIPTION = """\
The KServe v2 HTTP/REST protocol with Triton's extensions, as ptserve serves it, and
ptserve's own read-only routes for its web console.

Every error body is `{"error": "<message>"}`: 400 for client mistakes, 403 for a restricted
API group (`--http-restricted-api`; each operation names its group in `x-api-group`), 404 for
unknown models, versions or paths, 501 for unsupported encodings, 503 for unavailable models,
full queues, timeouts and refused control operations, 500 for model failures.

Any path answers 405 with an `Allow` header for a method it does not take, and HEAD wherever
it takes GET. The HTTP/1.1 server itself refuses, before any route, a body over
`--http-max-input-size` (400), a request head over 64 KiB or 100 fields (431), a request that
takes longer than `--http-read-timeout-secs` to arrive (408), and an HTTP/1.1 request
without `Host` (400). Request bodies may be gzip or deflate compressed (`Content-Encoding`),
and inference answers are when the client accepts it (`Accept-Encoding`)."""


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": ERROR_REF}}}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _empty(description: str) -> dict[str, Any]:
    return {"description": description}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


MODEL = _param("model", "the model's name")
VERSION = _param("version", "a version number; left out: the model's ready versions")
REGION = _param("region", "a registered region's name")

_RESTRICTED = _error("the API group is restricted and the request lacks its header")
_BAD = _error("a client mistake; the message says which")
_UNKNOWN_MODEL = _error("no such model, or no such version of it")
_NOT_READY = _error("the model (version) exists but is not ready to serve")


def _operation(
    group: str,
    summary: str,
    responses: dict[str, dict[str, Any]],
    parameters: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    body_required: bool = False,
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": summary,
        "x-api-group": group,
        "responses": {**responses, "403": _RESTRICTED},
    }
    if parameters:
        operation["parameters"] = parameters
    if body is not None:
        operation["requestBody"] = {"required": body_required, "content": body}
    return operation


def _model_paths(
    suffix: str, build: Callable[[bool], dict[str, dict[str, Any]]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """The operations of ``/v2/models/{model}<suffix>`` and of its ``/versions/{version}``
    form, each with its path parameters; ``build(versioned)`` makes them for one form."""
    paths: dict[str, dict[str, dict[str, Any]]] = {}
    for prefix, parameters, versioned in (
        ("/v2/models/{model}", [MODEL], False),
        ("/v2/models/{model}/versions/{version}", [MODEL, VERSION], True),
    ):
        paths[prefix + suffix] = {
            method: {**operation, "parameters": [*parameters, *operation.get("parameters", [])]}
            for method, operation in build(versioned).items()
        }
    return paths


def _bad_body(body: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """A 400 for operations that take a body (those without one take nothing to get wrong)."""
    return {"400": _BAD} if body is not None else {}


def _bad_version(versioned: bool) -> dict[str, dict[str, Any]]:
    return {"400": _error("the version is not a number")} if versioned else {}


def _console_file(folder: str, example: str) -> dict[str, Any]:
    parameter = _param("file", f"a file of the console's {folder or 'top'} folder, e.g. {example}")
    media_types = ("text/html", "text/javascript", "text/css", "image/svg+xml")
    content: dict[str, Any] = {media: {"schema": {"type": "string"}} for media in media_types}
    content[JSON] = {
        "schema": {
            "type": "object",
            "description": "model-config-schema.json: ModelConfig's fields, from the protobuf "
            "descriptors, for the console's config.pbtxt rendering",
            "required": ["root", "messages"],
        }
    }
    return _operation(
        "metadata",
        f"A file of the web console{f' (under {folder})' if folder else ''}",
        {
            "200": {
                "description": "the file, with its content type",
                "content": content,
            },
            "404": _error("no such file, or the console is off"),
        },
        [parameter],
    )


def _schemas() -> dict[str, Any]:
    duration = {
        "type": "object",
        "required": ["count", "ns"],
        "properties": {"count": {"type": "integer"}, "ns": {"type": "integer"}},
        "additionalProperties": False,
    }
    tensor_data = {
        "description": "the tensor's elements in row-major order, flat or nested as the shape "
        "(numbers, booleans, or strings for BYTES); left out when the data is binary",
        "type": "array",
    }
    parameters = {"type": "object", "description": "request or tensor parameters"}
    datatype = {"type": "string", "enum": list(BY_NAME)}
    return {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"type": "string", "minLength": 1}},
            "additionalProperties": False,
        },
        "ServerMetadata": {
            "type": "object",
            "required": ["name", "version", "extensions"],
            "properties": {
                "name": {"type": "string"},
                "version": {"type": "string"},
                "extensions": {"type": "array", "items": {"type": "string"}},
            },
            "additionalProperties": False,
        },
        "TensorMetadata": {
            "type": "object",
            "required": ["name", "datatype", "shape"],
            "properties": {
                "name": {"type": "string"},
                "datatype": datatype,
                "shape": {"type": "array", "items": {"type": "integer", "minimum": -1}},
            },
            "additionalProperties": False,
        },
        "ModelMetadata": {
            "type": "object",
            "required": ["name", "versions", "platform", "inputs", "outputs"],
            "properties": {
                "name": {"type": "string"},
                "versions": {"type": "array", "items": {"type": "string"}},
                "platform": {"type": "string"},
                "inputs": {"type": "array", "items": _ref("TensorMetadata")},
                "outputs": {"type": "array", "items": _ref("TensorMetadata")},
            },
            "additionalProperties": False,
        },
        "ModelConfig": {
            "description": "Triton's JSON rendering of the model configuration (protobuf "
            "field and enum names, 64-bit integers as numbers, unset messages left out)",
            "type": "object",
            "required": ["name", "platform", "backend", "max_batch_size", "input", "output"],
            "properties": {
                "name": {"type": "string"},
                "platform": {"type": "string"},
                "backend": {"type": "string"},
                "max_batch_size": {"type": "integer"},
                "input": {"type": "array", "items": {"type": "object"}},
                "output": {"type": "array", "items": {"type": "object"}},
                "instance_group": {"type": "array", "items": {"type": "object"}},
                "dynamic_batching": {"type": "object"},
                "sequence_batching": {"type": "object"},
                "version_policy": {"type": "object"},
                "parameters": {"type": "object"},
            },
        },
        "Duration": duration,
        "ModelStatistics": {
            "type": "object",
            "required": ["model_stats"],
            "properties": {
                "model_stats": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": [
                            "name",
                            "version",
                            "last_inference",
                            "inference_count",
                            "execution_count",
                            "inference_stats",
                            "batch_stats",
                        ],
                        "properties": {
                            "name": {"type": "string"},
                            "version": {"type": "string"},
                            "last_inference": {
                                "type": "integer",
                                "description": "ms since the epoch",
                            },
                            "inference_count": {"type": "integer"},
                            "execution_count": {"type": "integer"},
                            "inference_stats": {
                                "type": "object",
                                "required": [
                                    "success",
                                    "fail",
                                    "queue",
                                    "compute_input",
                                    "compute_infer",
                                    "compute_output",
                                ],
                                "additionalProperties": _ref("Duration"),
                            },
                            "batch_stats": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": [
                                        "batch_size",
                                        "compute_input",
                                        "compute_infer",
                                        "compute_output",
                                    ],
                                    "properties": {
                                        "batch_size": {"type": "integer", "minimum": 1},
                                        "compute_input": _ref("Duration"),
                                        "compute_infer": _ref("Duration"),
                                        "compute_output": _ref("Duration"),
                                    },
                                },
                            },
                            "memory_usage": {"type": "array"},
                            "response_stats": {"type": "object"},
                        },
                    },
                }
            },
            "additionalProperties": False,
        },
        "RepositoryIndex": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "description": "a model version; in explicit mode a model never loaded has "
                "its name only",
                "properties": {
                    "name": {"type": "string"},
                    "version": {"type": "string"},
                    "state": {
                        "type": "string",
                        "enum": ["READY", "UNAVAILABLE", "LOADING", "UNLOADING"],
                    },
                    "reason": {"type": "string"},
                },
                "additionalProperties": False,
            },
        },
        "IndexRequest": {
            "type": "object",
            "properties": {"ready": {"type": "boolean"}},
        },
        "LoadRequest": {
            "type": "object",
            "properties": {
                "parameters": {
                    "type": "object",
                    "description": "'config': a ModelConfig as JSON text that replaces "
                    "config.pbtxt; 'file:<path>': a file of the model folder, base64",
                    "properties": {"config": {"type": "string"}},
                    "additionalProperties": {"type": "string"},
                }
            },
        },
        "UnloadRequest": {
            "type": "object",
            "properties": {
                "parameters": {
                    "type": "object",
                    "properties": {"unload_dependents": {"type": "boolean"}},
                }
            },
        },
        "LogSettings": {
            "type": "object",
            "properties": {
                "log_file": {"type": "string"},
                "log_info": {"type": "boolean"},
                "log_warning": {"type": "boolean"},
                "log_error": {"type": "boolean"},
                "log_verbose_level": {"type": "integer", "minimum": 0},
                "log_format": {"type": "string", "enum": list(LOG_FORMATS)},
            },
            "additionalProperties": False,
        },
        "TraceSettings": {
            "type": "object",
            "additionalProperties": {
                "oneOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}},
                ]
            },
        },
        "TraceSettingsUpdate": {
            "type": "object",
            "description": "settings to change; null resets a model's setting to the global one",
            "additionalProperties": {
                "oneOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}},
                    {"type": "null"},
                ]
            },
        },
        "InferRequest": {
            "type": "object",
            "required": ["inputs"],
            "properties": {
                "id": {"type": "string"},
                "parameters": parameters,
                "inputs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "shape", "datatype"],
                        "properties": {
                            "name": {"type": "string"},
                            "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                            "datatype": datatype,
                            "parameters": parameters,
                            "data": tensor_data,
                        },
                    },
                },
                "outputs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "parameters": parameters},
                    },
                },
            },
        },
        "InferResponse": {
            "type": "object",
            "required": ["model_name", "outputs"],
            "properties": {
                "model_name": {"type": "string"},
                "model_version": {"type": "string"},
                "id": {"type": "string"},
                "parameters": parameters,
                "outputs": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "shape", "datatype"],
                        "properties": {
                            "name": {"type": "string"},
                            "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                            "datatype": datatype,
                            "parameters": parameters,
                            "data": tensor_data,
                        },
                        "additionalProperties": False,
                    },
                },
            },
            "additionalProperties": False,
        },
        "ShmStatus": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "key", "offset", "byte_size"],
                "properties": {
                    "name": {"type": "string"},
                    "key": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 0},
                    "byte_size": {"type": "integer", "minimum": 0},
                },
                "additionalProperties": False,
            },
        },
        "ShmRegister": {
            "type": "object",
            "required": ["key", "byte_size"],
            "properties": {
                "key": {"type": "string"},
                "offset": {"type": "integer", "minimum": 0},
                "byte_size": {"type": "integer", "minimum": 0},
            },
        },
        "ServerInfo": {
            "type": "object",
            "required": [
                "uptime_seconds",
                "model_control_mode",
                "load_unload",
                "load_unload_reason",
                "strict_readiness",
                "metrics",
            ],
            "properties": {
                "uptime_seconds": {"type": "number", "minimum": 0},
                "model_control_mode": {"type": "string", "enum": ["none", "poll", "explicit"]},
                "load_unload": {
                    "type": "boolean",
                    "description": "whether the repository API may load and unload",
                },
                "load_unload_reason": {
                    "type": "string",
                    "description": "why it may not (empty when it may)",
                },
                "strict_readiness": {"type": "boolean"},
                "metrics": {
                    "type": "boolean",
                    "description": "whether GET /v2/metrics serves the metrics",
                },
                "repository_poll_secs": {"type": "number"},
            },
            "additionalProperties": False,
        },
    }


def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/v2/health/live": {
            "get": _operation(
                "health",
                "Liveness",
                {"200": _empty("live (no body)"), "400": _empty("not live (no body)")},
            )
        },
        "/v2/health/ready": {
            "get": _operation(
                "health",
                "Readiness: live, not shutting down, and (--strict-readiness) every model ready",
                {"200": _empty("ready (no body)"), "400": _empty("not ready (no body)")},
            )
        },
        "/v2": {
            "get": _operation(
                "metadata",
                "Server metadata",
                {"200": _json("name, version and extensions", _ref("ServerMetadata"))},
            )
        },
        "/v2/models/stats": {
            "get": _operation(
                "statistics",
                "Statistics of every ready model version",
                {"200": _json("cumulative counts and durations", _ref("ModelStatistics"))},
            )
        },
        "/v2/repository/index": {
            "post": _operation(
                "model-repository",
                "Every model version of the repositories with its state and reason",
                {"200": _json("the index", _ref("RepositoryIndex")), "400": _BAD},
                body={JSON: {"schema": _ref("IndexRequest")}},
            )
        },
        "/v2/repository/models/{model}/load": {
            "post": _operation(
                "model-repository",
                "Load or reload a model (explicit mode)",
                {
                    "200": _empty("loaded (no body)"),
                    "400": _error(
                        "the model failed to load (the message is the reason), it is not in "
                        "the repositories, or the request is malformed"
                    ),
                    "503": _error("the control mode is not explicit"),
                },
                [MODEL],
                {JSON: {"schema": _ref("LoadRequest")}},
            )
        },
        "/v2/repository/models/{model}/unload": {
            "post": _operation(
                "model-repository",
                "Unload a model (explicit mode)",
                {
                    "200": _empty("unloaded (no body)"),
                    "400": _BAD,
                    "404": _error("no such model"),
                    "503": _error("the control mode is not explicit"),
                },
                [MODEL],
                {JSON: {"schema": _ref("UnloadRequest")}},
            )
        },
        "/v2/logging": {
            method: _operation(
                "logging",
                summary,
                {"200": _json("the log settings", _ref("LogSettings")), **_bad_body(body)},
                body=body,
            )
            for method, summary, body in (
                ("get", "Log settings", None),
                ("post", "Change log settings", {JSON: {"schema": _ref("LogSettings")}}),
            )
        },
        "/v2/trace/setting": {
            method: _operation(
                "trace",
                summary,
                {"200": _json("the trace settings", _ref("TraceSettings")), **_bad_body(body)},
                body=body,
            )
            for method, summary, body in (
                ("get", "Global trace settings", None),
                (
                    "post",
                    "Change global trace settings",
                    {JSON: {"schema": _ref("TraceSettingsUpdate")}},
                ),
            )
        },
        "/v2/metrics": {
            "get": _operation(
                "statistics",
                "The metrics port's Prometheus text, on the HTTP port (ptserve; for the console)",
                {
                    "200": {
                        "description": "Prometheus text format 0.0.4",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    "404": _error("metrics or the console are off"),
                },
            )
        },
        "/v2/server/info": {
            "get": _operation(
                "metadata",
                "Control mode and uptime (ptserve; for the console)",
                {
                    "200": _json("what the v2 metadata leaves out", _ref("ServerInfo")),
                    "404": _error("the console is off"),
                },
            )
        },
        "/v2/openapi.json": {
            "get": _operation(
                "metadata",
                "This document",
                {"200": _json("OpenAPI 3.1", {"type": "object", "required": ["openapi"]})},
            )
        },
        "/console": {
            "get": _operation(
                "metadata",
                "The web console (redirects to console/)",
                {
                    "308": {
                        "description": "to console/ (relative, so it works under a proxy's "
                        "path prefix)",
                        "headers": {
                            "Location": {"schema": {"type": "string", "const": "console/"}}
                        },
                    },
                    "404": _error("the console is off"),
                },
            )
        },
        "/console/": {
            "get": _operation(
                "metadata",
                "The web console's page",
                {
                    "200": {
                        "description": "the page",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    },
                    "404": _error("the console is off"),
                },
            )
        },
    }
    # The console's files, folder by folder (a path parameter holds no "/").
    for folder, example in (("", "console.css"), ("js/", "main.js"), ("js/pages/", "models.js")):
        paths[f"/console/{folder}{{file}}"] = {"get": _console_file(folder, example)}
    paths.update(
        _model_paths(
            "",
            lambda versioned: {
                "get": _operation(
                    "metadata",
                    "Model metadata",
                    {
                        "200": _json("inputs, outputs and versions", _ref("ModelMetadata")),
                        **_bad_version(versioned),
                        "404": _UNKNOWN_MODEL,
                        "503": _NOT_READY,
                    },
                )
            },
        )
    )
    paths.update(
        _model_paths(
            "/ready",
            lambda versioned: {
                "get": _operation(
                    "health",
                    "Model readiness",
                    {
                        "200": _empty("ready (no body)"),
                        "400": {
                            "description": "not ready or unknown (no body), or the version "
                            "is not a number (an error)",
                            "content": {JSON: {"schema": ERROR_REF}},
                            "x-body-optional": True,
                        }
                        if versioned
                        else _empty("not ready, or no such model (no body)"),
                    },
                )
            },
        )
    )
    paths.update(
        _model_paths(
            "/config",
            lambda versioned: {
                "get": _operation(
                    "model-config",
                    "Model configuration",
                    {
                        "200": _json("Triton's JSON of the configuration", _ref("ModelConfig")),
                        **_bad_version(versioned),
                        "404": _UNKNOWN_MODEL,
                        "503": _NOT_READY,
                    },
                )
            },
        )
    )
    paths.update(
        _model_paths(
            "/stats",
            lambda versioned: {
                "get": _operation(
                    "statistics",
                    "Statistics of the model's ready versions, or of one version",
                    {
                        "200": _json("cumulative counts and durations", _ref("ModelStatistics")),
                        **_bad_version(versioned),
                        "404": _UNKNOWN_MODEL,
                        **({"503": _NOT_READY} if versioned else {}),
                    },
                )
            },
        )
    )
    paths.update(
        _model_paths(
            "/infer",
            lambda versioned: {
                "post": _operation(
                    "inference",
                    "Inference",
                    {
                        "200": {
                            "description": "the outputs; with binary outputs the body is "
                            "application/octet-stream: a JSON header of "
                            "Inference-Header-Content-Length bytes (this schema), then the "
                            "outputs' bytes",
                            "headers": {
                                "Inference-Header-Content-Length": {
                                    "schema": {"type": "integer", "minimum": 0}
                                }
                            },
                            "content": {
                                JSON: {"schema": _ref("InferResponse")},
                                "application/octet-stream": {
                                    "schema": {
                                        "type": "string",
                                        "contentMediaType": "application/octet-stream",
                                    }
                                },
                            },
                        },
                        "400": _BAD,
                        "404": _UNKNOWN_MODEL,
                        "500": _error("the model failed on this batch"),
                        "501": _error("an unsupported Content-Encoding"),
                        "503": _error(
                            "the model is not ready, its queue is full, the request's timeout "
                            "expired, or the server is shutting down"
                        ),
                    },
                    body={
                        JSON: {"schema": _ref("InferRequest")},
                        "application/octet-stream": {
                            "schema": {
                                "type": "string",
                                "description": "binary tensor extension: a JSON header of "
                                "Inference-Header-Content-Length bytes, then the inputs' bytes",
                            }
                        },
                    },
                    body_required=True,
                )
            },
        )
    )
    paths.update(
        _model_paths(
            "/trace/setting",
            lambda versioned: {
                method: _operation(
                    "trace",
                    summary,
                    {
                        "200": _json("the model's trace settings", _ref("TraceSettings")),
                        **_bad_body(body),
                        "404": _error("no such model"),
                    },
                    body=body,
                )
                for method, summary, body in (
                    ("get", "A model's trace settings", None),
                    (
                        "post",
                        "Change a model's trace settings",
                        {JSON: {"schema": _ref("TraceSettingsUpdate")}},
                    ),
                )
            },
        )
    )
    for kind in ("system", "cuda"):
        base = f"/v2/{kind}sharedmemory"
        cuda = kind == "cuda"
        regions = _json("the registered regions", _ref("ShmStatus"))
        unknown = _error("no such region")
        paths[base + "/status"] = {
            "get": _operation("shared-memory", f"Registered {kind} regions", {"200": regions})
        }
        paths[base + "/region/{region}/status"] = {
            "get": _operation(
                "shared-memory",
                f"One registered {kind} region",
                {"404": unknown} if cuda else {"200": regions, "404": unknown},
                [REGION],
            )
        }
        register: dict[str, Any] = (
            {"501": _error("CUDA shared memory is not supported")}
            if cuda
            else {
                "200": _empty("registered (no body)"),
                "400": _BAD,
                "409": _error("a region of that name is registered already"),
                "503": _error("client shared memory is off (--allow-client-shm=false)"),
            }
        )
        paths[base + "/region/{region}/register"] = {
            "post": _operation(
                "shared-memory",
                f"Register a {kind} region",
                register,
                [REGION],
                {JSON: {"schema": _ref("ShmRegister")}},
                body_required=True,
            )
        }
        unregister = {"200": _empty("unregistered, or there was no such region (no body)")}
        if not cuda:
            unregister["503"] = _error("client shared memory is off (--allow-client-shm=false)")
        paths[base + "/unregister"] = {
            "post": _operation("shared-memory", f"Unregister every {kind} region", unregister)
        }
        paths[base + "/region/{region}/unregister"] = {
            "post": _operation("shared-memory", f"Unregister a {kind} region", unregister, [REGION])
        }
    return paths


@functools.cache
def document() -> dict[str, Any]:
    """The document (built once; treat it as read-only)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ptserve HTTP API",
            "version": __version__,
            "description": _DESCRIPTION,
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "paths": _paths(),
        "components": {"schemas": _schemas()},
    }
