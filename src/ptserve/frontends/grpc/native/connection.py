"""One HTTP/2 connection carrying gRPC calls, on the event loop.

Frames are read and answered in the same pass: a call whose method finishes without waiting is
answered before the next read, and everything written during one pass (or one loop iteration)
goes out in one write. Flow control is honoured both ways: outgoing DATA waits for the peer's
windows; incoming windows are reopened as data is consumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, cast

import grpc

from ptserve.frontends.grpc.native import calls, frames, headers
from ptserve.frontends.grpc.native.calls import CallFailed, Context, Requests
from ptserve.frontends.grpc.native.frames import ConnectionError_
from ptserve.frontends.running import Running, start

log = logging.getLogger("ptserve.grpc")

# What we advertise: streams may carry 8 MiB before a WINDOW_UPDATE, the connection 64 MiB.
STREAM_WINDOW = 8 * 2**20
CONNECTION_WINDOW = 64 * 2**20
MAX_HEADER_LIST = 64 * 1024
MAX_HEADER_BLOCK = 1024 * 1024
LINGER_SECONDS = 1.0  # after GOAWAY and the last answer, how long to wait for the peer to close
OUR_SETTINGS = {
    frames.ENABLE_PUSH: 0,
    frames.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
    frames.MAX_FRAME_SIZE: frames.LARGEST_FRAME,
    frames.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST,
}


class Stream:
    """One call's stream: what arrived, what waits for the peer's window, how it ends."""

    __slots__ = (
        "buffer",
        "context",
        "deadline",
        "ended",
        "handler",
        "head",
        "id",
        "message",
        "opened",
        "pending",
        "requests",
        "task",
        "trailers",
        "unacked",
        "window",
    )

    def __init__(self, stream_id: int, head: headers.RequestHead, handler: Any, window: int):
        self.id = stream_id
        self.head = head
        self.handler = handler
        self.window = window  # what we may still send
        self.buffer = bytearray()  # received bytes not yet a whole message
        self.message: bytes | None = None  # a unary call's request message, once whole
        self.requests: Requests | None = None
        self.context: Context | None = None
        self.ended = False  # the peer sent END_STREAM
        self.opened = False  # our response headers went out
        self.pending: deque[memoryview] = deque()
        self.trailers: bytes | None = None  # our trailers, waiting behind pending data
        self.task: Running | None = None
        self.deadline: asyncio.TimerHandle | None = None
        self.unacked = 0  # received bytes not yet given back with WINDOW_UPDATE


class Connection(asyncio.Protocol):
    def __init__(
        self,
        methods: Mapping[str, Any],
        max_message: int,
        on_close: Callable[[Connection], None],
    ) -> None:
        self._methods = methods
        self._max_message = max_message
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._peer = ""
        self._buffer = bytearray()
        self._preface = False
        self._decoder = headers.HeaderDecoder(MAX_HEADER_LIST)
        self._streams: dict[int, Stream] = {}
        self._blocked: dict[int, Stream] = {}  # streams waiting for the connection window
        self._last_stream = 0
        self._continuing: tuple[int, int, bytearray] | None = None  # stream, flags, block
        self._out: list[bytes | memoryview] = []
        self._flush_handle: asyncio.Handle | None = None
        self._reading = False
        self._send_window = frames.DEFAULT_WINDOW
        self._peer_window = frames.DEFAULT_WINDOW  # the peer's initial stream window
        self._peer_frame = frames.DEFAULT_MAX_FRAME
        self._unacked = 0
        self._going_away = False
        self._closed = False
        self._winding_down = False
        self.closed = asyncio.Event()

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        peer = self._transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            family = "ipv6" if ":" in peer[0] else "ipv4"
            host = f"[{peer[0]}]" if family == "ipv6" else peer[0]
            self._peer = f"{family}:{host}:{peer[1]}"
        self._emit(frames.settings(OUR_SETTINGS))
        self._emit(frames.window_update(0, CONNECTION_WINDOW - frames.DEFAULT_WINDOW))
        self._flush()

    def data_received(self, data: bytes) -> None:
        self._reading = True
        try:
            self._receive(data)
        except ConnectionError_ as exc:
            self._fail(exc.code, exc.message)
        except Exception as exc:  # a bug of ours: this connection ends, the server goes on
            log.exception("gRPC connection from %s failed", self._peer or "?")
            self._fail(frames.INTERNAL_ERROR, f"internal error: {exc!r}")
        finally:
            self._reading = False
            self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        for stream in list(self._streams.values()):
            self._drop(stream)
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        self.closed.set()
        self._on_close(self)

    # --- shutting down ------------------------------------------------------------------

    def go_away(self) -> None:
        """Refuse new calls (GOAWAY); the ones in progress go on."""
        if self._closed or self._going_away:
            return
        self._going_away = True
        self._emit(frames.goaway(self._last_stream, frames.NO_ERROR))
        self._flush()
        self._wind_down_if_done()

    def abort(self) -> None:
        """End every call now and close."""
        for stream in list(self._streams.values()):
            self._drop(stream)
        if self._transport is not None and not self._closed:
            self._flush()
            self._transport.close()

    def _wind_down_if_done(self) -> None:
        """Called whenever a call ends or GOAWAY goes either way."""
        if self._going_away and not self._streams:
            self._wind_down()

    def _wind_down(self) -> None:
        """After GOAWAY, with no call left: stop writing, but keep reading until the peer
        closes (or for LINGER_SECONDS). Closing at once could reset the connection while the
        peer still has our last answers to read."""
        if self._winding_down or self._closed or self._transport is None:
            return
        self._flush()
        self._winding_down = True
        if self._transport.can_write_eof():
            self._transport.write_eof()
        self._loop.call_later(LINGER_SECONDS, self.abort)

    # --- reading ------------------------------------------------------------------------

    def _receive(self, data: bytes) -> None:
        """Frames out of what arrived; a partial frame waits in the buffer for the rest. (When
        nothing waits, frames are cut straight from ``data``: one copy each, not three.)"""
        buffer = self._buffer
        if buffer or not self._preface:
            buffer += data
            view: bytes | bytearray = buffer
        else:
            view = data
        offset = 0
        if not self._preface:
            if len(buffer) < len(frames.PREFACE):
                if not frames.PREFACE.startswith(bytes(buffer)):
                    raise ConnectionError_(frames.PROTOCOL_ERROR, "not an HTTP/2 connection")
                return
            if not buffer.startswith(frames.PREFACE):
                raise ConnectionError_(frames.PROTOCOL_ERROR, "not an HTTP/2 connection")
            self._preface = True
            offset = len(frames.PREFACE)
        size = len(view)
        while size - offset >= frames.HEADER_BYTES and not self._closed:
            length, kind, flags, stream_id = frames.parse_header(view, offset)
            if length > frames.LARGEST_FRAME:
                raise ConnectionError_(frames.FRAME_SIZE_ERROR, "frame too large")
            end = offset + frames.HEADER_BYTES + length
            if end > size:
                break
            start = offset + frames.HEADER_BYTES
            payload = view[start:end] if view is data else bytes(memoryview(buffer)[start:end])
            offset = end
            self._frame(kind, flags, stream_id, bytes(payload))
        if view is buffer:
            del buffer[:offset]
        elif offset < size:
            buffer += data[offset:]

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continuing is not None and kind != frames.CONTINUATION:
            raise ConnectionError_(frames.PROTOCOL_ERROR, "expected CONTINUATION")
        if kind == frames.DATA:
            self._on_data(flags, stream_id, payload)
        elif kind == frames.HEADERS:
            self._on_headers(flags, stream_id, payload)
        elif kind == frames.CONTINUATION:
            self._on_continuation(flags, stream_id, payload)
        elif kind == frames.SETTINGS:
            self._on_settings(flags, stream_id, payload)
        elif kind == frames.WINDOW_UPDATE:
            self._on_window_update(stream_id, payload)
        elif kind == frames.PING:
            if len(payload) != 8 or stream_id:
                raise ConnectionError_(frames.FRAME_SIZE_ERROR, "bad PING")
            if not flags & frames.ACK:
                self._emit(frames.frame(frames.PING, frames.ACK, 0, payload))
        elif kind == frames.RST_STREAM:
            stream = self._streams.get(stream_id)
            if stream is not None:
                self._drop(stream)
        elif kind == frames.GOAWAY:
            self._going_away = True
            self._wind_down_if_done()
        elif kind == frames.PUSH_PROMISE:
            raise ConnectionError_(frames.PROTOCOL_ERROR, "clients cannot push")
        # PRIORITY and unknown frame types are ignored.

    def _on_settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise ConnectionError_(frames.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & frames.ACK:
            return
        for key, value in frames.parse_settings(payload):
            if key == frames.INITIAL_WINDOW_SIZE:
                if value > frames.LARGEST_WINDOW:
                    raise ConnectionError_(frames.FLOW_CONTROL_ERROR, "window too large")
                delta, self._peer_window = value - self._peer_window, value
                for stream in self._streams.values():
                    stream.window += delta
            elif key == frames.MAX_FRAME_SIZE:
                if not frames.DEFAULT_MAX_FRAME <= value <= frames.LARGEST_FRAME:
                    raise ConnectionError_(frames.PROTOCOL_ERROR, "bad MAX_FRAME_SIZE")
                self._peer_frame = value
        self._emit(frames.frame(frames.SETTINGS, frames.ACK, 0))
        for stream in list(self._streams.values()):
            self._drain(stream)

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionError_(frames.FRAME_SIZE_ERROR, "bad WINDOW_UPDATE")
        increment = frames.parse_u32(payload) & 0x7FFF_FFFF
        if stream_id == 0:
            if increment == 0:
                raise ConnectionError_(frames.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self._send_window += increment
            blocked, self._blocked = self._blocked, {}
            for waiting in blocked.values():
                self._drain(waiting)
            return
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream.window += increment
            self._drain(stream)

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ConnectionError_(frames.PROTOCOL_ERROR, "HEADERS on stream 0")
        block = frames.strip_padding(payload, flags)
        if flags & frames.PRIORITY_FLAG:
            block = block[5:]
        if flags & frames.END_HEADERS:
            self._on_header_block(stream_id, flags, block)
        else:
            self._continuing = (stream_id, flags, bytearray(block))

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continuing is None or self._continuing[0] != stream_id:
            raise ConnectionError_(frames.PROTOCOL_ERROR, "unexpected CONTINUATION")
        _, first_flags, block = self._continuing
        block += payload
        if len(block) > MAX_HEADER_BLOCK:
            raise ConnectionError_(frames.ENHANCE_YOUR_CALM, "header block too large")
        if flags & frames.END_HEADERS:
            self._continuing = None
            self._on_header_block(stream_id, first_flags, bytes(block))

    def _on_header_block(self, stream_id: int, flags: int, block: bytes) -> None:
        stream = self._streams.get(stream_id)
        if stream is not None or stream_id <= self._last_stream:
            with contextlib.suppress(ValueError):  # trailers, or late headers: read only so
                self._decoder.decode(block)  # that the table follows the peer's
            if stream is not None and flags & frames.END_STREAM:
                self._on_end(stream)
            return
        if not stream_id & 1:
            raise ConnectionError_(frames.PROTOCOL_ERROR, "clients open odd-numbered streams")
        self._last_stream = stream_id
        try:
            head = self._decoder.decode(block)
        except ValueError as exc:
            self._refuse(stream_id, grpc.StatusCode.INTERNAL, str(exc))
            return
        if self._going_away:
            self._emit(frames.rst_stream(stream_id, frames.REFUSED_STREAM))
            return
        if head.method != "POST":
            self._reply_status(stream_id, 405)
            return
        if not head.content_type.startswith("application/grpc"):
            self._reply_status(stream_id, 415)
            return
        handler = self._methods.get(head.path)
        if handler is None:
            self._refuse(stream_id, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return
        stream = Stream(stream_id, head, handler, self._peer_window)
        self._streams[stream_id] = stream
        deadline = None
        if head.timeout is not None:
            deadline = self._loop.time() + head.timeout
            stream.deadline = self._loop.call_at(deadline, self._expire, stream)
        stream.context = Context(head, self._peer, deadline)
        if handler.stream_stream is not None:
            stream.requests = Requests(
                handler.request_deserializer, lambda: self._give_window(stream)
            )
            stream.task = start(
                calls.run_stream(self, stream_id, handler, stream.context, stream.requests)
            )
        if flags & frames.END_STREAM:
            self._on_end(stream)

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ConnectionError_(frames.PROTOCOL_ERROR, "DATA on stream 0")
        self._unacked += len(payload)
        if self._unacked >= CONNECTION_WINDOW // 2:
            self._emit(frames.window_update(0, self._unacked))
            self._unacked = 0
        stream = self._streams.get(stream_id)
        if stream is None or stream.ended:
            return  # a call we already ended (or refused): its data is dropped
        stream.unacked += len(payload)
        data = frames.strip_padding(payload, flags)
        try:
            self._take_messages(stream, data)
        except CallFailed as failed:
            self.finish(stream_id, failed.code, failed.message)
            return
        if flags & frames.END_STREAM:
            self._on_end(stream)
        else:
            self._give_window(stream)

    def _give_window(self, stream: Stream) -> None:
        """Reopen the stream's window once half of it was used, unless its method has fallen
        behind (then the client waits until the method takes what came)."""
        if stream.ended or stream.unacked < STREAM_WINDOW // 2:
            return
        if stream.requests is not None and stream.requests.queued >= STREAM_WINDOW // 2:
            return
        if self._streams.get(stream.id) is stream:
            self._emit(frames.window_update(stream.id, stream.unacked))
            stream.unacked = 0

    def _take_messages(self, stream: Stream, data: bytes) -> None:
        buffer = stream.buffer
        if buffer:
            buffer += data
            view: bytes | bytearray = buffer
        else:
            view = data
        position, size = 0, len(view)
        while size - position >= 5:
            flag, length = calls.MESSAGE_PREFIX.unpack_from(view, position)
            if length > self._max_message:
                raise CallFailed(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, calls.too_large(length, self._max_message)
                )
            end = position + 5 + length
            if end > size:
                break
            message = calls.unpack_message(
                flag, bytes(view[position + 5 : end]), stream.head.encoding, self._max_message
            )
            position = end
            if stream.requests is not None:
                stream.requests.put(message)
            elif stream.message is not None:
                raise CallFailed(
                    grpc.StatusCode.UNIMPLEMENTED, "a unary call takes one request message"
                )
            else:
                stream.message = message
        if view is buffer:
            del buffer[:position]
        elif position < size:
            buffer += view[position:]

    def _on_end(self, stream: Stream) -> None:
        stream.ended = True
        if stream.buffer:
            self.finish(stream.id, grpc.StatusCode.INTERNAL, "the stream ended inside a message")
            return
        if stream.requests is not None:
            stream.requests.end()
            return
        if stream.message is None:
            self.finish(
                stream.id,
                grpc.StatusCode.UNIMPLEMENTED,
                "a unary call takes one request message, none came",
            )
            return
        assert stream.context is not None
        message = stream.message
        stream.task = start(
            calls.run_unary(self, stream.id, stream.handler, stream.context, message)
        )

    def _expire(self, stream: Stream) -> None:
        stream.deadline = None
        if self._streams.get(stream.id) is stream:
            self.finish(stream.id, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            if stream.task is not None:
                stream.task.cancel()

    # --- writing ------------------------------------------------------------------------

    def send_message(self, stream_id: int, message: bytes) -> None:
        """One framed message out on the stream (after the response headers)."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.trailers is not None:
            return  # the call was reset or already ended
        if not stream.opened:
            stream.opened = True
            self._emit_headers(stream_id, headers.RESPONSE_HEAD, 0)
        stream.pending.append(memoryview(message))
        self._drain(stream)

    def finish(self, stream_id: int, code: grpc.StatusCode, message: str) -> None:
        """The call's status: trailers after whatever data is waiting, or one HEADERS frame
        (trailers-only) when nothing was sent."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.trailers is not None:
            return
        status = (
            headers.TRAILERS_OK
            if code is grpc.StatusCode.OK and not message
            else (headers.status_block(code.value[0], message))
        )
        if not stream.opened:
            stream.opened = True
            stream.trailers = b""
            self._emit_headers(stream_id, headers.RESPONSE_HEAD + status, frames.END_STREAM)
            self._close(stream)
            return
        stream.trailers = status
        self._drain(stream)

    def _drain(self, stream: Stream) -> None:
        pending = stream.pending
        while pending:
            allowed = min(stream.window, self._send_window, self._peer_frame)
            if allowed <= 0:
                if self._send_window <= 0:
                    self._blocked[stream.id] = stream
                return
            chunk = pending[0]
            if len(chunk) <= allowed:
                pending.popleft()
                part = chunk
            else:
                part, pending[0] = chunk[:allowed], chunk[allowed:]
            size = len(part)
            stream.window -= size
            self._send_window -= size
            self._emit(frames.header(size, frames.DATA, 0, stream.id))
            self._emit(part)
        if stream.trailers:
            self._emit_headers(stream.id, stream.trailers, frames.END_STREAM)
            self._close(stream)

    def _emit_headers(self, stream_id: int, block: bytes, flags: int) -> None:
        limit = self._peer_frame
        if len(block) <= limit:
            self._emit(frames.frame(frames.HEADERS, flags | frames.END_HEADERS, stream_id, block))
            return
        chunks = [block[i : i + limit] for i in range(0, len(block), limit)]
        self._emit(frames.frame(frames.HEADERS, flags, stream_id, chunks[0]))
        for index, chunk in enumerate(chunks[1:], 2):
            last = frames.END_HEADERS if index == len(chunks) else 0
            self._emit(frames.frame(frames.CONTINUATION, last, stream_id, chunk))

    def _refuse(self, stream_id: int, code: grpc.StatusCode, message: str) -> None:
        """Trailers-only for a call that never started."""
        block = headers.RESPONSE_HEAD + headers.status_block(code.value[0], message)
        self._emit_headers(stream_id, block, frames.END_STREAM)

    def _reply_status(self, stream_id: int, status: int) -> None:
        self._emit_headers(stream_id, headers.response_block(status), frames.END_STREAM)

    def _close(self, stream: Stream) -> None:
        """Our side is done; the peer's may not be (then tell it to stop sending)."""
        if not stream.ended:
            self._emit(frames.rst_stream(stream.id, frames.NO_ERROR))
        self._forget(stream)

    def _drop(self, stream: Stream) -> None:
        """The call ends without an answer (reset by the peer, or the connection went)."""
        self._forget(stream)
        if stream.task is not None:
            stream.task.cancel()

    def _forget(self, stream: Stream) -> None:
        self._streams.pop(stream.id, None)
        self._blocked.pop(stream.id, None)
        stream.pending.clear()
        if stream.deadline is not None:
            stream.deadline.cancel()
            stream.deadline = None
        self._wind_down_if_done()

    def _fail(self, code: int, message: str) -> None:
        log.warning("closing a gRPC connection from %s: %s", self._peer or "?", message)
        self._emit(frames.goaway(self._last_stream, code, message))
        self.abort()

    def _emit(self, data: bytes | memoryview) -> None:
        self._out.append(data)
        if not self._reading and self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        transport = self._transport
        if not self._out or transport is None or transport.is_closing() or self._winding_down:
            self._out.clear()
            return
        out, self._out = self._out, []
        transport.write(out[0] if len(out) == 1 else b"".join(out))
