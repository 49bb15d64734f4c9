"""GET /v2/openapi.json: a valid OpenAPI 3.1 document that describes every route of the route
table and nothing else, and whose schemas the real server's answers satisfy, success and error,
route by route (every documented answer is provoked at least once)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from openapi_spec_validator import validate as validate_spec

from ptserve.frontends.http.app import ROUTES
from ptserve.frontends.http.openapi import document
from tests.frontends.console.servers import (
    HEADER,
    SECRET,
    build_repository,
    start_restricted,
)
from tests.frontends.http.rawhttp import request
from tests.serverproc import ServerProcess

# Documented answers no test can provoke, and why.
UNREACHABLE = {
    ("/v2/health/live", "get", "400"): "the server answers only while it is live",
}
SAMPLE = {"model": "mlp", "version": "1", "region": "r0", "file": "index.html"}
INFER = {
    "inputs": [
        {"name": "INPUT__0", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64},
    ]
}
FOUR = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
NEGATIVE = {
    "inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [-1, 2, 3, 4]}]
}


@pytest.fixture(scope="module")
def servers(
    example_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProcess]]:
    """ "r": every group restricted (HEADER: SECRET), explicit mode, `broken` failed, client
    shared memory on; "off": none mode, console, metrics and client shared memory off."""
    repository = build_repository(example_repository, tmp_path_factory.mktemp("openapi-repo"))
    restricted = start_restricted(repository, ["--allow-client-shm", "true"])
    off = ServerProcess(
        [example_repository],
        ["--allow-console", "false", "--allow-metrics", "false", "--model-control-mode", "none"],
    )
    try:
        off.start()
        yield {"r": restricted, "off": off}
    finally:
        restricted.stop()
        if off.process is not None:
            off.stop()


def template_regex(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{[a-z]+\\\}", "[^/]+", re.escape(template)))


def find_template(path: str) -> str:
    """The documented path a concrete path falls under (concrete ones before templated)."""
    candidates = [t for t in document()["paths"] if template_regex(t).fullmatch(path)]
    assert candidates, f"no documented path for {path}"
    return min(candidates, key=lambda t: (t.count("{"), -len(t)))


def instantiate(template: str) -> str:
    return re.sub(r"\{([a-z]+)\}", lambda m: SAMPLE[m.group(1)], template)


def check_answer(
    method: str, path: str, status: int, headers: dict[str, str], body: bytes
) -> tuple[str, str, str]:
    """Assert that the answer is one the document describes; returns (path, method, status)."""
    spec = document()
    template = find_template(path.split("?")[0])
    operation = spec["paths"][template][method.lower()]
    answer = operation["responses"].get(str(status))
    assert answer is not None, f"{method} {path}: {status} is not documented: {body[:300]!r}"
    for name in answer.get("headers", {}):
        if name == "Inference-Header-Content-Length" and "octet-stream" not in headers.get(
            "content-type", ""
        ):
            continue
        assert name.lower() in headers, f"{method} {path}: header {name} missing"
    content = answer.get("content")
    if not body:
        assert content is None or answer.get("x-body-optional"), f"{method} {path}: empty body"
        return template, method.lower(), str(status)
    assert content is not None, f"{method} {path}: {status} has a body the document omits"
    media = headers["content-type"].split(";")[0].strip()
    assert media in content, f"{method} {path}: {media} not in {sorted(content)}"
    if media == "application/octet-stream":
        length = int(headers["inference-header-content-length"])
        value = json.loads(body[:length])
        schema = content["application/json"]["schema"]
    elif media == "application/json":
        value = json.loads(body)
        schema = content[media]["schema"]
    else:
        body.decode("utf-8")
        return template, method.lower(), str(status)
    validator = jsonschema.Draft202012Validator({**schema, "components": spec["components"]})
    errors = sorted(validator.iter_errors(value), key=str)
    assert not errors, f"{method} {path} ({status}): {errors[0].message:.300} in {value!r:.300}"
    return template, method.lower(), str(status)


def test_the_document_is_valid_openapi_3_1() -> None:
    spec = document()
    assert spec["openapi"] == "3.1.0"
    validate_spec(spec)


def test_routes_and_document_describe_the_same_api() -> None:
    spec = document()
    compiled = [(re.compile(p), group, methods) for p, group, methods in ROUTES]
    used: set[tuple[str, str]] = set()
    for template, operations in spec["paths"].items():
        concrete = instantiate(template)
        routed = concrete.rstrip("/") or "/"
        match = next((r for r in compiled if r[0].fullmatch(routed)), None)
        assert match is not None, f"{template} is documented but no route takes it"
        pattern, group, methods = match
        for method, operation in operations.items():
            assert method.upper() in methods, f"{method} {template}: the route has no {method}"
            assert operation["x-api-group"] == group, f"{method} {template}: group"
            assert "403" in operation["responses"]
            used.add((pattern.pattern, method.upper()))
    for pattern, _group, methods in ROUTES:
        for method in methods:
            assert (pattern, method) in used, f"route {pattern} {method} is not documented"


def test_the_document_is_served(servers: dict[str, ServerProcess]) -> None:
    status, headers, body = request(
        servers["r"].http_url, "GET", "/v2/openapi.json", headers={HEADER: SECRET}
    )
    assert (status, headers["content-type"]) == (200, "application/json")
    assert json.loads(body) == document()


def cases(shm_key: str) -> list[tuple[str, str, str, Any, dict[str, str], int]]:
    """(server, method, path, body, headers, expected status), in an order that keeps the
    server's state what later cases expect."""
    j = json.dumps
    c: list[tuple[str, str, str, Any, dict[str, str], int]] = []

    def add(
        method: str,
        path: str,
        status: int,
        body: Any = None,
        headers: dict[str, str] | None = None,
        server: str = "r",
    ) -> None:
        data = b"" if body is None else body if isinstance(body, bytes) else j(body).encode()
        c.append((server, method, path, data, headers or {}, status))

    add("GET", "/v2/health/live", 200)
    add("GET", "/v2/health/ready", 400)  # `broken` failed: not ready
    add("GET", "/v2/health/ready", 200, server="off")
    add("GET", "/v2", 200)
    add("GET", "/v2/models/stats", 200)
    add("GET", "/v2/openapi.json", 200)
    for prefix in ("/v2/models/mlp", "/v2/models/mlp/versions/1"):
        add("GET", prefix, 200)
        add("GET", prefix + "/ready", 200)
        add("GET", prefix + "/config", 200)
        add("GET", prefix + "/stats", 200)
        add("POST", prefix + "/infer", 200, INFER)
        add("POST", prefix + "/infer", 200, {**INFER, "parameters": {"binary_data_output": True}})
        add("POST", prefix + "/infer", 400, {"inputs": "nope"})
        add("POST", prefix + "/infer", 400, b"{not json")
        add("POST", prefix + "/infer", 501, INFER, {"Content-Encoding": "br"})
        add("GET", prefix + "/trace/setting", 200)
        add("POST", prefix + "/trace/setting", 200, {"trace_rate": "10"})
        add("POST", prefix + "/trace/setting", 400, {"trace_rate": 5})
    for prefix in ("/v2/models/nosuch", "/v2/models/mlp/versions/9"):
        add("GET", prefix, 404)
        add("GET", prefix + "/ready", 400)
        add("GET", prefix + "/config", 404)
        add("GET", prefix + "/stats", 404)
        add("POST", prefix + "/infer", 404, INFER)
    for prefix in ("/v2/models/nosuch", "/v2/models/nosuch/versions/1"):
        add("GET", prefix + "/trace/setting", 404)
        add("POST", prefix + "/trace/setting", 404, {})
    for prefix in ("/v2/models/broken", "/v2/models/broken/versions/1"):
        add("GET", prefix, 503)
        add("GET", prefix + "/config", 503)
        add("POST", prefix + "/infer", 503, FOUR)
    add("GET", "/v2/models/broken/versions/1/stats", 503)
    for prefix in ("/v2/models/mlp/versions/x",):
        add("GET", prefix, 400)
        add("GET", prefix + "/ready", 400)
        add("GET", prefix + "/config", 400)
        add("GET", prefix + "/stats", 400)
    add("POST", "/v2/models/fails/infer", 500, NEGATIVE)
    add("POST", "/v2/models/fails/versions/1/infer", 500, NEGATIVE)
    add("POST", "/v2/repository/index", 200)
    add("POST", "/v2/repository/index", 200, {"ready": True})
    add("POST", "/v2/repository/index", 400, {"ready": "yes"})
    add("POST", "/v2/repository/models/simple/unload", 200, {})
    add("POST", "/v2/repository/models/simple/load", 200, {})
    add("POST", "/v2/repository/models/broken/load", 400, {})
    add("POST", "/v2/repository/models/nosuch/load", 400, {})
    add("POST", "/v2/repository/models/simple/load", 400, {"parameters": {"config": 5}})
    add("POST", "/v2/repository/models/nosuch/unload", 404, {})
    add(
        "POST", "/v2/repository/models/simple/unload", 400, {"parameters": {"unload_dependents": 1}}
    )
    add("POST", "/v2/repository/models/simple/load", 503, {}, server="off")
    add("POST", "/v2/repository/models/simple/unload", 503, {}, server="off")
    add("GET", "/v2/logging", 200)
    add("POST", "/v2/logging", 200, {"log_verbose_level": 0})
    add("POST", "/v2/logging", 400, {"log_info": "yes"})
    add("GET", "/v2/trace/setting", 200)
    add("POST", "/v2/trace/setting", 200, {"trace_rate": "1000"})
    add("POST", "/v2/trace/setting", 400, {"trace_level": ["LOUD"]})
    shm = "/v2/systemsharedmemory"
    register = {"key": shm_key, "offset": 0, "byte_size": 64}
    add("POST", shm + "/region/r0/register", 200, register)
    add("POST", shm + "/region/r0/register", 409, register)
    add("POST", shm + "/region/r1/register", 400, {"key": shm_key, "byte_size": -1})
    add("POST", shm + "/region/r1/register", 503, register, server="off")
    add("GET", shm + "/status", 200)
    add("GET", shm + "/region/r0/status", 200)
    add("GET", shm + "/region/nosuch/status", 404)
    add("POST", shm + "/region/r0/unregister", 200)
    add("POST", shm + "/unregister", 200)
    add("POST", shm + "/region/r0/unregister", 503, server="off")
    add("POST", shm + "/unregister", 503, server="off")
    cuda = "/v2/cudasharedmemory"
    add("GET", cuda + "/status", 200)
    add("GET", cuda + "/region/r0/status", 404)
    add("POST", cuda + "/region/r0/register", 501, register)
    add("POST", cuda + "/region/r0/unregister", 200)
    add("POST", cuda + "/unregister", 200)
    add("GET", "/v2/metrics", 200)
    add("GET", "/v2/metrics", 404, server="off")
    add("GET", "/v2/server/info", 200)
    add("GET", "/v2/server/info", 404, server="off")
    add("GET", "/console", 308)
    add("GET", "/console", 404, server="off")
    add("GET", "/console/", 200)
    add("GET", "/console/", 404, server="off")
    for asset in (
        "index.html",
        "console.css",
        "icon.svg",
        "model-config-schema.json",
        "js/main.js",
        "js/pages/tryit.js",
    ):
        add("GET", f"/console/{asset}", 200)
    for asset in ("nosuch.js", "js/nosuch.js", "js/pages/nosuch.js"):
        add("GET", f"/console/{asset}", 404)
    add("GET", "/console/js/main.js", 404, server="off")
    return c


def test_real_answers_match_the_document(servers: dict[str, ServerProcess]) -> None:
    memory = shared_memory.SharedMemory(create=True, size=64)
    seen: set[tuple[str, str, str]] = set()
    try:
        for server, method, path, body, headers, expected in cases("/" + memory.name):
            if server == "r":
                headers = {**headers, HEADER: SECRET}
            status, answer_headers, answer = request(
                servers[server].http_url, method, path, body, headers
            )
            assert status == expected, f"{server} {method} {path}: {status} {answer[:300]!r}"
            seen.add(check_answer(method, path, status, answer_headers, answer))
    finally:
        memory.close()
        memory.unlink()
    documented = {
        (template, method, status)
        for template, operations in document()["paths"].items()
        for method, operation in operations.items()
        for status in operation["responses"]
        if status != "403"
    }
    missing = documented - seen - set(UNREACHABLE)
    assert not missing, f"documented answers never seen: {sorted(missing)}"


def test_every_route_refuses_without_the_header(servers: dict[str, ServerProcess]) -> None:
    """The 403 of every operation, in the documented shape."""
    for template, operations in document()["paths"].items():
        for method in operations:
            path = instantiate(template)
            status, headers, body = request(servers["r"].http_url, method.upper(), path, b"{}")
            assert status == 403, f"{method} {path}: {status}"
            check_answer(method, path, status, headers, body)
