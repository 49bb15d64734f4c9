"""Restricted API groups (403 without the header) and HTTPS with a certificate made here."""

from __future__ import annotations

import http.client
import json
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from ptserve.frontends.http.app import group_of
from ptserve.frontends.restrictions import parse_restriction
from tests.frontends.http.rawhttp import error_of, request
from tests.serverproc import ServerProcess


@pytest.mark.parametrize(
    ("path", "group"),
    [
        ("/v2/health/live", "health"),
        ("/v2", "metadata"),
        ("/v2/models/simple", "metadata"),
        ("/v2/models/simple/versions/1/ready", "health"),
        ("/v2/models/simple/infer", "inference"),
        ("/v2/models/simple/config", "model-config"),
        ("/v2/models/stats", "statistics"),
        ("/v2/models/simple/versions/2/stats", "statistics"),
        ("/v2/repository/index", "model-repository"),
        ("/v2/systemsharedmemory/region/r/register", "shared-memory"),
        ("/v2/logging", "logging"),
        ("/v2/models/simple/trace/setting", "trace"),
    ],
)
def test_groups(path: str, group: str) -> None:
    assert group_of(path) == group


def test_bad_restriction_specs() -> None:
    with pytest.raises(ValueError, match="unknown API group"):
        parse_restriction("nonsense:key=value")
    with pytest.raises(ValueError, match="expected <api>"):
        parse_restriction("inference")


def test_restricted_groups(example_repository: Path) -> None:
    args = ["--http-restricted-api", "inference,model-config:infer-key=secret"]
    with ServerProcess([example_repository], args) as server:
        status, _, body = request(server.http_url, "GET", "/v2/models/simple/config")
        assert status == 403
        assert "expecting header 'infer-key'" in error_of(body)
        status, _, _ = request(
            server.http_url, "GET", "/v2/models/simple/config", headers={"infer-key": "wrong"}
        )
        assert status == 403
        status, _, _ = request(
            server.http_url, "GET", "/v2/models/simple/config", headers={"infer-key": "secret"}
        )
        assert status == 200
        assert request(server.http_url, "GET", "/v2/models/simple")[0] == 200  # not restricted
        client = httpclient.InferenceServerClient(server.http_url)
        inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32")]
        inputs[0].set_data_from_numpy(np.ones((1, 4), np.float32))
        with pytest.raises(httpclient.InferenceServerException) as info:
            client.infer("versioned", inputs)
        assert info.value.status() == "403"
        result = client.infer("versioned", inputs, headers={"infer-key": "secret"})
        assert result.as_numpy("OUTPUT0").tolist() == [[3.0] * 4]


def make_certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https(example_repository: Path, tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path)
    args = ["--http-use-ssl", "--http-server-cert", str(cert), "--http-server-key", str(key)]
    server = ServerProcess([example_repository], args).start(wait=None)
    context = ssl.create_default_context(cafile=str(cert))

    def get(path: str) -> tuple[int, bytes]:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", server.http_port, context=context, timeout=5
        )
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.status, reply.read()

    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                status, body = get("/v2/models/simple")
                break
            except OSError:
                assert time.monotonic() < deadline, server.log()
                time.sleep(0.2)
        assert status == 200
        assert json.loads(body)["name"] == "simple"
        # Plain HTTP on the TLS port gets no answer, and a client that does not trust the
        # certificate refuses the server.
        with pytest.raises(http.client.HTTPException):
            request(server.http_url, "GET", "/v2/health/live")
        context = ssl.create_default_context()
        with pytest.raises(ssl.SSLCertVerificationError):
            get("/v2/health/live")
    finally:
        server.stop()
