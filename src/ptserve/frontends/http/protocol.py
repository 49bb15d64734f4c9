"""A small HTTP/1.1 server on asyncio and httptools: keep-alive, pipelining, one write per response.

Frameworks add per-request layers that cost more than the model call for small tensors; this
module does only what the v2 protocol needs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import cast

import httptools
import orjson

from ptserve.frontends.running import Running, start

log = logging.getLogger("ptserve.http")

_PIPELINE_LIMIT = 32
_SMALL_BODY = 1 << 16
# After refusing a request, how much more of it is read (and dropped) before closing.
_LINGER_BYTES = 256 << 20
_LINGER_SECONDS = 5.0
# How long one request may take to arrive, from its first byte to its last.
DEFAULT_READ_TIMEOUT = 60.0


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytearray = field(default_factory=bytearray)
    keep_alive: bool = True
    # The bytes it arrived in, when they were exactly this request (see Replay)
    raw: bytes | None = None


@dataclass(slots=True)
class Replay:
    """How to answer the next requests of a connection that repeat this one byte for byte but
    for their last ``varying`` bytes (an infer request's tensor data), given those bytes.

    Clients send the same request again and again with new tensor data on each connection. A
    request that arrives whole in one read and matches the connection's replay is answered
    without parsing it, routing it or decoding its JSON header: what those steps concluded for
    the earlier request holds for it too.
    """

    varying: int
    answer: Callable[[memoryview], Awaitable[HttpResponse]]


@dataclass(slots=True)
class HttpResponse:
    status: int
    body: list[bytes | memoryview] = field(default_factory=list)
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)
    replay: Replay | None = None  # how to answer the request's repetitions (see Replay)

    @classmethod
    def json(cls, value: object, status: int = 200) -> HttpResponse:
        return cls(status, [orjson.dumps(value)])

    @classmethod
    def error(cls, status: int, message: str) -> HttpResponse:
        return cls(status, [orjson.dumps({"error": message})])

    @classmethod
    def empty(cls, status: int = 200) -> HttpResponse:
        return cls(status, [], content_type="")


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


_REASONS = {status.value: status.phrase for status in HTTPStatus}


def _reason(status: int) -> str:
    return _REASONS.get(status, "Unknown")


def serialize(response: HttpResponse, keep_alive: bool) -> list[bytes | memoryview]:
    """Status line, headers and body, ready for a single write."""
    length = sum(len(part) for part in response.body)
    lines = [f"HTTP/1.1 {response.status} {_reason(response.status)}"]
    if response.content_type:
        lines.append(f"Content-Type: {response.content_type}")
    lines.append(f"Content-Length: {length}")
    for name, value in response.headers:
        lines.append(f"{name}: {value}")
    if not keep_alive:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    if length <= _SMALL_BODY:
        return [b"".join([head, *response.body])]
    return [head, *response.body]


class HttpProtocol(asyncio.Protocol):
    """One connection: parses requests in order and answers them in the same order."""

    def __init__(
        self, handler: Handler, max_body: int, read_timeout: float = DEFAULT_READ_TIMEOUT
    ) -> None:
        self.handler = handler
        self.max_body = max_body
        self.read_timeout = read_timeout
        self._read_timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.pending: collections.deque[HttpRequest] = collections.deque()
        self.worker: asyncio.Task[None] | None = None
        self.paused = False
        self.closed = False
        self.lingering = False
        self._linger_left = 0
        self._linger_timer: asyncio.TimerHandle | None = None
        self._url = bytearray()
        self._headers: dict[str, str] = {}
        self._current: HttpRequest | None = None
        self._discard = False
        self._partial = False  # a request has begun and not yet arrived whole
        self._data: bytes | None = None  # what is being parsed, when it began with a request
        # The connection's replay, the bytes a repetition starts with, and its whole size
        self._replay: Replay | None = None
        self._replay_prefix = b""
        self._replay_size = -1
        self.replaying: Running | None = None

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self.lingering = False
        self.closed = True
        self.pending.clear()
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()
        if self.replaying is not None:
            self.replaying.cancel()
            self.replaying = None

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            self._linger(len(data))
            return
        if self.closed:
            return
        if len(data) == self._replay_size and self._idle() and data.startswith(self._replay_prefix):
            self._answer_replay(data)
            return
        self._data = None if self._partial else data
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, "protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            self._fail(400, f"malformed HTTP request: {exc}")
        # A request that did not arrive whole with this data gets a deadline for the rest; one
        # that did (nearly all) never needs a timer.
        if self._partial and self._read_timer is None and self.read_timeout > 0 and not self.closed:
            loop = asyncio.get_running_loop()
            self._read_timer = loop.call_later(self.read_timeout, self._read_timed_out)

    # --- httptools callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = bytearray()
        self._headers = {}
        self._current = None
        self._discard = False
        self._partial = True

    def _read_timed_out(self) -> None:
        """A request that started but did not arrive whole in time (a slow or stalled client)."""
        self._read_timer = None
        self._fail(
            408,
            f"the request was not received completely within {self.read_timeout:g} s "
            "(--http-read-timeout-secs)",
        )

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = self._headers.get(key)
        self._headers[key] = text if previous is None else f"{previous}, {text}"

    def on_headers_complete(self) -> None:
        parsed = httptools.parse_url(bytes(self._url))
        path = parsed.path.decode("latin-1") if parsed.path else "/"
        query = parsed.query.decode("latin-1") if parsed.query else ""
        method = self.parser.get_method().decode("latin-1")
        request = HttpRequest(
            method, path, query, self._headers, keep_alive=self.parser.should_keep_alive()
        )
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            self._fail(
                400,
                f"request body of {length} bytes exceeds the maximum allowed size of "
                f"{self.max_body} bytes (--http-max-input-size)",
            )
            self._discard = True
            return
        self._current = request

    def on_body(self, body: bytes) -> None:
        request = self._current
        if request is None or self._discard:
            return
        request.body += body
        if len(request.body) > self.max_body:
            self._discard = True
            self._fail(
                400,
                f"request body exceeds the maximum allowed size of {self.max_body} bytes "
                "(--http-max-input-size)",
            )

    def on_message_complete(self) -> None:
        self._partial = False
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        request = self._current
        self._current = None
        if request is None or self._discard or self.closed:
            return
        data, self._data = self._data, None
        if data is not None and request.keep_alive:
            # The data held this request and nothing else when its head and body make it up
            # (no chunked framing, nothing before or after it).
            head = data.find(b"\r\n\r\n") + 4
            if head > 3 and head + len(request.body) == len(data):
                request.raw = data
        self.pending.append(request)
        if len(self.pending) >= _PIPELINE_LIMIT and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True
        if (self.worker is None or self.worker.done()) and self.replaying is None:
            self.worker = asyncio.get_running_loop().create_task(self._serve())

    # --- answering -------------------------------------------------------------------------

    async def _serve(self) -> None:
        while self.pending and not self.closed:
            request = self.pending.popleft()
            if self.paused and len(self.pending) < _PIPELINE_LIMIT // 2:
                assert self.transport is not None
                self.transport.resume_reading()
                self.paused = False
            try:
                response = await self.handler(request)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("unhandled error answering %s %s", request.method, request.path)
                response = HttpResponse.error(500, f"internal error: {exc}")
            self._write(response, request.keep_alive)
            if not request.keep_alive:
                self._close()
                return
            self._remember(request, response.replay)

    # --- repeated requests (see Replay) ------------------------------------------------------

    def _idle(self) -> bool:
        """Nothing is being parsed, queued or answered on the connection."""
        return (
            not self._partial
            and not self.pending
            and self.replaying is None
            and (self.worker is None or self.worker.done())
        )

    def _remember(self, request: HttpRequest, replay: Replay | None) -> None:
        if replay is None or request.raw is None or not 0 < replay.varying <= len(request.body):
            return
        self._replay = replay
        self._replay_size = len(request.raw)
        self._replay_prefix = request.raw[: len(request.raw) - replay.varying]

    def _answer_replay(self, data: bytes) -> None:
        replay = self._replay
        assert replay is not None
        varying = memoryview(data)[len(data) - replay.varying :]
        self.replaying = start(self._serve_replay(replay, varying))

    async def _serve_replay(self, replay: Replay, varying: memoryview) -> None:
        try:
            response = await replay.answer(varying)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("unhandled error answering a repeated request")
            response = HttpResponse.error(500, f"internal error: {exc}")
        self.replaying = None
        self._write(response, True)
        if self.pending and not self.closed:  # what arrived meanwhile, in order
            self.worker = asyncio.get_running_loop().create_task(self._serve())

    def _write(self, response: HttpResponse, keep_alive: bool) -> None:
        if self.transport is None or self.closed:
            return
        parts = serialize(response, keep_alive)
        if len(parts) == 1:
            self.transport.write(parts[0])
        else:
            self.transport.writelines(parts)

    def _fail(self, status: int, message: str) -> None:
        """Answer a request that cannot be parsed or accepted, then close the connection.

        The rest of what the client is still sending is read and dropped for a while before
        closing: closing with unread data makes the kernel reset the connection, and the client
        would lose the answer.
        """
        if self.closed:
            return
        self._write(HttpResponse.error(status, message), keep_alive=False)
        self.closed = True
        self.pending.clear()
        self.lingering = True
        self._linger_left = _LINGER_BYTES
        loop = asyncio.get_running_loop()
        self._linger_timer = loop.call_later(_LINGER_SECONDS, self._close)

    def _linger(self, size: int) -> None:
        self._linger_left -= size
        if self._linger_left < 0:
            self._close()

    def _close(self) -> None:
        self.lingering = False
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self.closed = True
        self.pending.clear()
        if self.transport is not None:
            self.transport.close()
