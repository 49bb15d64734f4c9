"""One HTTP/2 connection carrying gRPC calls: the asyncio Protocol around an h2 connection.

h2 (sans-IO) keeps the protocol's state and checks the peer against RFC 9113; this module
does the rest: reading (each read first checked frame header by frame header by the policing
scan, then handed to h2 at most ``frames_per_turn`` frames per callback), mapping h2's events
onto calls, writing (everything h2 has to send after one read, or after one loop iteration of
calls, leaves in one ``transport.write``), backpressure (no reading while the transport's write
buffer is above its high-water mark) and the connection's timers.

Each call runs in its own Task with its own context; a reset, a deadline or the end of the
connection cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, cast

import grpc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hpack
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import GoAwayFrame, SettingsFrame

from ptserve.frontends.grpc.native import calls, headers
from ptserve.frontends.grpc.native.calls import CallFailed, Context, Requests
from ptserve.frontends.grpc.native.policing import DEFAULT_LIMITS, Limits, Scanner, Stop
from ptserve.frontends.grpc.native.streams import State, Stream

log = logging.getLogger("ptserve.grpc")

DEFAULT_WINDOW = 65_535
LARGEST_WINDOW = 2**31 - 1
MESSAGE_PREFIX = calls.MESSAGE_PREFIX

# Our fields are built here and known to be valid: h2 need not check or normalise them. The
# peer's are checked (validate_inbound_headers) as RFC 9113 section 8.2 asks.
H2_CONFIG = h2.config.H2Configuration(
    client_side=False,
    header_encoding=None,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
    validate_inbound_headers=True,
    normalize_inbound_headers=False,
)


def _peer_name(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if not isinstance(peer, tuple):
        return ""
    family = "ipv6" if ":" in peer[0] else "ipv4"
    host = f"[{peer[0]}]" if family == "ipv6" else peer[0]
    return f"{family}:{host}:{peer[1]}"


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
        self._h2 = self._new_h2()
        self._scanner = Scanner(limits, self._loop.time)
        self._streams: dict[int, Stream] = {}
        self._blocked: dict[int, Stream] = {}  # waiting for the connection's send window
        self._held: dict[int, Stream] = {}  # window held back while the connection's is full
        self._queued = 0  # bytes of streaming calls' whole requests not yet taken
        self._backlog = b""  # input not yet handed to h2
        self._turn: asyncio.Handle | None = None  # the callback that goes on with the backlog
        self._receiving = False  # in data_received: its end writes what h2 has to send
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

    def _new_h2(self) -> h2.connection.H2Connection:
        limits = self._limits
        connection = h2.connection.H2Connection(H2_CONFIG)
        # The limit on streams is enforced here, not by h2: h2 ends the whole connection when
        # it is exceeded, where RFC 9113 section 5.1.2 asks for a stream error (REFUSED_STREAM).
        # h2's decoder gets the hard limit on a header list; the advertised one, lower, fails
        # only the call that exceeds it. The SETTINGS frame sent says what we advertise.
        connection.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                SettingCodes.ENABLE_PUSH: 0,
                SettingCodes.INITIAL_WINDOW_SIZE: limits.stream_window,
                SettingCodes.MAX_FRAME_SIZE: limits.max_frame,
                SettingCodes.MAX_CONCURRENT_STREAMS: 2**31 - 1,
                SettingCodes.MAX_HEADER_LIST_SIZE: limits.max_decoded_header_list,
            },
        )
        connection.max_inbound_frame_size = limits.max_frame
        connection.decoder.max_header_list_size = limits.max_decoded_header_list
        return connection

    def _settings_frame(self) -> bytes:
        limits = self._limits
        frame = SettingsFrame(
            0,
            settings={
                SettingCodes.ENABLE_PUSH: 0,
                SettingCodes.MAX_CONCURRENT_STREAMS: limits.max_streams,
                SettingCodes.INITIAL_WINDOW_SIZE: limits.stream_window,
                SettingCodes.MAX_FRAME_SIZE: limits.max_frame,
                SettingCodes.MAX_HEADER_LIST_SIZE: limits.max_header_list,
            },
        )
        data: bytes = frame.serialize()
        return data

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self._peer = _peer_name(transport)
        self._transport.set_write_buffer_limits(high=self._limits.write_high_water)
        self._h2.initiate_connection()
        self._h2.data_to_send()  # h2's SETTINGS: replaced by ours (see _new_h2)
        self._transport.write(self._settings_frame())
        self._h2.increment_flow_control_window(self._limits.connection_window - DEFAULT_WINDOW)
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
        self._last_stream = self._h2.highest_inbound_stream_id
        # Written here, not through h2: after a GOAWAY h2 sends nothing more, and the calls in
        # progress still have to be answered.
        goaway = GoAwayFrame(0, last_stream_id=self._last_stream, error_code=0)
        self._flush()
        if not self._transport.is_closing():
            self._transport.write(goaway.serialize())
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
        log.warning("closing a gRPC connection from %s: %s", self._peer or "?", reason)
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self._h2.close_connection(code, additional_data=reason.encode()[:256])
        self._close_after_error()

    def _close_after_error(self) -> None:
        """Every call ends; the GOAWAY goes out, then the connection closes once the peer has
        read it (what it still sends is read and dropped, for ``linger`` seconds at most:
        closing with its data unread would reset the connection and lose the GOAWAY)."""
        for stream in list(self._streams.values()):
            self._drop(stream)
        self._discarding = True
        self._backlog = b""
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
                ErrorCodes.PROTOCOL_ERROR,
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
        except h2.exceptions.ProtocolError as exc:
            # h2 has queued its GOAWAY (with the error's code) already.
            log.warning("closing a gRPC connection from %s: %s", self._peer or "?", exc)
            if isinstance(exc.__cause__, hpack.HPACKError) and not isinstance(
                exc.__cause__, hpack.OversizedHeaderListError
            ):
                self._compression_error()
            self._close_after_error()
        except Exception as exc:  # a bug of ours: this connection ends, the server goes on
            log.exception("gRPC connection from %s failed", self._peer or "?")
            self._fail(ErrorCodes.INTERNAL_ERROR, f"internal error: {exc!r}")
        finally:
            self._receiving = False
            self._flush()

    def _compression_error(self) -> None:
        """h2 reports a header block it cannot decode as PROTOCOL_ERROR; RFC 9113 section 4.3
        asks for COMPRESSION_ERROR. Its GOAWAY is the last frame it queued: that one is
        replaced (when it is there as expected)."""
        queued = self._h2.data_to_send()
        last = self._h2.highest_inbound_stream_id
        theirs = GoAwayFrame(0, last_stream_id=last, error_code=ErrorCodes.PROTOCOL_ERROR)
        if queued.endswith(theirs.serialize()):
            ours = GoAwayFrame(0, last_stream_id=last, error_code=ErrorCodes.COMPRESSION_ERROR)
            queued = queued[: -len(theirs.serialize())] + ours.serialize()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(queued)

    def _frames(self, data: bytes) -> None:
        scan, receive = self._scanner.scan, self._h2.receive_data
        size = len(data)
        view = memoryview(data)
        position = 0
        while not self._closed:
            feed, resume, stop = scan(data, position)
            if feed > position:
                self._events(receive(data if feed - position == size else view[position:feed]))
                if self._closed:
                    return
            if stop is Stop.END:
                if resume < size:
                    self._backlog = bytes(view[resume:])
                return
            if stop is Stop.TURN:
                self._backlog = bytes(view[resume:])
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

    def _events(self, events: Iterable[h2.events.Event]) -> None:
        for event in events:
            kind = type(event)
            if kind is h2.events.DataReceived:
                self._on_data(cast(h2.events.DataReceived, event))
            elif kind is h2.events.RequestReceived:
                self._on_request(cast(h2.events.RequestReceived, event))
            elif kind is h2.events.StreamEnded:
                self._on_end(cast(h2.events.StreamEnded, event).stream_id)
            elif kind is h2.events.WindowUpdated:
                self._on_window_update(cast(h2.events.WindowUpdated, event).stream_id)
            elif kind is h2.events.StreamReset:
                stream = self._streams.get(cast(h2.events.StreamReset, event).stream_id)
                if stream is not None:
                    self._drop(stream)
            elif kind is h2.events.RemoteSettingsChanged:
                self._on_settings()
            if self._closed:
                return

    def _on_settings(self) -> None:
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
                self._drain_waiting(stream)

    def _on_window_update(self, stream_id: int) -> None:
        if stream_id == 0:
            blocked, self._blocked = self._blocked, {}
            for stream in blocked.values():
                self._drain_waiting(stream)
            return
        waiting = self._streams.get(stream_id)
        if waiting is not None and (waiting.pending or waiting.trailers is not None):
            self._drain_waiting(waiting)

    def _on_request(self, event: h2.events.RequestReceived) -> None:
        stream_id = event.stream_id
        ended = event.stream_ended is not None
        if self._going_away and stream_id > self._last_stream:
            self._h2.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            return
        if len(self._streams) >= self._limits.max_streams:
            self._h2.reset_stream(stream_id, ErrorCodes.REFUSED_STREAM)
            if not self._scanner.spend_reset():
                self._fail(ErrorCodes.ENHANCE_YOUR_CALM, "too many streams refused")
            return
        fields = event.headers  # bytes: no header_encoding
        size = headers.header_list_size(fields)
        if size > self._limits.max_header_list:
            self._refuse(
                stream_id,
                ended,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"header list size {size} exceeds the limit of {self._limits.max_header_list}",
            )
            return
        try:
            head = headers.request_head(fields)
        except ValueError as exc:
            self._refuse(stream_id, ended, grpc.StatusCode.INTERNAL, str(exc))
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
        stream = Stream(stream_id, head, handler, Context(head, self._peer, deadline))
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

    def _on_data(self, event: h2.events.DataReceived) -> None:
        stream_id = event.stream_id
        size = event.flow_controlled_length
        stream = self._streams.get(stream_id)
        if stream is None or stream.state is not State.RECEIVING:
            if size:  # a call we ended or refused: its data is dropped, its window given back
                self._h2.acknowledge_received_data(size, stream_id)
            return
        stream.unacked += size
        data = event.data
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
            return
        self._give_window(stream)

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
        self._h2.acknowledge_received_data(stream.unacked, stream.id)
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

    def _on_end(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        if stream.state is State.ANSWERED_EARLY:
            stream.state = State.ANSWERED
            return
        if stream.state is not State.RECEIVING:
            return
        stream.state = State.RUNNING  # once: the call starts (or its requests end) only here
        if stream.unacked:  # no more data will come: only the connection's window matters
            self._h2.acknowledge_received_data(stream.unacked, stream_id)
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
            body = calls.unpack_message(
                message[0], bytes(memoryview(message)[5:]), stream.head.encoding, self._max_message
            )
        except CallFailed as failed:
            self.finish(stream, failed.code, failed.message)
            return
        stream.task = self._start(
            calls.run_unary(self, stream, stream.handler, stream.context, body)
        )

    def _start(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return self._loop.create_task(coro, context=contextvars.copy_context())

    def _expire(self, stream: Stream) -> None:
        stream.deadline = None
        if stream.state is not State.CLOSED:
            self.finish(stream, grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
            if stream.task is not None:
                stream.task.cancel()

    # --- writing ------------------------------------------------------------------------

    def send_message(self, stream: Stream, message: bytes) -> None:
        """One framed message out on the stream (after the response headers)."""
        if stream.state is State.CLOSED or stream.trailers is not None:
            return  # the call was reset or already answered
        try:
            if not stream.opened:
                stream.opened = True
                self._h2.send_headers(stream.id, headers.RESPONSE_HEAD)
            stream.pending.append(memoryview(message))
            self._drain(stream)
        except h2.exceptions.StreamClosedError:
            self._drop(stream)  # h2 reset it (the peer broke the protocol on it)
        self._output()

    def finish(self, stream: Stream, code: grpc.StatusCode, message: str) -> None:
        """The call's status: trailers after whatever data is waiting, or one HEADERS frame
        (trailers-only) when nothing was sent."""
        if stream.state is State.CLOSED or stream.trailers is not None:
            return
        status = (
            headers.TRAILERS_OK
            if code is grpc.StatusCode.OK and not message
            else headers.status_fields(code.value[0], message)
        )
        if stream.state is State.RECEIVING:
            stream.state = State.ANSWERED_EARLY
        elif stream.state is State.RUNNING:
            stream.state = State.ANSWERED
        try:
            if not stream.opened:
                stream.opened = True
                self._h2.send_headers(stream.id, headers.RESPONSE_HEAD + status, end_stream=True)
                self._scanner.ping_is_free = True
                self._close(stream)
            else:
                stream.trailers = status
                self._drain(stream)
        except h2.exceptions.StreamClosedError:
            self._drop(stream)
        self._output()

    def _drain(self, stream: Stream) -> None:
        """Sends what the windows allow (raises StreamClosedError when h2 reset the stream)."""
        pending = stream.pending
        h2_connection = self._h2
        while pending:
            allowed = min(
                h2_connection.local_flow_control_window(stream.id),
                h2_connection.max_outbound_frame_size,
            )
            if allowed <= 0:
                if h2_connection.outbound_flow_control_window <= 0:
                    self._blocked[stream.id] = stream
                return
            chunk = pending[0]
            if len(chunk) <= allowed:
                pending.popleft()
                part = chunk
            else:
                part, pending[0] = chunk[:allowed], chunk[allowed:]
            h2_connection.send_data(stream.id, part)
        self._scanner.ping_is_free = True
        if stream.trailers is not None:
            h2_connection.send_headers(stream.id, stream.trailers, end_stream=True)
            self._close(stream)

    def _drain_waiting(self, stream: Stream) -> None:
        try:
            self._drain(stream)
        except h2.exceptions.StreamClosedError:
            self._drop(stream)

    def _refuse(self, stream_id: int, ended: bool, code: grpc.StatusCode, message: str) -> None:
        """Trailers-only for a call that never started."""
        fields = headers.RESPONSE_HEAD + headers.status_fields(code.value[0], message)
        self._h2.send_headers(stream_id, fields, end_stream=True)
        if not ended:
            self._stop_peer(stream_id)

    def _reply_status(self, stream_id: int, ended: bool, status: int) -> None:
        self._h2.send_headers(stream_id, headers.response_fields(status), end_stream=True)
        if not ended:
            self._stop_peer(stream_id)

    def _stop_peer(self, stream_id: int) -> None:
        """We answered before the peer's side ended: it need not send the rest."""
        with contextlib.suppress(h2.exceptions.StreamClosedError):  # it ended meanwhile
            self._h2.reset_stream(stream_id, ErrorCodes.NO_ERROR)

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
        self._streams.pop(stream_id, None)
        self._blocked.pop(stream_id, None)
        self._held.pop(stream_id, None)
        stream.pending.clear()
        if stream.requests is not None:
            self._queued -= stream.requests.waiting
        if stream.deadline is not None:
            stream.deadline.cancel()
            stream.deadline = None
        if stream.unacked and not self._closed:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.acknowledge_received_data(stream.unacked, stream_id)
            stream.unacked = 0
        if not self._streams:
            self._idle_since = self._loop.time()
            self._wind_down_if_done()

    def _output(self) -> None:
        if not self._receiving and self._flush_handle is None and not self._closed:
            self._flush_handle = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        data = self._h2.data_to_send()
        transport = self._transport
        if data and transport is not None and not transport.is_closing() and not self._winding_down:
            transport.write(data)
