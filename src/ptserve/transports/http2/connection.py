"""One HTTP/2 connection carrying gRPC calls: the asyncio Protocol, with the server side of
HTTP/2 (RFC 9113) kept here and in ``frames`` and ``headers``.

Reading: each read is first checked frame header by frame header by the policing scan, then
the frames it lets through (at most ``frames_per_turn`` per callback) are parsed and handled
here: settings, stream states and ids, flow control both ways, pings, resets and GOAWAY, and
the calls they carry. Writing: everything there is to send after one read, or after one loop
iteration of calls, leaves in one ``transport.write``; no reading while the transport's write
buffer is above its high-water mark. The connection's timers: handshake, idle, linger.

Each call runs in its own Task with its own context; a reset, a deadline or the end of the
connection cancels it.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, cast

import grpc

from ptserve.transports.http2 import calls, frames, headers
from ptserve.transports.http2.calls import CallFailed, Context, Requests
from ptserve.transports.http2.frames import (
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    FLOW_CONTROL_ERROR,
    LARGEST_FRAME,
    LARGEST_WINDOW,
    NO_ERROR,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    STREAM_CLOSED,
    ConnectionError_,
)
from ptserve.transports.http2.headers import Decoded, HeaderError
from ptserve.transports.http2.policing import DEFAULT_LIMITS, Limits, Scanner, Stop
from ptserve.transports.http2.streams import State, Stream

log = logging.getLogger("ptserve.grpc")

MESSAGE_PREFIX = calls.MESSAGE_PREFIX
_HEADER = frames.HEADER

# How a stream the connection no longer keeps was closed (RFC 9113 section 5.1), for the frames
# that may still come on it.
ENDED = 0  # both sides ended it
RESET_BY_US = 1  # frames on it are ignored
RESET_BY_PEER = 2
_CLOSED_KEPT = 4096  # closed streams remembered (the oldest are forgotten first)
_REMOTE_OPEN = (State.RECEIVING, State.ANSWERED_EARLY)


def _peer_name(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if not isinstance(peer, tuple):
        return ""
    family = "ipv6" if ":" in peer[0] else "ipv4"
    host = f"[{peer[0]}]" if family == "ipv6" else peer[0]
    return f"{family}:{host}:{peer[1]}"


def _increment(window: int, processed: int, size: int) -> int:
    """The WINDOW_UPDATE to send for a window of ``size`` with ``window`` left and
    ``processed`` bytes consumed: one once half the window is used (or all of it), so that small
    calls cost none."""
    if processed >= size // 2 or (not window and processed > min(1024, size // 4)):
        return min(processed, size - window)
    return 0


class Connection(asyncio.Protocol):
    def __init__(
        self,
        methods: Mapping[str, Any],
        max_message: int,
        on_close: Callable[[Connection], None],
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self._methods = methods
        self._max_message = max_message
        self._on_close = on_close
        self._limits = limits
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._peer = ""
        self._scanner = Scanner(limits, self._loop.time)
        self._decoder = headers.HeaderDecoder(limits.max_decoded_header_list)
        self._preface = len(frames.PREFACE)  # preface bytes still to pass over
        self._partial = bytearray()  # the start of a frame whose end has not arrived
        self._block: tuple[int, int, list[bytes], int | None] | None = None  # header block
        # in progress: stream, the HEADERS frame's flags, fragments, the stream it depends on
        self._out: list[bytes | memoryview] = []  # to write at the next flush
        self._streams: dict[int, Stream] = {}
        self._closed_streams: dict[int, int] = {}  # stream id: ENDED, RESET_BY_US or _BY_PEER
        # Their ids in the order they closed: the oldest is forgotten in O(1) (the first key of
        # a dict that keeps losing its first keys is found past every one deleted before it).
        self._closed_order: collections.deque[int] = collections.deque()
        self._highest = 0  # the highest stream the peer opened
        self._blocked: dict[int, Stream] = {}  # waiting for the connection's send window
        self._held: dict[int, Stream] = {}  # window held back while the connection's is full
        self._queued = 0  # bytes of streaming calls' whole requests not yet taken
        self._send_window = DEFAULT_WINDOW  # what we may still send on the connection
        self._peer_window = DEFAULT_WINDOW  # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self._peer_frame = DEFAULT_MAX_FRAME  # the peer's SETTINGS_MAX_FRAME_SIZE
        self._inbound = limits.connection_window  # what the peer may still send
        self._processed = 0  # consumed bytes not yet given back with WINDOW_UPDATE
        self._backlog = b""  # input not yet handled
        self._turn: asyncio.Handle | None = None  # the callback that goes on with the backlog
        self._receiving = False  # in data_received: its end writes what there is to send
        self._flush_handle: asyncio.Handle | None = None
        self._write_paused = False
        self._reading_paused = False
        self._handshaken = False
        self._timer: asyncio.TimerHandle | None = None  # handshake, then idle
        self._idle_since = self._loop.time()
        self._going_away = False  # our GOAWAY went out: no new calls
        self._last_stream = 0  # the last stream our GOAWAY lets through
        self._peer_going_away = False
        self._winding_down = False
        self._discarding = False  # after a connection error: input is dropped
        self._closed = False
        self.closed = asyncio.Event()

    def _settings_frame(self) -> bytes:
        limits = self._limits
        return frames.settings(
            {
                frames.ENABLE_PUSH: 0,
                frames.MAX_CONCURRENT_STREAMS: limits.max_streams,
                frames.INITIAL_WINDOW_SIZE: limits.stream_window,
                frames.MAX_FRAME_SIZE: limits.max_frame,
                frames.MAX_HEADER_LIST_SIZE: limits.max_header_list,
            }
        )

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self._peer = _peer_name(transport)
        self._transport.set_write_buffer_limits(high=self._limits.write_high_water)
        self._out.append(self._settings_frame())
        if self._limits.connection_window > DEFAULT_WINDOW:
            self._out.append(
                frames.window_update(0, self._limits.connection_window - DEFAULT_WINDOW)
            )
        self._timer = self._loop.call_later(self._limits.handshake_timeout, self._handshake_late)
        self._flush()

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._backlog:
            data, self._backlog = self._backlog + data, b""
        self._consume(data)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        for stream in list(self._streams.values()):
            self._drop(stream)
        self._out.clear()
        for handle in (self._flush_handle, self._turn, self._timer):
            if handle is not None:
                handle.cancel()
        self.closed.set()
        self._on_close(self)

    # --- shutting down ------------------------------------------------------------------

    def go_away(self) -> None:
        """Refuse new calls (GOAWAY with the last stream let through); the ones in progress
        go on."""
        if self._closed or self._going_away or self._winding_down or self._transport is None:
            return
        self._going_away = True
        self._last_stream = self._highest
        self._out.append(frames.goaway(self._last_stream, NO_ERROR))
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
        if (self._going_away or self._peer_going_away) and not self._streams:
            self._wind_down()

    def _wind_down(self) -> None:
        """With no call left after GOAWAY: stop writing, but keep reading until the peer closes
        (or for ``linger`` seconds). Closing at once could reset the connection while the peer
        still has our last answers to read."""
        if self._winding_down or self._closed or self._transport is None:
            return
        self._flush()
        self._winding_down = True
        if self._transport.can_write_eof():
            self._transport.write_eof()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(self._limits.linger, self.abort)

    def _fail(self, code: int, reason: str) -> None:
        """A connection error of ours: GOAWAY with ``code``, then close."""
        if self._discarding:
            return
        log.warning("closing a gRPC connection from %s: %s", self._peer or "?", reason)
        self._out.append(frames.goaway(self._highest, code, reason.encode()[:256]))
        self._close_after_error()

    def _close_after_error(self) -> None:
        """Every call ends; the GOAWAY goes out, then the connection closes once the peer has
        read it (what it still sends is read and dropped, for ``linger`` seconds at most:
        closing with its data unread would reset the connection and lose the GOAWAY)."""
        self._discarding = True
        for stream in list(self._streams.values()):
            self._drop(stream)
        self._backlog = b""
        self._partial = bytearray()
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        self._flush()
        self._write_paused = False  # what the peer sends is dropped now: read on
        self._update_reading()
        self._wind_down()

    def _handshake_late(self) -> None:
        self._timer = None
        if not self._handshaken and not self._closed:
            self._fail(
                PROTOCOL_ERROR,
                f"no HTTP/2 preface and SETTINGS within {self._limits.handshake_timeout:g} s",
            )

    def _idle_check(self) -> None:
        self._timer = None
        if self._closed or self._winding_down:
            return
        idle = self._limits.idle_timeout
        now = self._loop.time()
        if self._streams:
            self._timer = self._loop.call_at(now + idle, self._idle_check)
        elif now - self._idle_since >= idle * 0.999:
            log.info("closing an idle gRPC connection from %s", self._peer or "?")
            self.go_away()
        else:
            self._timer = self._loop.call_at(self._idle_since + idle, self._idle_check)

    # --- reading ------------------------------------------------------------------------

    def _update_reading(self) -> None:
        pause = self._write_paused or self._turn is not None
        transport = self._transport
        if pause == self._reading_paused or transport is None or transport.is_closing():
            return
        self._reading_paused = pause
        if pause:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def _next_turn(self) -> None:
        self._turn = None
        data, self._backlog = self._backlog, b""
        if data:
            self._consume(data)
        self._update_reading()

    def _consume(self, data: bytes) -> None:
        self._receiving = True
        try:
            self._frames(data)
        except (ConnectionError_, HeaderError) as exc:
            self._fail(exc.code, exc.message)
        except Exception as bug:  # a bug of ours: this connection ends, the server goes on
            log.exception("gRPC connection from %s failed", self._peer or "?")
            self._fail(frames.INTERNAL_ERROR, f"internal error: {bug!r}")
        finally:
            self._receiving = False
            self._flush()

    def _frames(self, data: bytes) -> None:
        scan = self._scanner.scan
        size = len(data)
        position = 0
        while not self._closed and not self._discarding:
            feed, resume, stop = scan(data, position)
            if feed > position:
                self._receive(data, position, feed)
                if self._closed or self._discarding:
                    return
            if stop is Stop.END:
                if resume < size:
                    self._backlog = data[resume:]
                return
            if stop is Stop.TURN:
                self._backlog = data[resume:]
                if self._turn is None:
                    self._turn = self._loop.call_soon(self._next_turn)
                self._update_reading()
                return
            if stop is Stop.VIOLATION:
                self._fail(self._scanner.code, self._scanner.reason)
                return
            if stop is Stop.GOAWAY and not self._peer_going_away:
                self._peer_going_away = True
                self._wind_down_if_done()
            position = resume
            if position >= size:
                return

    def _receive(self, data: bytes, start: int, end: int) -> None:
        """The frames in ``data[start:end]`` (checked by the scan), after the part of a frame
        that came before; a frame cut by ``end`` waits for the rest."""
        if self._preface:  # checked by the scan
            taken = min(self._preface, end - start)
            self._preface -= taken
            start += taken
            if start >= end:
                return
        partial = self._partial
        if partial:
            partial += memoryview(data)[start:end]
            used = self._parse(partial, 0, len(partial))
            if self._partial is partial:
                del partial[:used]
            return
        used = self._parse(data, start, end)
        if used < end and not self._discarding and not self._closed:
            partial += memoryview(data)[used:end]

    def _parse(self, data: bytes | bytearray, position: int, end: int) -> int:
        unpack = _HEADER.unpack_from
        while end - position >= 9:
            high, low, kind, flags, stream_id = unpack(data, position)
            stop = position + 9 + ((high << 8) | low)
            if stop > end:
                break
            self._frame(kind, flags, stream_id & 0x7FFF_FFFF, bytes(data[position + 9 : stop]))
            position = stop
            if self._discarding or self._closed:
                return end
        return position

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        """One frame (its length already checked by the scan where a length is fixed)."""
        if self._block is not None and kind != frames.CONTINUATION:
            raise ConnectionError_(PROTOCOL_ERROR, "a frame inside a header block")
        if kind == frames.DATA:
            self._on_data(flags, stream_id, payload)
        elif kind == frames.HEADERS:
            self._on_headers(flags, stream_id, payload)
        elif not self._handshaken and kind != frames.SETTINGS:
            raise ConnectionError_(PROTOCOL_ERROR, "the first frame is not SETTINGS")
        elif kind == frames.WINDOW_UPDATE:
            self._on_window_update(stream_id, frames.parse_u32(payload) & 0x7FFF_FFFF)
        elif kind == frames.PING:
            if not flags & frames.ACK:
                self._out.append(frames.ping_ack(payload))
        elif kind == frames.SETTINGS:
            self._on_settings(flags, stream_id, payload)
        elif kind == frames.RST_STREAM:
            self._on_reset(stream_id)
        elif kind == frames.CONTINUATION:
            self._on_continuation(flags, stream_id, payload)
        elif kind == frames.PRIORITY:
            if not stream_id:
                raise ConnectionError_(PROTOCOL_ERROR, "PRIORITY on stream 0")
            if frames.priority_dependency(payload) == stream_id:
                self._stream_error(stream_id, PROTOCOL_ERROR)
        elif kind == frames.PUSH_PROMISE:
            raise ConnectionError_(PROTOCOL_ERROR, "clients cannot push")
        elif kind == frames.GOAWAY:  # (one on stream 0 is the scan's)
            raise ConnectionError_(PROTOCOL_ERROR, "GOAWAY on a stream")
        # Unknown frame types are ignored.

    def _on_settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise ConnectionError_(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & frames.ACK:
            if not self._handshaken:
                raise ConnectionError_(PROTOCOL_ERROR, "the first frame is not SETTINGS")
            return
        for key, value in frames.parse_settings(payload):
            if key == frames.INITIAL_WINDOW_SIZE:
                if value > LARGEST_WINDOW:
                    raise ConnectionError_(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE")
                delta, self._peer_window = value - self._peer_window, value
                for stream in self._streams.values():
                    stream.window += delta
                    if stream.window > LARGEST_WINDOW:
                        raise ConnectionError_(FLOW_CONTROL_ERROR, "a stream window overflowed")
            elif key == frames.MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value <= LARGEST_FRAME:
                    raise ConnectionError_(PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE")
                self._peer_frame = value
            elif key == frames.ENABLE_PUSH and value > 1:
                raise ConnectionError_(PROTOCOL_ERROR, "SETTINGS_ENABLE_PUSH")
            # HEADER_TABLE_SIZE: our blocks leave the peer's table alone. The others (and
            # unknown ones) ask nothing of a server that does not push.
        self._out.append(frames.SETTINGS_ACK)
        if not self._handshaken:
            self._handshaken = True
            if self._timer is not None:
                self._timer.cancel()
            self._idle_since = self._loop.time()
            self._timer = self._loop.call_at(
                self._idle_since + self._limits.idle_timeout, self._idle_check
            )
        # The peer's initial window or frame size may have changed: what waits may go out.
        for stream in list(self._streams.values()):
            if stream.pending or stream.trailers is not None:
                self._drain(stream)

    def _on_window_update(self, stream_id: int, increment: int) -> None:
        if stream_id == 0:
            if not increment:
                raise ConnectionError_(PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > LARGEST_WINDOW:
                raise ConnectionError_(FLOW_CONTROL_ERROR, "the connection window overflowed")
            blocked, self._blocked = self._blocked, {}
            for waiting in blocked.values():
                if waiting.state is not State.CLOSED:
                    self._drain(waiting)
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            return  # a closed stream: a WINDOW_UPDATE may still come
        if not increment:
            self._stream_error(stream_id, PROTOCOL_ERROR)
            return
        stream.window += increment
        if stream.window > LARGEST_WINDOW:
            self._stream_error(stream_id, FLOW_CONTROL_ERROR)
            return
        if stream.pending or stream.trailers is not None:
            self._drain(stream)

    def _on_reset(self, stream_id: int) -> None:
        if not stream_id:
            raise ConnectionError_(PROTOCOL_ERROR, "RST_STREAM on stream 0")
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._record(stream_id, RESET_BY_PEER)
            self._drop(stream)

    def _stream_error(self, stream_id: int, code: int) -> None:
        """RST_STREAM with ``code``: the call on the stream, if any, ends unanswered."""
        self._reset(stream_id, code)
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._drop(stream)

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError_(PROTOCOL_ERROR, "HEADERS on stream 0")
        block, dependency = frames.header_block(payload, flags)
        if flags & frames.END_HEADERS:
            self._on_header_block(stream_id, flags, block, dependency)
        else:
            self._block = (stream_id, flags, [block], dependency)

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        block = self._block
        if block is None or block[0] != stream_id:
            raise ConnectionError_(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")
        block[2].append(payload)
        if flags & frames.END_HEADERS:
            self._block = None
            self._on_header_block(stream_id, block[1], b"".join(block[2]), block[3])

    def _on_header_block(
        self, stream_id: int, flags: int, block: bytes, dependency: int | None
    ) -> None:
        if not stream_id & 1:
            raise ConnectionError_(PROTOCOL_ERROR, "clients open odd-numbered streams")
        if not self._handshaken:
            raise ConnectionError_(PROTOCOL_ERROR, "the first frame is not SETTINGS")
        ended = bool(flags & frames.END_STREAM)
        if stream_id > self._highest:  # a new stream
            self._highest = stream_id
            decoded = self._decoder.request(block)
            if dependency == stream_id:
                self._reset(stream_id, PROTOCOL_ERROR)
                return
            self._on_request(stream_id, ended, decoded)
            return
        reason = self._decoder.trailers(block)  # read whatever follows: HPACK keeps in step
        stream = self._streams.get(stream_id)
        if stream is None:
            how = self._closed_streams.get(stream_id)
            if how == RESET_BY_US:
                return
            if how == RESET_BY_PEER:
                self._reset(stream_id, STREAM_CLOSED)
                return
            if how == ENDED:
                raise ConnectionError_(STREAM_CLOSED, "HEADERS on a closed stream")
            raise ConnectionError_(PROTOCOL_ERROR, "HEADERS on a stream lower than one opened")
        if stream.state not in _REMOTE_OPEN:  # half-closed (remote)
            self._stream_error(stream_id, STREAM_CLOSED)
        elif not ended or reason is not None or dependency == stream_id:
            self._stream_error(stream_id, PROTOCOL_ERROR)  # not trailers, or malformed ones
        else:
            self._on_end(stream)

    def _on_request(self, stream_id: int, ended: bool, decoded: Decoded) -> None:
        if self._going_away and stream_id > self._last_stream:
            self._reset(stream_id, REFUSED_STREAM)
            return
        if len(self._streams) >= self._limits.max_streams:
            self._reset(stream_id, REFUSED_STREAM)
            if not self._scanner.spend_reset():
                self._fail(frames.ENHANCE_YOUR_CALM, "too many streams refused")
            return
        if decoded.malformed is not None:
            log.info("malformed request from %s: %s", self._peer or "?", decoded.malformed)
            self._reset(stream_id, PROTOCOL_ERROR)
            return
        size = decoded.size
        if size > self._limits.max_header_list:
            self._refuse(
                stream_id,
                ended,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"header list size {size} exceeds the limit of {self._limits.max_header_list}",
            )
            return
        head = decoded.head
        if head is None:
            self._refuse(stream_id, ended, grpc.StatusCode.INTERNAL, decoded.error or "")
            return
        if head.method != "POST":
            self._reply_status(stream_id, ended, 405)
            return
        if not head.content_type.startswith("application/grpc"):
            self._reply_status(stream_id, ended, 415)
            return
        handler = self._methods.get(head.path)
        if handler is None:
            self._refuse(stream_id, ended, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return
        deadline = None if head.timeout is None else self._loop.time() + head.timeout
        stream = Stream(
            stream_id,
            head,
            handler,
            Context(head, self._peer, deadline),
            self._peer_window,
            self._limits.stream_window,
        )
        self._streams[stream_id] = stream
        if deadline is not None:
            stream.deadline = self._loop.call_at(deadline, self._expire, stream)
        if handler.stream_stream is not None:
            stream.requests = Requests(
                handler.request_deserializer,
                head.encoding,
                self._max_message,
                self._limits.max_unanswered,
                lambda size: self._taken(stream, size),
                lambda failed: self._failed(stream, failed),
            )
            stream.task = self._start(
                calls.run_stream(self, stream, handler, stream.context, stream.requests)
            )
        if ended:
            self._on_end(stream)

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError_(PROTOCOL_ERROR, "DATA on stream 0")
        if not self._handshaken:
            raise ConnectionError_(PROTOCOL_ERROR, "the first frame is not SETTINGS")
        size = len(payload)  # padding included: all of it counts against the windows
        if size > self._inbound:
            raise ConnectionError_(FLOW_CONTROL_ERROR, "DATA beyond the connection's window")
        self._inbound -= size
        stream = self._streams.get(stream_id)
        if stream is None or stream.state not in _REMOTE_OPEN:
            if size:  # its window is given back
                self._acknowledge(size, None)
            if stream is not None:  # half-closed (remote)
                self._stream_error(stream_id, STREAM_CLOSED)
            elif self._closed_streams.get(stream_id) != RESET_BY_US:
                self._reset(stream_id, STREAM_CLOSED)
            return
        if size > stream.inbound:
            raise ConnectionError_(FLOW_CONTROL_ERROR, "DATA beyond the stream's window")
        stream.inbound -= size
        data = frames.strip_padding(payload, flags) if flags & frames.PADDED else payload
        if stream.state is State.ANSWERED_EARLY:  # answered: what comes is dropped
            if size:
                self._acknowledge(size, stream)
        else:
            stream.unacked += size
            try:
                requests = stream.requests
                if requests is not None:
                    before = requests.waiting
                    requests.put(data)
                    self._queued += requests.waiting - before
                else:
                    self._add_to_message(stream, data)
            except CallFailed as failed:
                self.finish(stream, failed.code, failed.message)
            else:
                self._give_window(stream)
        if flags & frames.END_STREAM:
            self._on_end(stream)

    def _acknowledge(self, size: int, stream: Stream | None) -> None:
        """``size`` received bytes are consumed: the windows they took are given back (once
        half a window is used)."""
        processed = self._processed + size
        increment = _increment(self._inbound, processed, self._limits.connection_window)
        if increment:
            self._inbound += increment
            self._out.append(frames.window_update(0, increment))
            processed = 0
        self._processed = processed
        if stream is not None and stream.state in _REMOTE_OPEN:
            processed = stream.processed + size
            increment = _increment(stream.inbound, processed, self._limits.stream_window)
            if increment:
                stream.inbound += increment
                self._out.append(frames.window_update(stream.id, increment))
                processed = 0
            stream.processed = processed

    def _add_to_message(self, stream: Stream, data: bytes) -> None:
        message = stream.message
        message += data
        if len(message) >= 5:
            _, length = MESSAGE_PREFIX.unpack_from(message, 0)
            if length > self._max_message:
                raise CallFailed(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, calls.too_large(length, self._max_message)
                )
            if len(message) > 5 + length:
                raise CallFailed(
                    grpc.StatusCode.UNIMPLEMENTED, "a unary call takes one request message"
                )

    def _give_window(self, stream: Stream) -> None:
        """Give the stream's received bytes back to the peer's windows, unless its method has
        fallen behind, or the streaming calls' unread requests fill half the connection's
        window (then the peer waits until the methods take what came)."""
        if not stream.unacked:
            return
        requests = stream.requests
        if requests is not None:
            if requests.waiting >= self._limits.stream_window // 2:
                return
            if self._queued >= self._limits.connection_window // 2:
                self._held[stream.id] = stream
                return
        self._acknowledge(stream.unacked, stream)
        stream.unacked = 0

    def _taken(self, stream: Stream, size: int) -> None:
        """A streaming call's method took a message of ``size`` bytes."""
        if stream.state is State.CLOSED:
            return  # its bytes were counted off when it closed
        self._queued -= size
        if stream.state is State.RECEIVING:
            self._give_window(stream)
        if self._held and self._queued < self._limits.connection_window // 2:
            held, self._held = self._held, {}
            for waiting in held.values():
                if waiting.state is State.RECEIVING:
                    self._give_window(waiting)
        self._output()

    def _failed(self, stream: Stream, failed: CallFailed) -> None:
        """A streaming call's message could not be unpacked: the call ends with its status."""
        self.finish(stream, failed.code, failed.message)
        if stream.task is not None:
            stream.task.cancel()

    def _on_end(self, stream: Stream) -> None:
        """The peer ended its side of the stream (END_STREAM)."""
        if stream.state is State.ANSWERED_EARLY:
            stream.state = State.ANSWERED
            return
        if stream.state is not State.RECEIVING:
            return
        stream.state = State.RUNNING  # once: the call starts (or its requests end) only here
        if stream.unacked:  # no more data will come: only the connection's window matters
            self._acknowledge(stream.unacked, None)
            stream.unacked = 0
        requests = stream.requests
        if requests is not None:
            if requests.partial:
                self.finish(stream, grpc.StatusCode.INTERNAL, "the stream ended inside a message")
            else:
                requests.end()
            return
        message = stream.message
        if not message:
            self.finish(
                stream,
                grpc.StatusCode.UNIMPLEMENTED,
                "a unary call takes one request message, none came",
            )
            return
        if len(message) < 5 or len(message) != 5 + MESSAGE_PREFIX.unpack_from(message, 0)[1]:
            self.finish(stream, grpc.StatusCode.INTERNAL, "the stream ended inside a message")
            return
        stream.message = bytearray()
        try:
            # A view of the call's own buffer, not a copy: the method may keep parts of it
            # (tensor data) and a model may write into them, as into an HTTP request's body.
            body = calls.unpack_message(
                message[0], memoryview(message)[5:], stream.head.encoding, self._max_message
            )
        except CallFailed as failed:
            self.finish(stream, failed.code, failed.message)
            return
        stream.task = self._start(
            calls.run_unary(self, stream, stream.handler, stream.context, body)
        )

    def _start(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        # A Task made directly, named: the loop's create_task formats a "Task-<n>" name first.
        return asyncio.Task(
            coro, loop=self._loop, name="grpc-call", context=contextvars.copy_context()
        )

    def _expire(self, stream: Stream) -> None:
        stream.deadline = None
        if stream.state is not State.CLOSED:
            self.finish(stream, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            if stream.task is not None:
                stream.task.cancel()

    # --- writing ------------------------------------------------------------------------

    def send_message(self, stream: Stream, message: bytes) -> None:
        """One framed message out on the stream (after the response headers)."""
        if self._add_message(stream, [message]):
            self._output()

    def answer(
        self, stream: Stream, parts: list[calls.Buffer], code: grpc.StatusCode, details: str
    ) -> None:
        """A unary call's answer: its framed message (in parts) and status, written together."""
        self._add_message(stream, parts)
        self.finish(stream, code, details)

    def _add_message(self, stream: Stream, parts: list[calls.Buffer]) -> bool:
        if stream.state is State.CLOSED or stream.trailers is not None:
            return False  # the call was reset or already answered
        if not stream.opened:
            stream.opened = True
            self._out.append(
                frames.headers(stream.id, headers.RESPONSE_HEAD_BLOCK, False, self._peer_frame)
            )
        pending = stream.pending
        for part in parts:
            if len(part):
                pending.append(memoryview(part))
        self._drain(stream)
        return True

    def finish(self, stream: Stream, code: grpc.StatusCode, message: str) -> None:
        """The call's status: trailers after whatever data is waiting, or one HEADERS frame
        (trailers-only) when nothing was sent."""
        if stream.state is State.CLOSED or stream.trailers is not None:
            return
        status = (
            headers.TRAILERS_OK_BLOCK
            if code is grpc.StatusCode.OK and not message
            else headers.encode(headers.status_fields(code.value[0], message))
        )
        if stream.state is State.RECEIVING:
            stream.state = State.ANSWERED_EARLY
        elif stream.state is State.RUNNING:
            stream.state = State.ANSWERED
        if not stream.opened:
            stream.opened = True
            self._out.append(
                frames.headers(
                    stream.id, headers.RESPONSE_HEAD_BLOCK + status, True, self._peer_frame
                )
            )
            self._scanner.ping_is_free = True
            self._close(stream)
        else:
            stream.trailers = status
            self._drain(stream)
        self._output()

    def _drain(self, stream: Stream) -> None:
        """Sends what the windows allow, then the trailers once nothing waits."""
        pending = stream.pending
        out = self._out
        stream_id = stream.id
        while pending:
            allowed = min(stream.window, self._send_window, self._peer_frame)
            if allowed <= 0:
                if self._send_window <= 0:
                    self._blocked[stream_id] = stream
                return
            # One DATA frame of what waits, up to what the windows and the frame size allow:
            # the parts of a message (and the messages of a stream) share frames.
            at = len(out)
            out.append(b"")  # (the frame's header, once its size is known)
            size = 0
            while pending and size < allowed:
                chunk = pending[0]
                room = allowed - size
                if len(chunk) <= room:
                    pending.popleft()
                else:
                    chunk, pending[0] = chunk[:room], chunk[room:]
                out.append(chunk)
                size += len(chunk)
            out[at] = _HEADER.pack(size >> 8, size & 0xFF, frames.DATA, 0, stream_id)
            stream.window -= size
            self._send_window -= size
        self._scanner.ping_is_free = True
        if stream.trailers is not None:
            out.append(frames.headers(stream_id, stream.trailers, True, self._peer_frame))
            self._close(stream)

    def _refuse(self, stream_id: int, ended: bool, code: grpc.StatusCode, message: str) -> None:
        """Trailers-only for a call that never started."""
        block = headers.RESPONSE_HEAD_BLOCK + headers.encode(
            headers.status_fields(code.value[0], message)
        )
        self._answer(stream_id, ended, block)

    def _reply_status(self, stream_id: int, ended: bool, status: int) -> None:
        self._answer(stream_id, ended, headers.encode(headers.response_fields(status)))

    def _answer(self, stream_id: int, ended: bool, block: bytes) -> None:
        self._out.append(frames.headers(stream_id, block, True, self._peer_frame))
        if ended:
            self._record(stream_id, ENDED)
        else:
            self._stop_peer(stream_id)

    def _stop_peer(self, stream_id: int) -> None:
        """We answered before the peer's side ended: it need not send the rest."""
        self._reset(stream_id, NO_ERROR)

    def _reset(self, stream_id: int, code: int) -> None:
        self._out.append(frames.rst_stream(stream_id, code))
        self._record(stream_id, RESET_BY_US)

    def _record(self, stream_id: int, how: int) -> None:
        """Remembers how a stream closed (the first word on it stands)."""
        closed = self._closed_streams
        if stream_id in closed:
            return
        order = self._closed_order
        if len(order) >= _CLOSED_KEPT:
            del closed[order.popleft()]
        closed[stream_id] = how
        order.append(stream_id)

    def _close(self, stream: Stream) -> None:
        """The answer is out; the peer's side may still be open (then tell it to stop)."""
        if stream.state is State.ANSWERED_EARLY:
            self._stop_peer(stream.id)
        self._forget(stream)

    def _drop(self, stream: Stream) -> None:
        """The call ends without an answer (reset by the peer, or the connection went)."""
        self._forget(stream)
        if stream.task is not None:
            stream.task.cancel()

    def _forget(self, stream: Stream) -> None:
        stream.state = State.CLOSED
        stream_id = stream.id
        self._record(stream_id, ENDED)
        self._streams.pop(stream_id, None)
        self._blocked.pop(stream_id, None)
        self._held.pop(stream_id, None)
        stream.pending.clear()
        if stream.requests is not None:
            self._queued -= stream.requests.waiting
        if stream.deadline is not None:
            stream.deadline.cancel()
            stream.deadline = None
        if stream.unacked and not self._closed and not self._discarding:
            self._acknowledge(stream.unacked, None)
            stream.unacked = 0
        if not self._streams:
            self._idle_since = self._loop.time()
            self._wind_down_if_done()

    def _output(self) -> None:
        """Write what waits: at the end of the read being handled; now when no other call of
        this connection is open (nothing else could join this write: one request at a time
        gets its answer without waiting for another turn of the loop); else after the calls
        that end in this turn have added theirs."""
        if self._receiving or self._closed:
            return
        if not self._streams:
            if self._flush_handle is not None:
                self._flush_handle.cancel()
            self._flush()
        elif self._flush_handle is None:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        out = self._out
        if not out:
            return
        transport = self._transport
        if transport is not None and not transport.is_closing() and not self._winding_down:
            size = 0
            for piece in out:
                size += len(piece)
            if size > calls.JOIN_LIMIT:  # large tensor data goes to the socket from where it lies
                transport.writelines(list(out))
            else:  # one buffer, one copy at most: cheaper than a gather of small pieces
                transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()
