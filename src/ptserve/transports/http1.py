"""A small HTTP/1.1 server on asyncio and httptools: keep-alive, pipelining, one write per response.

Frameworks add per-request layers that cost more than the model call for small tensors; this
module does only what the v2 protocol needs, and guards against peers that misbehave: bounded
request heads, bodies and pipelines, write backpressure, deadlines for slow and idle
connections, and a cap on open connections.

Each request is answered by ``handler`` running in a Task of its own, in a copy of the context
the connection was opened in; the requests of a connection are answered one at a time, in the
order they arrived.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import cast

import httptools
import orjson

from ptserve.common import logging_setup

log = logging_setup.module_logger("ptserve.http", __file__)

# Parsed requests waiting for their answer, and their bodies' bytes: reading pauses beyond these.
_PIPELINE_LIMIT = 32
_PIPELINE_BYTES = 1 << 20
_SMALL_BODY = 1 << 16
# After refusing a request, how much more of it is read (and dropped) before closing.
_LINGER_BYTES = 256 << 20
_LINGER_SECONDS = 5.0
# How long one request may take to arrive, from its first byte to its last.
DEFAULT_READ_TIMEOUT = 60.0
# How long a connection may stay open between requests. Longer than the 60 s after which common
# load balancers drop idle connections themselves, so that they, not the server, close them:
# a server closing first races a request the balancer is sending on that connection.
DEFAULT_IDLE_TIMEOUT = 75.0
# The request line and headers together, and the number of header fields.
DEFAULT_MAX_HEADER_BYTES = 64 << 10
DEFAULT_MAX_HEADER_FIELDS = 100
# Open connections per listener; beyond it a connection gets a 503 and is closed.
DEFAULT_MAX_CONNECTIONS = 1024


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytearray = field(default_factory=bytearray)
    keep_alive: bool = True
    http10: bool = False  # an HTTP/1.0 request (keep-alive is then announced in the answer)

    def __init__(
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        body: bytearray | None = None,
        keep_alive: bool = True,
        http10: bool = False,
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = bytearray() if body is None else body
        self.keep_alive = keep_alive
        self.http10 = http10


@dataclass(slots=True)
class HttpResponse:
    status: int
    body: list[bytes | memoryview] = field(default_factory=list)
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)

    def __init__(
        self,
        status: int,
        body: list[bytes | memoryview] | None = None,
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        self.status = status
        self.body = [] if body is None else body
        self.content_type = content_type
        self.headers = [] if headers is None else headers

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


@dataclass(slots=True)
class Connections:
    """The open connections of one listener, and how many it accepts."""

    limit: int = DEFAULT_MAX_CONNECTIONS  # 0: no limit
    open: int = 0


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one connection accepts; a timeout of 0 disables it."""

    read_timeout: float = DEFAULT_READ_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_header_fields: int = DEFAULT_MAX_HEADER_FIELDS


_STATUS_LINES: dict[int, bytes] = {
    status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode("latin-1")
    for status in HTTPStatus
}
_CONTENT_TYPES: dict[str, bytes] = {}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else f"HTTP/1.1 {status} Unknown\r\n".encode("latin-1")


def _content_type(value: str) -> bytes:
    line = _CONTENT_TYPES.get(value)
    if line is None:
        line = f"Content-Type: {value}\r\n".encode("latin-1")
        if len(_CONTENT_TYPES) < 64:
            _CONTENT_TYPES[value] = line
    return line


def serialize(
    response: HttpResponse, keep_alive: bool, head_only: bool = False, http10: bool = False
) -> list[bytes | memoryview]:
    """Status line, headers and body, ready for a single write.

    ``head_only`` (a HEAD request) leaves the body out but keeps its Content-Length; ``http10``
    announces keep-alive, which HTTP/1.0 clients only assume when told.
    """
    body = response.body
    length = 0
    for part in body:
        length += len(part)
    parts: list[bytes | memoryview] = [_status_line(response.status)]
    if response.content_type:
        parts.append(_content_type(response.content_type))
    parts.append(b"Content-Length: %d\r\n" % length)
    for name, value in response.headers:
        parts.append(f"{name}: {value}\r\n".encode("latin-1"))
    if not keep_alive:
        parts.append(b"Connection: close\r\n\r\n")
    elif http10:
        parts.append(b"Connection: keep-alive\r\n\r\n")
    else:
        parts.append(b"\r\n")
    if head_only or not length:
        return [b"".join(parts)]
    if length <= _SMALL_BODY:
        parts += body
        return [b"".join(parts)]
    return [b"".join(parts), *body]


_METHODS = {
    m.encode(): m for m in ("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT")
}
# Header names as received, lower-cased (a few distinct ones recur on every request).
_NAMES: dict[bytes, str] = {}


def _header_name(name: bytes) -> str:
    key = name.decode("latin-1").lower()
    if len(_NAMES) < 512:
        _NAMES[name] = key
    return key


class _Refused(Exception):
    """Stops the parser after a request was refused (its answer is queued already)."""


class HttpProtocol(asyncio.Protocol):
    """One connection: parses requests in order and answers them in the same order."""

    def __init__(
        self,
        handler: Handler,
        max_body: int,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        limits: HttpLimits | None = None,
        connections: Connections | None = None,
    ) -> None:
        self.handler = handler
        self.max_body = max_body
        limits = limits or HttpLimits(read_timeout=read_timeout)
        self.read_timeout = limits.read_timeout
        self.idle_timeout = limits.idle_timeout
        self.max_header_bytes = limits.max_header_bytes
        self.max_header_fields = limits.max_header_fields
        self.connections = connections
        self._counted = False
        self.transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context = contextvars.Context()
        self._tls = False
        self.parser = httptools.HttpRequestParser(self)
        # Complete requests not yet answered, their bodies' bytes, and the one being answered
        self.pending: collections.deque[HttpRequest] = collections.deque()
        self._pending_bytes = 0
        self.task: asyncio.Task[None] | None = None
        self._reading_paused = False
        self._writing_paused = False
        # No more requests are taken (end of input, a refused request, or Connection: close);
        # the queued ones are answered, then ``_error`` if set, then the connection closes.
        self.done_reading = False
        self._eof = False
        self._error: HttpResponse | None = None
        self._error_head_only = False  # it refuses a HEAD request
        self.closed = False
        self.lingering = False
        self._linger_left = 0
        # The request being parsed
        self._url = b""
        self._headers: dict[str, str] = {}
        self._current: HttpRequest | None = None
        self._partial = False  # a request has begun and not yet arrived whole
        self._in_head = False  # ... and its head is not complete
        # Its head is counted (``_head_size``: its request line and header fields so far) only
        # where it could exceed the limit: when it arrives in several reads or in a large one.
        self._count_head = False
        self._head_size = 0
        self._head_bytes = 0  # bytes of the data after the read it began in, while in its head
        self._head_tail = b""  # the last bytes of the previous read, while in its head
        self._repeated = 0  # header fields that repeated an earlier name
        self._continue = False  # it expects 100 Continue
        self._upgrade = False  # it asks for another protocol (served as HTTP/1.1)
        # Timers
        self._read_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        self._linger_timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._loop = loop = asyncio.get_running_loop()
        self._context = contextvars.copy_context()
        self._tls = transport.get_extra_info("sslcontext") is not None
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connections = self.connections
        if connections is not None:
            connections.open += 1
            self._counted = True
            if 0 < connections.limit < connections.open:
                self._fail(
                    503,
                    f"the server has {connections.limit} connections open, its limit "
                    "(--http-max-connections); try again later",
                )
                return
        if self.idle_timeout > 0:
            self._idle_since = loop.time()
            self._idle_timer = loop.call_later(self.idle_timeout, self._idle_check)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.done_reading = True
        self.lingering = False
        for timer in (self._read_timer, self._idle_timer, self._linger_timer):
            if timer is not None:
                timer.cancel()
        self._read_timer = self._idle_timer = self._linger_timer = None
        self.pending.clear()
        if self.task is not None:
            self.task.cancel()
            self.task = None
        if self._counted and self.connections is not None:
            self.connections.open -= 1
            self._counted = False

    def eof_received(self) -> bool | None:
        """The client sent all it will send: answer what arrived whole, then close."""
        self._eof = True
        if self.closed:
            return None
        if self.lingering and self._error is None:  # refused, answered: the client is gone
            self._close()
            return None
        self._stop_reading()
        self._next()
        # Keep the connection half-open for the answers still to come (TLS cannot).
        return None if self.closed or self._tls else True

    def data_received(self, data: bytes) -> None:
        if self.done_reading:
            if self.lingering:
                self._linger(len(data))
            return
        if self._in_head:
            # A head continues from an earlier read (httptools buffers a header until it ends)
            size = self._head_bytes + len(data)
            if size > self.max_header_bytes:
                end = (self._head_tail + data).find(b"\r\n\r\n")
                if end < 0 or self._head_bytes + end + 4 - len(self._head_tail) > (
                    self.max_header_bytes
                ):
                    self._fail(431, self._head_too_large())
                    return
            self._head_bytes = size
        else:
            self._count_head = len(data) > self.max_header_bytes
        self._feed(data)
        if self._partial and not self.done_reading:
            if self._in_head:
                self._head_tail = data[-3:]
                if not self._count_head:  # (it continues in the next read: count from here)
                    self._count_head = True
                    self._head_size = len(self._url) + sum(
                        len(k) + len(v) + 4 for k, v in self._headers.items()
                    )
            elif self._continue and self.task is None and not self.pending:
                self._continue = False  # (else it is sent when the earlier answers are out)
                if self.transport is not None:
                    self.transport.write(_CONTINUE)
            # A request that did not arrive whole with this data gets a deadline for the rest;
            # one that did (nearly all) never needs a timer.
            if self._read_timer is None and self.read_timeout > 0:
                assert self._loop is not None
                self._read_timer = self._loop.call_later(self.read_timeout, self._read_timed_out)

    def pause_writing(self) -> None:
        """The client reads slower than it is answered: answer and read no more for now."""
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._next()
        self._update_reading()

    # --- parsing ---------------------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._upgraded(data, int(upgrade.args[0]))
        except httptools.HttpParserError as malformed:
            if not self.done_reading:  # (else a callback refused the request: _Refused)
                self._fail(400, f"malformed HTTP request: {malformed}")

    def _upgraded(self, data: bytes, offset: int) -> None:
        """The parser stopped after the head of a request asking for another protocol (its body
        unread). The request is served as if it had not asked: parsed again without the
        headers that ask, followed by the rest of the data."""
        if not self._upgrade or self.done_reading:
            return
        self._upgrade = False
        headers = dict(self._headers)
        headers.pop("upgrade", None)
        connection = headers.pop("connection", None)
        if connection is not None:
            tokens = [t.strip() for t in connection.split(",")]
            kept = [t for t in tokens if t and t.lower() not in ("upgrade", "http2-settings")]
            if kept:
                headers["connection"] = ", ".join(kept)
        version = self.parser.get_http_version()
        method = self.parser.get_method()
        head = bytearray(method + b" " + self._url + b" HTTP/" + version.encode() + b"\r\n")
        for name, value in headers.items():
            head += f"{name}: {value}\r\n".encode("latin-1")
        head += b"\r\n"
        self.parser = httptools.HttpRequestParser(self)
        self._feed(bytes(head) + data[offset:])

    def _refuse(self, status: int, message: str) -> None:
        self._error_head_only = self.parser.get_method() == b"HEAD"
        self._fail(status, message)
        raise _Refused(message)

    def _head_too_large(self) -> str:
        return (
            f"the request line and headers exceed {self.max_header_bytes} bytes "
            f"or {self.max_header_fields} fields"
        )

    # --- httptools callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._partial = self._in_head = True
        self._head_size = self._head_bytes = self._repeated = 0

    def on_url(self, url: bytes) -> None:
        self._url += url  # (nearly always in one piece: then this is ``url`` itself)
        if self._count_head:
            self._head_size += len(url)
            if self._head_size > self.max_header_bytes:
                self._refuse(431, self._head_too_large())

    def on_header(self, name: bytes, value: bytes) -> None:
        headers = self._headers
        if self._count_head:
            self._head_size += len(name) + len(value) + 4
            if (
                self._head_size > self.max_header_bytes
                or len(headers) + self._repeated >= self.max_header_fields
            ):
                self._refuse(431, self._head_too_large())
        key = _NAMES.get(name)
        if key is None:
            key = _header_name(name)
        if key in headers:
            self._repeated += 1
            if len(headers) + self._repeated > self.max_header_fields:
                self._refuse(431, self._head_too_large())
            headers[key] = f"{headers[key]}, {value.decode('latin-1')}"
        else:
            headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_tail = b""
        parser = self.parser
        raw_method = parser.get_method()
        method = _METHODS.get(raw_method) or raw_method.decode("latin-1")
        headers = self._headers
        if len(headers) + self._repeated > self.max_header_fields:
            self._refuse(431, self._head_too_large())
        if ("upgrade" in headers or method == "CONNECT") and parser.should_upgrade():
            if method == "CONNECT":
                self._refuse(501, "CONNECT is not supported")
            self._upgrade = True  # (see _upgraded)
            return
        # The version matters without Host, for Expect, and to announce keep-alive (which an
        # HTTP/1.0 request asks for with Connection): it is looked up only then.
        http10 = (
            "host" not in headers or "connection" in headers or "expect" in headers
        ) and parser.get_http_version() == "1.0"
        if not http10 and "host" not in headers:
            self._refuse(400, "an HTTP/1.1 request must have a Host header")
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            self._refuse(
                400,
                f"request body of {length} bytes exceeds the maximum allowed size of "
                f"{self.max_body} bytes (--http-max-input-size)",
            )
        expect = headers.get("expect")
        if expect is not None and not http10:  # (HTTP/1.0 peers cannot expect anything)
            if expect.strip().lower() != "100-continue":
                self._refuse(417, f"unsupported expectation: Expect: {expect}")
            self._continue = True
        url = self._url
        if url[:1] == b"/" and b"?" not in url and b"#" not in url:
            path, query = url.decode("latin-1"), ""
        else:
            parsed = httptools.parse_url(url)
            path = parsed.path.decode("latin-1") if parsed.path else "/"
            query = parsed.query.decode("latin-1") if parsed.query else ""
        self._current = HttpRequest(
            method, path, query, headers, bytearray(), parser.should_keep_alive(), http10
        )

    def on_body(self, body: bytes) -> None:
        request = self._current
        if request is None:
            return
        self._continue = False  # (the client did not wait for it)
        request.body += body
        if len(request.body) > self.max_body:
            self._refuse(
                400,
                f"request body exceeds the maximum allowed size of {self.max_body} bytes "
                "(--http-max-input-size)",
            )

    def on_message_complete(self) -> None:
        self._partial = self._continue = False
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        request = self._current
        if request is None or self.done_reading:
            return
        self._current = None
        if not request.keep_alive:
            self._stop_reading()
        if self.task is None and not self.pending and not self._writing_paused:
            self._start(request)  # (nearly always: nothing to wait for)
            return
        self.pending.append(request)
        self._pending_bytes += len(request.body)
        if self.task is None:
            self._next()
        elif len(self.pending) >= _PIPELINE_LIMIT or self._pending_bytes >= _PIPELINE_BYTES:
            self._update_reading()

    def _read_timed_out(self) -> None:
        """A request that started but did not arrive whole in time (a slow or stalled client)."""
        self._read_timer = None
        self._fail(
            408,
            f"the request was not received completely within {self.read_timeout:g} s "
            "(--http-read-timeout-secs)",
        )

    # --- answering -------------------------------------------------------------------------

    def _next(self) -> None:
        """Start answering the next request; close when all are answered and no more come."""
        if self.task is not None or self._writing_paused or self.closed:
            return
        pending = self.pending
        if pending:
            request = pending.popleft()
            self._pending_bytes -= len(request.body)
            if self._reading_paused:
                self._update_reading()
            self._start(request)
        elif self.done_reading:
            self._finish()
        elif not self._partial:
            if self._loop is not None:
                self._idle_since = self._loop.time()
        elif self._continue and not self._in_head:  # (owed while earlier answers were due)
            self._continue = False
            if self.transport is not None:
                self.transport.write(_CONTINUE)

    def _start(self, request: HttpRequest) -> None:
        """Answer ``request`` in a Task of its own, in a copy of the connection's context."""
        assert self._loop is not None
        # A Task made directly, named: the loop's create_task formats a "Task-<n>" name first.
        self.task = asyncio.Task(
            self._answer(request),
            loop=self._loop,
            name="http-request",
            context=self._context.copy(),
        )

    async def _answer(self, request: HttpRequest) -> None:
        try:
            response = await self.handler(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("unhandled error answering %s %s", request.method, request.path)
            response = HttpResponse.error(500, f"internal error: {exc}")
        self.task = None
        transport = self.transport
        if transport is not None and not self.closed:
            last = self.done_reading and not self.pending and self._error is None
            keep_alive = request.keep_alive and not last
            parts = serialize(response, keep_alive, request.method == "HEAD", request.http10)
            if len(parts) == 1:
                transport.write(parts[0])
            else:
                transport.writelines(parts)
        self._next()

    def _finish(self) -> None:
        """Everything is answered and no request will follow: close, after the refusal if any."""
        error, self._error = self._error, None
        transport = self.transport
        if error is None or transport is None:
            self._close()
            return
        parts = serialize(error, False, self._error_head_only)
        transport.writelines(parts)
        if self._eof:
            self._close()
            return
        # Closing with unread data makes the kernel reset the connection, and the client would
        # lose the answer: the rest of what it sends is read and dropped for a while first.
        if not self._tls and transport.can_write_eof():
            transport.write_eof()
        self.lingering = True
        self._linger_left = _LINGER_BYTES
        self._update_reading()
        assert self._loop is not None
        self._linger_timer = self._loop.call_later(_LINGER_SECONDS, self._close)

    def _fail(self, status: int, message: str) -> None:
        """Refuse the request being received: the earlier ones are answered, then this one with
        ``status``, then the connection closes."""
        if self.done_reading:
            return
        self._error = HttpResponse.error(status, message)
        self._stop_reading()
        self._next()

    def _stop_reading(self) -> None:
        self.done_reading = True
        self._partial = self._in_head = self._continue = False
        self._current = None
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _update_reading(self) -> None:
        """Read while the answers keep up: pause while the client does not read them, or while
        too many requests wait for theirs."""
        transport = self.transport
        if transport is None or self.closed or self._eof:
            return
        # Pausing takes the high marks, resuming the low ones (half as many).
        scale = 2 if self._reading_paused else 1
        pause = not self.lingering and (
            self._writing_paused
            or len(self.pending) * scale >= _PIPELINE_LIMIT
            or self._pending_bytes * scale >= _PIPELINE_BYTES
        )
        if pause != self._reading_paused:
            self._reading_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _idle_check(self) -> None:
        """Close a connection that stayed idle between requests for ``idle_timeout``."""
        self._idle_timer = None
        if self.closed:
            return
        assert self._loop is not None
        now = self._loop.time()
        busy = self._partial or self.pending or self.task is not None or self.done_reading
        if not busy and now - self._idle_since >= self.idle_timeout:
            self._close()
            return
        wait = self.idle_timeout if busy else self._idle_since + self.idle_timeout - now
        self._idle_timer = self._loop.call_later(wait, self._idle_check)

    def _linger(self, size: int) -> None:
        self._linger_left -= size
        if self._linger_left < 0:
            self._close()

    def _close(self) -> None:
        self.lingering = False
        self.done_reading = True
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self.closed = True
        self.pending.clear()
        if self.transport is not None:
            self.transport.close()
