"""The console's files and routes on the real server: content types, security headers, every
reference of the page resolvable, hostile paths refused, the restrictions, and the flags that
turn it off."""

from __future__ import annotations

import json
import re
import tomllib
import urllib.request
from pathlib import Path

import pytest

from ptserve.frontends.console.assets import CONTENT_TYPES, load_static
from ptserve.frontends.console.schema import config_schema
from tests.frontends.console.servers import HEADER, SECRET
from tests.frontends.http.rawhttp import error_of, request
from tests.serverproc import ServerProcess

STATIC = (
    Path(__file__).resolve().parents[3] / "src" / "ptserve" / "frontends" / "console" / "static"
)


def shipped() -> list[str]:
    return sorted(
        p.relative_to(STATIC).as_posix()
        for p in STATIC.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )


def test_the_files_ship_in_the_wheel() -> None:
    """pyproject.toml's package data covers every file of static/ (a wheel built without them
    would serve a console of 404s)."""
    pyproject = tomllib.loads((STATIC.parents[4] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["ptserve"]
    package = STATIC.parents[2]
    covered = {
        path.relative_to(STATIC).as_posix()
        for pattern in patterns
        for path in package.glob(pattern)
        if path.is_file() and path.is_relative_to(STATIC)
    }
    assert covered == set(shipped())


def test_every_file_is_loaded_with_its_type() -> None:
    files = load_static()
    assert sorted(files) == shipped()
    for name, asset in files.items():
        assert asset.content_type == CONTENT_TYPES[Path(name).suffix]
        assert asset.body == (STATIC / name).read_bytes()


@pytest.mark.parametrize("name", shipped())
def test_files_are_served_with_type_and_security_headers(
    console_server: ServerProcess, name: str
) -> None:
    status, headers, body = request(console_server.http_url, "GET", f"/console/{name}")
    assert status == 200
    assert headers["content-type"] == CONTENT_TYPES[Path(name).suffix]
    assert body == (STATIC / name).read_bytes()
    assert headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    # HEAD: the same headers, no body.
    status, head_headers, head_body = request(console_server.http_url, "HEAD", f"/console/{name}")
    assert (status, head_body) == (200, b"")
    assert head_headers["content-length"] == str(len(body))
    assert head_headers["content-type"] == headers["content-type"]


def test_the_page_and_its_redirect(console_server: ServerProcess) -> None:
    status, headers, body = request(console_server.http_url, "GET", "/console")
    assert (status, headers["location"], body) == (308, "console/", b"")
    status, headers, body = request(console_server.http_url, "GET", "/console/")
    assert status == 200
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert body == (STATIC / "index.html").read_bytes()
    # The query string does not name a file.
    assert request(console_server.http_url, "GET", "/console/?x=../../etc/passwd")[0] == 200


def references() -> list[str]:
    """Every file the page and its scripts ask for, relative to /console/."""
    found: set[str] = set()
    html = (STATIC / "index.html").read_text()
    for ref in re.findall(r'(?:src|href)="([^"#:]+)"', html):
        if not ref.startswith("../"):
            found.add(ref)
    for script in STATIC.rglob("*.js"):
        text = script.read_text()
        for ref in re.findall(r'(?:from|import)\s+"(\.[^"]+)"', text):
            found.add((script.parent / ref).resolve().relative_to(STATIC).as_posix())
        for ref in re.findall(r'api\("(console/[^"]+)"', text):
            found.add(ref.removeprefix("console/"))
    return sorted(found)


def test_every_reference_is_served(console_server: ServerProcess) -> None:
    refs = references()
    assert "js/main.js" in refs and "console.css" in refs and "js/pages/tryit.js" in refs
    for ref in refs:
        status, _, _ = request(console_server.http_url, "GET", f"/console/{ref}")
        assert status == 200, ref


@pytest.mark.parametrize(
    "path",
    [
        "/console/../v2",
        "/console/%2e%2e/%2e%2e/etc/passwd",
        "/console/js/../../../../etc/passwd",
        "/console/js%2f..%2f..%2f..%2fservice.py",
        "/console/..%2fservice.py",
        "/console/%00",
        "/console/index.html%00.js",
        "/console//etc/passwd",
        "/console/static/index.html",
        "/console/service.py",
        "/console/__init__.py",
        "/console/js/",
        "/console/js",
        "/console/C:%5cWindows%5cwin.ini",
        "/console/%252e%252e/service.py",
        "/console/INDEX.HTML",
    ],
)
def test_hostile_paths_name_nothing(console_server: ServerProcess, path: str) -> None:
    status, headers, body = request(console_server.http_url, "GET", path)
    assert status == 404, path
    assert headers["content-type"] == "application/json"
    assert "not found" in error_of(body)


def test_only_get_and_head(console_server: ServerProcess) -> None:
    for method in ("POST", "PUT", "DELETE"):
        status, headers, body = request(console_server.http_url, method, "/console/index.html")
        assert status == 405
        assert headers["allow"] == "GET, HEAD"
        assert "not allowed" in error_of(body)


def test_the_config_schema_is_the_descriptors(console_server: ServerProcess) -> None:
    status, headers, body = request(
        console_server.http_url, "GET", "/console/model-config-schema.json"
    )
    assert (status, headers["content-type"]) == (200, "application/json")
    schema = json.loads(body)
    assert schema == config_schema()
    fields = schema["messages"]["inference.ModelConfig"]
    assert fields["parameters"]["kind"] == "map"
    assert fields["input"] == {
        "kind": "message",
        "message": "inference.ModelInput",
        "repeated": True,
    }
    assert schema["messages"]["inference.ModelInput"]["data_type"] == {
        "kind": "enum",
        "zero": "TYPE_INVALID",
    }


def test_server_info(console_server: ServerProcess) -> None:
    status, headers, body = request(console_server.http_url, "GET", "/v2/server/info")
    assert status == 200
    info = json.loads(body)
    assert info["model_control_mode"] == "explicit"
    assert (info["load_unload"], info["load_unload_reason"]) == (True, "")
    assert info["metrics"] is True
    assert 0 < info["uptime_seconds"] < 600
    assert headers["cache-control"] == "no-store"


def test_metrics_on_the_http_port_are_the_metrics_ports(console_server: ServerProcess) -> None:
    status, headers, body = request(console_server.http_url, "GET", "/v2/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    with urllib.request.urlopen(f"http://{console_server.metrics_url}/metrics") as reply:
        port_text = reply.read().decode()

    def families(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("# TYPE")]

    assert families(body.decode()) == families(port_text)
    assert "nv_inference_request_summary_us" in body.decode()


def test_restrictions_apply(restricted_server: ServerProcess) -> None:
    url = restricted_server.http_url
    for path, group in (
        ("/console/", "metadata"),
        ("/console/js/main.js", "metadata"),
        ("/v2/server/info", "metadata"),
        ("/v2/openapi.json", "metadata"),
        ("/v2/metrics", "statistics"),
    ):
        status, _, body = request(url, "GET", path)
        assert status == 403, path
        assert f"API group '{group}'" in error_of(body)
        assert request(url, "GET", path, headers={HEADER: SECRET})[0] == 200, path
        assert request(url, "GET", path, headers={HEADER: "wrong"})[0] == 403, path


def test_allow_console_false(console_off_server: ServerProcess) -> None:
    url = console_off_server.http_url
    for path in ("/console", "/console/", "/console/js/main.js", "/v2/server/info", "/v2/metrics"):
        status, _, body = request(url, "GET", path)
        assert status == 404, path
        assert "--allow-console=false" in error_of(body)
    # The API itself, and its description, stay.
    assert request(url, "GET", "/v2/openapi.json")[0] == 200
    assert request(url, "GET", "/v2/models/simple")[0] == 200
