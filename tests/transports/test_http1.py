"""HTTP/1.1 edges that clients and hostile peers reach: HEAD, HTTP/1.0 keep-alive, pipelines cut
short by garbage or a half-close, 100 Continue, Upgrade, header limits, idle connections, the
connection cap, and backpressure against a client that never reads.

Most go through the real server; the last ones drive HttpProtocol on an in-process listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import psutil
import pytest

from ptserve.transports.http1 import HttpProtocol, HttpRequest, HttpResponse
from tests.frontends.http.rawhttp import error_of
from tests.serverproc import ServerProcess

INFER = "/v2/models/simple/infer"
SIMPLE = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16},
        ]
    }
).encode()


@pytest.fixture(scope="module")
def http_server(example_repository: Path) -> Iterator[ServerProcess]:
    with ServerProcess([example_repository], ["--http-max-input-size", str(1 << 20)]) as server:
        yield server


def connect(url: str, timeout: float = 10.0) -> socket.socket:
    host, port = url.split(":")
    return socket.create_connection((host, int(port)), timeout=timeout)


class Reader:
    """Reads responses off a socket one by one, with what follows each kept for the next."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError(f"connection closed; unparsed: {self.buffer!r}")
        self.buffer += chunk

    def interim_or_final(self) -> tuple[int, dict[str, str]]:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        return status, headers

    def response(self, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
        """The next final response; ``head_only``: one to HEAD (no body despite its length)."""
        status, headers = self.interim_or_final()
        length = 0 if head_only else int(headers["content-length"])
        while len(self.buffer) < length:
            self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def at_eof(self) -> bool:
        """Nothing more arrives and the server closed (within the socket's timeout)."""
        if self.buffer:
            return False
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:
            return True


def post_wire(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % (path.encode(), len(body))
        + extra
        + b"\r\n"
        + body
    )


def refusal(server: ServerProcess, wire: bytes) -> tuple[int, str]:
    """Send ``wire``: the status and error message of the refusal, which must close the
    connection."""
    with connect(server.http_url, timeout=5) as sock:
        sock.sendall(wire)
        reader = Reader(sock)
        status, headers, body = reader.response()
        assert headers.get("connection") == "close"
        assert reader.at_eof()
    return status, error_of(body)


def check_simple(body: bytes) -> None:
    outputs = {o["name"]: o["data"] for o in json.loads(body)["outputs"]}
    assert outputs["OUTPUT0"] == [i + 1 for i in range(16)]


# --- HEAD ---------------------------------------------------------------------------------------


def test_head_then_get_on_one_connection_raw(http_server: ServerProcess) -> None:
    """HEAD gets GET's headers, Content-Length included, and no body; what follows on the
    connection is intact (a HEAD of a POST-only route: a 405 without a body)."""
    with connect(http_server.http_url) as sock:
        sock.sendall(
            b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"HEAD /v2 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"HEAD /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        reader = Reader(sock)
        status, get_headers, body = reader.response()
        assert status == 200 and json.loads(body)["name"]
        status, headers, _ = reader.response(head_only=True)
        assert status == 200
        assert headers["content-length"] == get_headers["content-length"] == str(len(body))
        assert headers["content-type"] == get_headers["content-type"]
        status, headers, _ = reader.response(head_only=True)
        assert status == 405 and headers["allow"] == "POST"
        status, _, body = reader.response()
        assert (status, body) == (200, b"")
        assert reader.buffer == b""


def test_head_then_get_with_httpx(http_server: ServerProcess) -> None:
    transport = httpx.HTTPTransport(retries=0)
    limits = httpx.Limits(max_connections=1)
    with httpx.Client(
        base_url=f"http://{http_server.http_url}", transport=transport, limits=limits
    ) as client:
        for _ in range(3):
            head = client.head("/v2/models/simple")
            assert head.status_code == 200 and head.content == b""
            get = client.get("/v2/models/simple")
            assert get.status_code == 200 and get.json()["name"] == "simple"
            assert int(head.headers["content-length"]) == len(get.content)
            refused = client.head(INFER)
            assert refused.status_code == 405 and refused.headers["allow"] == "POST"
            assert client.post(INFER, content=SIMPLE).status_code == 200


async def test_head_then_get_with_aiohttp(http_server: ServerProcess) -> None:
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(f"http://{http_server.http_url}", connector=connector) as s:
        for _ in range(3):
            async with s.head("/v2/models/simple/config") as head:
                assert head.status == 200
                assert await head.read() == b""
            async with s.get("/v2/models/simple/config") as get:
                body = await get.read()
                assert get.status == 200 and json.loads(body)["name"] == "simple"
            assert int(head.headers["content-length"]) == len(body)
            async with s.head(INFER) as refused:
                assert refused.status == 405 and refused.headers["allow"] == "POST"
            async with s.post(INFER, data=SIMPLE) as answer:
                check_simple(await answer.read())


def test_head_then_get_on_the_metrics_port(http_server: ServerProcess) -> None:
    with httpx.Client(
        base_url=f"http://{http_server.metrics_url}", limits=httpx.Limits(max_connections=1)
    ) as client:
        head = client.head("/metrics")
        assert head.status_code == 200 and head.content == b""
        get = client.get("/metrics")
        assert get.status_code == 200 and b"nv_inference_count" in get.content
        assert int(head.headers["content-length"]) > 0
        missing = client.head("/nothing")
        assert missing.status_code == 404 and missing.content == b""
        refused = client.post("/metrics")
        assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
        assert client.get("/metrics").status_code == 200
    with connect(http_server.metrics_url) as sock:
        sock.sendall(
            b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /nothing HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        reader = Reader(sock)
        status, headers, _ = reader.response(head_only=True)
        assert status == 200 and int(headers["content-length"]) > 0
        status, _, body = reader.response()
        assert status == 404 and "not found" in error_of(body)


def test_405_names_the_allowed_methods(http_server: ServerProcess) -> None:
    with httpx.Client(base_url=f"http://{http_server.http_url}") as client:
        answer = client.get(INFER)
        assert answer.status_code == 405 and answer.headers["allow"] == "POST"
        assert "method GET is not allowed" in answer.json()["error"]
        assert client.post("/v2/health/live").headers["allow"] == "GET, HEAD"
        assert client.put("/v2/logging").headers["allow"] == "GET, POST, HEAD"


# --- HTTP/1.0 -----------------------------------------------------------------------------------


def test_http10_keep_alive_is_announced_and_kept(http_server: ServerProcess) -> None:
    """As ``ab -k`` asks: the answer says keep-alive, and the connection serves the next one."""
    with connect(http_server.http_url) as sock:
        reader = Reader(sock)
        for _ in range(3):
            sock.sendall(b"GET /v2/health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            status, headers, _ = reader.response()
            assert status == 200
            assert headers["connection"].lower() == "keep-alive"


def test_http10_without_keep_alive_closes_after_the_answer(http_server: ServerProcess) -> None:
    with connect(http_server.http_url) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.0\r\n\r\n")
        reader = Reader(sock)
        status, headers, _ = reader.response()
        assert status == 200 and headers["connection"] == "close"
        assert reader.at_eof()


# --- every complete request is answered, in order ---------------------------------------------


def test_valid_then_malformed_in_one_send_gets_both_answers(http_server: ServerProcess) -> None:
    with connect(http_server.http_url) as sock:
        sock.sendall(
            post_wire(INFER, SIMPLE) + b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\nNOT HTTP\r\n\r\n"
        )
        reader = Reader(sock)
        status, _, body = reader.response()
        assert status == 200
        check_simple(body)
        status, _, body = reader.response()
        assert status == 200 and json.loads(body)["name"]
        status, headers, body = reader.response()
        assert status == 400 and headers["connection"] == "close"
        assert "malformed HTTP request" in error_of(body)
        assert reader.at_eof()


def test_a_request_then_half_close_gets_its_answer(http_server: ServerProcess) -> None:
    with connect(http_server.http_url) as sock:
        sock.sendall(post_wire(INFER, SIMPLE) + post_wire(INFER, SIMPLE))
        sock.shutdown(socket.SHUT_WR)
        reader = Reader(sock)
        for _ in range(2):
            status, _, body = reader.response()
            assert status == 200
            check_simple(body)
        assert reader.at_eof()


def test_a_request_without_host_is_refused(http_server: ServerProcess) -> None:
    status, message = refusal(http_server, b"GET /v2/health/live HTTP/1.1\r\n\r\n")
    assert status == 400 and "Host" in message


# --- Expect: 100-continue -----------------------------------------------------------------------


def test_expect_100_continue(http_server: ServerProcess) -> None:
    with connect(http_server.http_url, timeout=5) as sock:
        reader = Reader(sock)
        for _ in range(2):
            head = post_wire(INFER, SIMPLE, b"Expect: 100-continue\r\n")[: -len(SIMPLE)]
            sock.sendall(head)
            assert reader.interim_or_final() == (100, {})
            sock.sendall(SIMPLE)
            status, _, body = reader.response()
            assert status == 200
            check_simple(body)


def test_expect_100_continue_beyond_the_size_limit_gets_the_final_answer(
    http_server: ServerProcess,
) -> None:
    status, message = refusal(
        http_server,
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        b"Content-Length: %d\r\n\r\n" % (2 << 20),
    )
    assert status == 400 and "exceeds the maximum allowed size" in message


def test_other_expectations_are_refused(http_server: ServerProcess) -> None:
    status, message = refusal(http_server, post_wire(INFER, SIMPLE, b"Expect: something-else\r\n"))
    assert status == 417 and "something-else" in message


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_large_body_does_not_wait_for_continue(
    http_server: ServerProcess, tmp_path: Path
) -> None:
    """curl sends Expect: 100-continue for large bodies and waits 1 s unless answered 100."""
    body = json.loads(SIMPLE)
    body["id"] = "x" * 4000  # well over curl's 1 KiB threshold
    (tmp_path / "body.json").write_text(json.dumps(body))
    command = [
        "curl",
        "-s",
        "-o",
        str(tmp_path / "out"),
        "-w",
        "%{http_code} %{time_total}",
        "-H",
        "Expect: 100-continue",  # (curl's own threshold differs between versions)
        "--data-binary",
        f"@{tmp_path / 'body.json'}",
        f"http://{http_server.http_url}{INFER}",
    ]
    for _ in range(3):
        code, seconds = subprocess.run(
            command, capture_output=True, check=True, text=True
        ).stdout.split()
        assert code == "200"
        assert float(seconds) < 0.5
        check_simple((tmp_path / "out").read_bytes())


# --- Upgrade ------------------------------------------------------------------------------------

H2C = b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAA\r\n"


def test_upgrade_h2c_is_served_as_http11(http_server: ServerProcess) -> None:
    with connect(http_server.http_url) as sock:
        sock.sendall(
            b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n"
            + H2C
            + b"\r\n"
            + post_wire(INFER, SIMPLE, H2C)
            + b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        reader = Reader(sock)
        status, headers, _ = reader.response()
        assert status == 200 and "upgrade" not in headers
        status, _, body = reader.response()
        assert status == 200
        check_simple(body)
        assert reader.response()[0] == 200


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_http2_upgrade_falls_back_to_http11(http_server: ServerProcess) -> None:
    done = subprocess.run(
        [
            "curl",
            "-s",
            "--http2",
            "-w",
            " %{http_code} %{http_version}",
            f"http://{http_server.http_url}/v2",
        ],
        capture_output=True,
        check=True,
        text=True,
    )
    body, code, version = done.stdout.rsplit(" ", 2)
    assert (code, version) == ("200", "1.1")
    assert json.loads(body)["name"]


def test_connect_is_refused(http_server: ServerProcess) -> None:
    status, message = refusal(
        http_server, b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
    )
    assert status == 501 and "CONNECT" in message


# --- header limits ------------------------------------------------------------------------------


def test_a_header_block_over_64_kib_is_refused(http_server: ServerProcess) -> None:
    big = b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (70 << 10) + b"\r\n\r\n"
    status, message = refusal(http_server, big)
    assert status == 431 and "exceed 65536 bytes" in message


def test_an_endless_header_is_refused_without_buffering_it(http_server: ServerProcess) -> None:
    """A header that never ends, in many reads: refused once past the limit."""
    with connect(http_server.http_url) as sock:
        sock.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sent = 0
        reply = b""
        sock.settimeout(0.05)
        deadline = time.monotonic() + 10
        while not reply and sent < (64 << 20) and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                sock.sendall(b"a" * 8192)
                sent += 8192
            with contextlib.suppress(TimeoutError):
                reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 431 "), (sent, reply)
        assert sent < (8 << 20)


def test_a_large_head_under_the_limit_in_pieces_is_served(http_server: ServerProcess) -> None:
    wire = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (60 << 10) + b"\r\n\r\n"
    with connect(http_server.http_url) as sock:
        for start in range(0, len(wire), 7000):
            sock.sendall(wire[start : start + 7000])
            time.sleep(0.01)
        assert Reader(sock).response()[0] == 200


def test_more_than_100_header_fields_are_refused(http_server: ServerProcess) -> None:
    fields = b"".join(b"X-F%d: v\r\n" % i for i in range(101))
    status, message = refusal(http_server, b"GET /v2 HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
    assert status == 431 and "100 fields" in message
    fields = b"".join(b"X-F%d: v\r\n" % i for i in range(98))
    with connect(http_server.http_url) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
        assert Reader(sock).response()[0] == 200


# --- idle timeout and connection cap ----------------------------------------------------------


@pytest.fixture(scope="module")
def strict_server(example_repository: Path) -> Iterator[ServerProcess]:
    args = ["--http-idle-timeout-secs", "1", "--http-max-connections", "3"]
    server = ServerProcess([example_repository], args).start()
    yield server
    server.stop()


def test_idle_connections_are_closed(strict_server: ServerProcess) -> None:
    with connect(strict_server.http_url) as sock, connect(strict_server.http_url) as silent:
        reader = Reader(sock)
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert reader.response()[0] == 200
        started = time.monotonic()
        assert reader.at_eof()  # (after about the idle timeout)
        assert Reader(silent).at_eof()  # one that never sent anything, too
        assert 0.5 < time.monotonic() - started < 8


def test_connections_beyond_the_cap_get_503(strict_server: ServerProcess) -> None:
    time.sleep(0.2)  # (the other test's connections are gone)
    sockets = [connect(strict_server.http_url) for _ in range(3)]
    try:
        for sock in sockets:
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert Reader(sock).response()[0] == 200
        with connect(strict_server.http_url) as extra:
            extra.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            reader = Reader(extra)
            status, headers, body = reader.response()
            assert status == 503 and headers["connection"] == "close"
            assert "--http-max-connections" in error_of(body)
            assert reader.at_eof()
    finally:
        sockets.pop().close()
        time.sleep(0.2)
    with connect(strict_server.http_url) as again:
        again.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert Reader(again).response()[0] == 200
    for sock in sockets:
        sock.close()


# --- backpressure -------------------------------------------------------------------------------


def test_a_client_that_pipelines_and_never_reads_stays_bounded(
    example_repository: Path,
) -> None:
    """Requests for a large answer (the model config), sent and never read for a few seconds:
    without backpressure the server would buffer every answer (hundreds of MB here)."""
    with ServerProcess([example_repository]) as server:
        process = psutil.Process(server.process.pid if server.process else 0)
        wire = b"GET /v2/models/simple/config HTTP/1.1\r\nHost: x\r\n\r\n" * 1000
        with connect(server.http_url) as warm:
            warm.sendall(wire[: len(wire) // 1000])
            assert Reader(warm).response()[0] == 200
        before = process.memory_info().rss
        sent = 0
        with connect(server.http_url) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
            sock.settimeout(0.2)
            deadline = time.monotonic() + 4
            blocked_since: float | None = None
            while sent < (48 << 20) and time.monotonic() < deadline:
                try:
                    sent += sock.send(wire)
                    blocked_since = None
                except TimeoutError:
                    blocked_since = blocked_since or time.monotonic()
                    if time.monotonic() - blocked_since > 1.5:
                        break  # the server stopped reading: what it holds stays put
            grown = process.memory_info().rss - before
        # Each ~50-byte request answers ~1 KB: answering all that was read and buffering the
        # answers grew the server by about ten times what was sent (73 MB for 7 MB).
        assert grown < 16 << 20, (sent, grown)
        assert request_ok(server)


def request_ok(server: ServerProcess) -> bool:
    with httpx.Client(base_url=f"http://{server.http_url}") as client:
        return client.get("/v2/health/live").status_code == 200


# --- in process: each request in its own Task and context -------------------------------------

current: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="unset")


async def serve(handler: object) -> tuple[asyncio.Server, int]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: HttpProtocol(handler, 1 << 20),  # type: ignore[arg-type]
        "127.0.0.1",
        0,
    )
    return server, server.sockets[0].getsockname()[1]


async def read_answers(reader: asyncio.StreamReader, count: int) -> list[bytes]:
    bodies = []
    for _ in range(count):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        bodies.append(await reader.readexactly(length))
    return bodies


async def test_each_request_runs_in_its_own_task_and_context() -> None:
    current.set("connection")  # what the listener's context holds
    tasks: list[asyncio.Task[object]] = []

    async def handler(request: HttpRequest) -> HttpResponse:
        seen = current.get()
        current.set(request.path)  # must not leak into the next request
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        async with asyncio.timeout(5):
            await asyncio.sleep(0.01)
        async with asyncio.TaskGroup() as group:
            child = group.create_task(asyncio.sleep(0, current.get()))
        return HttpResponse.json({"seen": seen, "child": child.result()})

    server, port = await serve(handler)
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(b"GET /r%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(3)))
        answers = [json.loads(b) for b in await read_answers(reader, 3)]
        writer.close()
    assert answers == [{"seen": "connection", "child": f"/r{i}"} for i in range(3)]
    assert len({id(t) for t in tasks}) == 3
    assert current.get() == "connection"


async def test_a_lost_connection_cancels_the_request_in_flight() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def handler(request: HttpRequest) -> HttpResponse:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return HttpResponse.empty()

    server, port = await serve(handler)
    async with server:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.wait_for(started.wait(), 5)
        # A reset, not a half-close (after which the answer would still be sent)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()
        await asyncio.wait_for(cancelled.wait(), 5)


async def test_a_failing_handler_gets_500_and_the_connection_goes_on() -> None:
    async def handler(request: HttpRequest) -> HttpResponse:
        if request.path == "/boom":
            raise RuntimeError("boom")
        return HttpResponse.json({"path": request.path})

    server, port = await serve(handler)
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\nGET /fine HTTP/1.1\r\nHost: x\r\n\r\n")
        first, second = await read_answers(reader, 2)
        writer.close()
    assert b"internal error: boom" in first
    assert json.loads(second) == {"path": "/fine"}


async def test_100_continue_waits_for_the_answers_before_it() -> None:
    """An interim answer belongs to its request: it follows the earlier requests' answers."""
    release = asyncio.Event()

    async def handler(request: HttpRequest) -> HttpResponse:
        if request.path == "/slow":
            await release.wait()
        return HttpResponse.json({"path": request.path, "body": request.body.decode()})

    server, port = await serve(handler)
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /next HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
        )
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 0.2)  # nothing yet: /slow is not answered
        release.set()
        (first,) = await read_answers(reader, 1)
        assert json.loads(first)["path"] == "/slow"
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"ok")
        (second,) = await read_answers(reader, 1)
        writer.close()
    assert json.loads(second) == {"path": "/next", "body": "ok"}
