"""Repeated requests on one connection: each gets its own answer, whatever came before it on
that connection (other data, other outcomes, a reloaded model)."""

from __future__ import annotations

import gzip
import json
import socket
from pathlib import Path

import numpy as np
import torch

from ptserve.examples import SIMPLE_CONFIG, AddSub, write_model
from tests.frontends.http.rawhttp import error_of, request
from tests.models import simple_config
from tests.serverproc import ServerProcess


def infer_wire(model: str, *inputs: np.ndarray, extra_headers: bytes = b"") -> bytes:
    """An infer request with binary inputs INPUT0, INPUT1, ... and OUTPUT0 asked for binary."""
    datatypes = {np.dtype(np.float32): "FP32", np.dtype(np.int32): "INT32"}
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": f"INPUT{index}",
                    "datatype": datatypes[values.dtype],
                    "shape": list(values.shape),
                    "parameters": {"binary_data_size": values.nbytes},
                }
                for index, values in enumerate(inputs)
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + b"".join(values.tobytes() for values in inputs)
    return (
        b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\n" % model.encode()
        + b"Inference-Header-Content-Length: %d\r\n" % len(header)
        + b"Content-Type: application/octet-stream\r\n"
        + extra_headers
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def open_connection(url: str) -> socket.socket:
    host, port = url.split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def read_response(sock: socket.socket, status: int = 200) -> tuple[dict[str, str], bytes]:
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, body = received.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    assert lines[0].startswith(f"HTTP/1.1 {status} "), (lines, body)
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    return headers, body


def output_of(headers: dict[str, str], body: bytes, dtype: type = np.float32) -> np.ndarray:
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    length = int(headers["inference-header-content-length"])
    return np.frombuffer(body[length:], dtype)


def test_repeated_requests_on_one_connection_get_their_own_answers(
    http_server: ServerProcess,
) -> None:
    rng = np.random.default_rng(0)
    with open_connection(http_server.http_url) as sock:
        for shape in [(1, 8)] * 20 + [(2, 8)] * 5 + [(1, 8)] * 5:
            values = rng.standard_normal(shape, dtype=np.float32)
            sock.sendall(infer_wire("identity_fp32", values))
            headers, body = read_response(sock)
            np.testing.assert_array_equal(output_of(headers, body), values.ravel())


def test_repeated_requests_asking_for_compression_stay_compressed(
    http_server: ServerProcess,
) -> None:
    rng = np.random.default_rng(1)
    with open_connection(http_server.http_url) as sock:
        for _ in range(5):
            values = rng.standard_normal((1, 8), dtype=np.float32)
            sock.sendall(
                infer_wire("identity_fp32", values, extra_headers=b"Accept-Encoding: gzip\r\n")
            )
            headers, body = read_response(sock)
            assert headers["content-encoding"] == "gzip"
            np.testing.assert_array_equal(output_of(headers, body), values.ravel())


def test_repeated_requests_that_fail_or_succeed_each_get_their_answer(
    http_server: ServerProcess,
) -> None:
    """``fails`` refuses negative input: the same request form fails and succeeds in turn."""
    with open_connection(http_server.http_url) as sock:
        for sign in [1, -1, -1, 1, 1, -1, 1]:
            values = np.full((1, 4), sign, np.float32)
            sock.sendall(infer_wire("fails", values))
            if sign > 0:
                headers, body = read_response(sock)
                np.testing.assert_array_equal(output_of(headers, body), values.ravel() * 2)
            else:
                _, body = read_response(sock, 500)
                assert b"negative input is not allowed" in body


def test_repeated_string_data_that_does_not_fit_is_refused(http_server: ServerProcess) -> None:
    """BYTES elements carry their own lengths: a repetition of the right size whose lengths
    overrun its data is a client error (400), and the next good one is answered again."""

    def strings(first_length: int) -> bytes:
        body = json.dumps(
            {
                "inputs": [
                    {
                        "name": "INPUT0",
                        "datatype": "BYTES",
                        "shape": [2],
                        "parameters": {"binary_data_size": 12},
                    }
                ],
                "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
            }
        ).encode()
        header_length = len(body)
        body += first_length.to_bytes(4, "little") + b"ab" + (2).to_bytes(4, "little") + b"cd"
        return (
            b"POST /v2/models/identity_bytes/infer HTTP/1.1\r\nHost: x\r\n"
            + b"Inference-Header-Content-Length: %d\r\n" % header_length
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )

    with open_connection(http_server.http_url) as sock:
        for first_length in [2, 2, 9, 2]:
            sock.sendall(strings(first_length))
            if first_length == 2:
                headers, body = read_response(sock)
                length = int(headers["inference-header-content-length"])
                assert body[length:] == b"\x02\x00\x00\x00ab\x02\x00\x00\x00cd"
            else:
                _, body = read_response(sock, 400)
                assert "INPUT0" in error_of(body), body


def test_a_repeated_request_is_checked_against_the_model_loaded_since(tmp_path: Path) -> None:
    """After a reload with narrower inputs, the same bytes on the same connection are refused,
    as on a fresh connection (nothing about the first model version is kept for it)."""
    repository = tmp_path / "repo"
    write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    args = ["--model-control-mode", "explicit", "--load-model", "simple"]
    second = np.arange(16, dtype=np.int32)[None]
    with ServerProcess([repository], args) as server, open_connection(server.http_url) as sock:
        for step in range(4):
            sock.sendall(infer_wire("simple", np.full((1, 16), step, np.int32), second))
            headers, body = read_response(sock)
            assert output_of(headers, body, np.int32).tolist() == [step + i for i in range(16)]
        status, _, reply = request(
            server.http_url,
            "POST",
            "/v2/repository/models/simple/load",
            json.dumps({"parameters": {"config": simple_config(8)}}).encode(),
        )
        assert status == 200, reply
        sock.sendall(infer_wire("simple", np.full((1, 16), 9, np.int32), second))
        _, body = read_response(sock, 400)
        assert "unexpected shape for input 'INPUT0'" in error_of(body)
