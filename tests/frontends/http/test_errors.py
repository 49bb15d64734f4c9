"""Client mistakes get a 4xx with a message that names the problem; the server keeps serving."""

from __future__ import annotations

import gzip
import json
import socket
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.frontends.http.rawhttp import error_of, request
from tests.serverproc import ServerProcess

INFER = "/v2/models/simple/infer"


def simple_body(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
    body.update(overrides)
    return body


def post(server: ServerProcess, body: object, path: str = INFER, **headers: str) -> tuple[int, str]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, _, reply = request(server.http_url, "POST", path, raw, headers)
    return status, error_of(reply) if status != 200 else ""


def test_valid_body_works(http_server: ServerProcess) -> None:
    assert post(http_server, simple_body()) == (200, "")


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            [
                {"name": "INPUT0", "shape": [1, 8], "datatype": "INT32", "data": list(range(8))},
                {"name": "INPUT1", "shape": [1, 8], "datatype": "INT32", "data": [1] * 8},
            ],
            "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,8]",
        ),
        (
            [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
            ],
            "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
        ),
        (
            [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}],
            "missing required input(s) ['INPUT1']",
        ),
        (
            [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
                {"name": "EXTRA", "shape": [1], "datatype": "INT32", "data": [1]},
            ],
            "unexpected inference input 'EXTRA' for model 'simple'",
        ),
        (
            [
                {"name": "INPUT0", "shape": [9, 16], "datatype": "INT32", "data": [1] * 144},
                {"name": "INPUT1", "shape": [9, 16], "datatype": "INT32", "data": [1] * 144},
            ],
            "inference request batch-size must be <= 8 for 'simple'",
        ),
        (
            [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [1] * 15},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
            ],
            "input 'INPUT0': 'data' has 15 elements, but shape [1, 16] needs 16",
        ),
        (
            [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [2**40] * 16},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
            ],
            "value 1099511627776 is out of range for INT32",
        ),
        (
            [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [1.5] * 16},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
            ],
            "INT32 data must be integers, got",
        ),
        (
            [{"name": "INPUT0", "shape": [1, -16], "datatype": "INT32", "data": [1] * 16}],
            "'shape' [1, -16] has a negative dimension",
        ),
        (
            [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT33", "data": [1] * 16}],
            "invalid datatype 'INT33'",
        ),
        (
            [{"name": "INPUT0", "shape": [1, 16], "datatype": 3, "data": [1] * 16}],
            "invalid datatype '3'",
        ),
        (
            [{"name": "INPUT0", "shape": [1, 16], "datatype": ["INT32"], "data": [1] * 16}],
            "invalid datatype '['INT32']'",
        ),
        (
            [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
            ],
            "input 'INPUT0' appears more than once",
        ),
        (
            [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32"}],
            "input 'INPUT0' has neither 'data' nor parameters.binary_data_size",
        ),
        ("not a list", "the request must have an 'inputs' list"),
    ],
)
def test_bad_inputs(http_server: ServerProcess, inputs: object, message: str) -> None:
    status, error = post(http_server, {"inputs": inputs})
    assert status == 400
    assert message in error


def test_unknown_output(http_server: ServerProcess) -> None:
    status, error = post(http_server, simple_body(outputs=[{"name": "OUTPUT9"}]))
    assert status == 400
    assert "unexpected inference output 'OUTPUT9' for model 'simple'" in error


def test_unknown_model_and_version(http_server: ServerProcess) -> None:
    status, error = post(http_server, simple_body(), "/v2/models/nope/infer")
    assert (status, error) == (404, "Request for unknown model: 'nope' is not found")
    status, error = post(http_server, simple_body(), "/v2/models/simple/versions/4/infer")
    assert status == 404
    assert "'simple' version 4 is not found" in error


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "failed to parse the request JSON"),
        (b"[1, 2]", "the request JSON must be an object"),
        (b"", "failed to parse the request JSON"),
        (json.dumps({"id": 5, "inputs": []}).encode(), "'id' must be a string"),
    ],
)
def test_malformed_json(http_server: ServerProcess, body: bytes, message: str) -> None:
    status, error = post(http_server, body)
    assert status == 400
    assert message in error


def binary_body(sizes: tuple[int, int], payload: bytes) -> tuple[bytes, str]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 16],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": sizes[0]},
                },
                {
                    "name": "INPUT1",
                    "shape": [1, 16],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": sizes[1]},
                },
            ]
        }
    ).encode()
    return header + payload, str(len(header))


def test_binary_body(http_server: ServerProcess) -> None:
    data = np.arange(16, dtype=np.int32).tobytes()
    body, length = binary_body((64, 64), data + data)
    status, _headers, reply = request(
        http_server.http_url, "POST", INFER, body, {"Inference-Header-Content-Length": length}
    )
    assert status == 200
    assert json.loads(reply)["outputs"][0]["data"] == [2 * i for i in range(16)]


@pytest.mark.parametrize(
    ("sizes", "payload", "message"),
    [
        ((64, 64), b"\0" * 100, "binary_data_size 64 overruns the body"),
        ((64, 64), b"\0" * 140, "the inputs' binary_data_size values add up to 128"),
        (
            (60, 64),
            b"\0" * 124,
            "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
        ),
    ],
)
def test_binary_sizes_must_add_up(
    http_server: ServerProcess, sizes: tuple[int, int], payload: bytes, message: str
) -> None:
    body, length = binary_body(sizes, payload)
    status, _, reply = request(
        http_server.http_url, "POST", INFER, body, {"Inference-Header-Content-Length": length}
    )
    assert status == 400
    assert message in error_of(reply)


def test_header_length_beyond_body(http_server: ServerProcess) -> None:
    status, error = post(http_server, simple_body(), **{"Inference-Header-Content-Length": "99999"})
    assert status == 400
    assert "Inference-Header-Content-Length is 99999" in error


def post_bytes_element(server: ServerProcess, payload: bytes) -> tuple[int, str]:
    """One BYTES element sent as binary data to the string identity model."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(payload)},
                }
            ]
        }
    ).encode()
    status, _, reply = request(
        server.http_url,
        "POST",
        "/v2/models/identity_bytes/infer",
        header + payload,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    return status, error_of(reply) if status != 200 else ""


def test_bytes_length_prefix_lies(http_server: ServerProcess) -> None:
    status, error = post_bytes_element(http_server, struct.pack("<I", 50) + b"short")
    assert status == 400
    assert "BYTES element 0 claims 50 bytes but only 5 remain" in error


def test_oversize_body(http_server: ServerProcess) -> None:
    body = b"x" * ((1 << 20) + 10)
    status, error = post(http_server, body)
    assert status == 400
    assert "exceeds the maximum allowed size of 1048576 bytes" in error


def test_decompression_bomb(http_server: ServerProcess) -> None:
    bomb = gzip.compress(b" " * (8 << 20))
    status, error = post(http_server, bomb, **{"Content-Encoding": "gzip"})
    assert status == 400
    assert "decompressed request body exceeds the maximum allowed size" in error


def test_compressed_json_body(http_server: ServerProcess) -> None:
    raw = json.dumps(simple_body()).encode()
    assert post(http_server, gzip.compress(raw), **{"Content-Encoding": "gzip"})[0] == 200
    assert post(http_server, zlib.compress(raw), **{"Content-Encoding": "deflate"})[0] == 200
    status, error = post(http_server, b"garbage", **{"Content-Encoding": "gzip"})
    assert status == 400 and "failed to decompress" in error


def test_unsupported_encoding(http_server: ServerProcess) -> None:
    status, error = post(http_server, simple_body(), **{"Content-Encoding": "br"})
    assert status == 501
    assert "unsupported Content-Encoding 'br'" in error


def test_response_compression_keeps_header_length(http_server: ServerProcess) -> None:
    body = simple_body(outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}])
    status, headers, reply = request(
        http_server.http_url,
        "POST",
        INFER,
        json.dumps(body).encode(),
        {"Accept-Encoding": "gzip"},
    )
    assert status == 200
    assert headers["content-encoding"] == "gzip"
    assert headers["content-type"] == "application/octet-stream"
    plain = gzip.decompress(reply)
    length = int(headers["inference-header-content-length"])
    header = json.loads(plain[:length])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 64
    values = np.frombuffer(plain[length:], dtype="<i4")
    assert values.tolist() == [i + 1 for i in range(16)]


def test_model_error_fails_request_and_model_keeps_serving(http_server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(http_server.http_url)
    bad = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    bad.set_data_from_numpy(np.full((1, 4), -1, np.float32))
    with pytest.raises(httpclient.InferenceServerException) as info:
        client.infer("fails", [bad])
    assert info.value.status() == "500"
    assert "PyTorch execute failure" in info.value.message()
    assert "negative input is not allowed" in info.value.message()
    good = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    good.set_data_from_numpy(np.ones((1, 4), np.float32))
    np.testing.assert_array_equal(client.infer("fails", [good]).as_numpy("OUTPUT0"), 2.0)


def test_invalid_utf8_string_fails_its_request(http_server: ServerProcess) -> None:
    element = b"\xff\xfe"
    status, error = post_bytes_element(http_server, struct.pack("<I", len(element)) + element)
    assert status == 400
    assert "not valid UTF-8" in error
    assert post_bytes_element(http_server, struct.pack("<I", 2) + b"ok") == (200, "")


def test_pipelined_requests_answered_in_order(http_server: ServerProcess) -> None:
    host, port = http_server.http_url.split(":")
    bodies = [json.dumps(simple_body(id=f"r{i}")).encode() for i in range(3)]
    wire = b"".join(
        b"POST "
        + INFER.encode()
        + b" HTTP/1.1\r\nHost: x\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
        for body in bodies
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(wire + b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while received.count(b"HTTP/1.1 ") < 4 or not received.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    ids = [part.split(b'"id":"')[1][:2] for part in received.split(b"HTTP/1.1 200")[1:]]
    assert ids == [b"r0", b"r1", b"r2"]
    assert b"HTTP/1.1 404" in received


def test_malformed_http_is_answered(http_server: ServerProcess) -> None:
    host, port = http_server.http_url.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 400")
    assert request(http_server.http_url, "GET", "/v2/health/live")[0] == 200


def test_half_sent_body_times_out(example_repository: Path) -> None:
    with ServerProcess([example_repository], ["--http-read-timeout-secs", "1"]) as server:
        host, port = server.http_url.split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(
                b"POST " + INFER.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
            )
            started = time.monotonic()
            reply = sock.recv(65536)
            waited = time.monotonic() - started
        assert reply.startswith(b"HTTP/1.1 408")
        assert b"not received completely within 1 s" in reply
        assert 0.5 < waited < 20
        # A slow but complete request on another connection is still answered.
        assert post(server, simple_body())[0] == 200


def test_hostile_requests_do_not_disturb_concurrent_ones(http_server: ServerProcess) -> None:
    """Garbage on other connections, all at once, while a client keeps sending valid requests."""
    import random
    import threading

    rng = random.Random(3)
    garbage = [
        b"{not json",
        json.dumps(
            {"inputs": [{"name": "INPUT0", "shape": [1, -1], "datatype": "INT32"}]}
        ).encode(),
        json.dumps(
            simple_body(
                inputs=[
                    {"name": "INPUT0", "shape": [2**40, 2**40], "datatype": "BYTES", "data": []}
                ]
            )
        ).encode(),
        bytes(rng.getrandbits(8) for _ in range(300)),
    ]
    stop = threading.Event()
    statuses: list[int] = []

    def attack() -> None:
        while not stop.is_set():
            for body in garbage:
                statuses.append(post(http_server, body)[0])
            host, port = http_server.http_url.split(":")
            with socket.create_connection((host, int(port)), timeout=30) as sock:
                sock.sendall(
                    b"POST " + INFER.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
                )
                # half-sent: the connection is dropped with the body missing

    attackers = [threading.Thread(target=attack) for _ in range(3)]
    for thread in attackers:
        thread.start()
    try:
        client = httpclient.InferenceServerClient(http_server.http_url)
        for i in range(60):
            a = np.full((1, 16), i, np.int32)
            inputs = [
                httpclient.InferInput("INPUT0", [1, 16], "INT32"),
                httpclient.InferInput("INPUT1", [1, 16], "INT32"),
            ]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(np.ones_like(a))
            result = client.infer("simple", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - 1)
    finally:
        stop.set()
        for thread in attackers:
            thread.join()
    assert statuses and set(statuses) == {400}
