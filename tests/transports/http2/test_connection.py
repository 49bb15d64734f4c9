"""The native gRPC transport over a real socket, driven by the h2 package as the client, so that
each protocol rule is checked on the bytes a peer actually sees. Violations the h2 client
refuses to produce are written by hand (hyperframe frames, or raw bytes)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import gzip
import struct
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import grpc
import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from h2.errors import ErrorCodes
from h2.settings import SettingCodes
from hyperframe.frame import (
    ContinuationFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    WindowUpdateFrame,
)

from ptserve.transports.http2 import connection as h2_connection
from ptserve.transports.http2.calls import Context
from ptserve.transports.http2.policing import DEFAULT_LIMITS, PREFACE, Limits
from ptserve.transports.http2.server import NativeGrpcServer

MAX_MESSAGE = 200_000
TIMEOUT = 3.0  # for any single wait: a bug fails the test instead of hanging it
LIMITS = DEFAULT_LIMITS

Fields = list[tuple[str, str]]
T = TypeVar("T")


# --- the servicer ---------------------------------------------------------------------------


@dataclass
class State:
    """What the handlers saw, and the events a test waits on or releases them with."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    metadata: tuple[tuple[str, str | bytes], ...] | None = None
    peer: str = ""
    remaining: float | None = None
    marks: list[int] = field(default_factory=list)  # what ``turn`` said as a Marked call ran
    raw: list[memoryview] = field(default_factory=list)  # what Raw calls were given
    parts: list[bytearray] = field(default_factory=list)  # the buffers Parts calls answered
    turn: Callable[[], int] = lambda: 0
    calls: int = 0
    tasks: list[asyncio.Task[Any] | None] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    running: int = 0
    most_running: int = 0


MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")


def servicer(state: State) -> dict[str, Any]:
    async def echo(request: bytes, context: Context) -> bytes:
        state.calls += 1
        state.metadata = context.invocation_metadata()
        state.peer = context.peer()
        state.remaining = context.time_remaining()
        return request

    async def raw(request: memoryview, context: Context) -> bytes:
        """A method that takes the message's bytes (no deserializer), as ModelInfer does."""
        state.raw.append(request)
        return bytes(request)

    async def marked(request: bytes, context: Context) -> bytes:
        state.marks.append(state.turn())
        return request

    async def reverse(request: bytes, context: Context) -> bytes:
        return request[::-1]

    async def delayed(request: bytes, context: Context) -> bytes:
        await asyncio.sleep(int(request) % 5 * 0.002)
        return b"reply to " + request

    async def big(request: bytes, context: Context) -> bytes:
        return b"x" * int(request)

    async def parts(request: memoryview, context: Context) -> list[Any]:
        """A reply in parts (as ModelInfer's): ``int(request)`` bytes of "x" in all, most of
        them one buffer that ``state.parts`` keeps, to tell whether it was copied."""
        size = int(bytes(request))
        data = bytearray(b"x" * (size - 7))
        state.parts.append(data)
        return [b"xx", memoryview(data), b"", b"xxxxx"]

    async def abort(request: bytes, context: Context) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "nö %")

    async def fail(request: bytes, context: Context) -> bytes:
        raise RuntimeError("handler bug")

    async def hang(request: bytes, context: Context) -> bytes:
        state.started.set()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            state.cancelled.set()
            raise
        return request

    async def held(request: bytes, context: Context) -> bytes:
        state.started.set()
        await state.release.wait()
        return request

    async def task_local(request: bytes, context: Context) -> bytes:
        state.tasks.append(asyncio.current_task())
        state.seen.append(MARK.get())
        MARK.set(request.decode())
        async with asyncio.timeout(1), asyncio.TaskGroup() as group:
            group.create_task(asyncio.sleep(0))
        return request

    async def stream(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        async for request in requests:
            yield b"echo " + request

    async def sink(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        state.started.set()
        await state.release.wait()
        async for request in requests:
            yield request

    async def fan_out(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        """As ModelStreamInfer: a Task per request, replies as they finish."""
        replies: asyncio.Queue[bytes | None] = asyncio.Queue()
        pending: set[asyncio.Task[None]] = set()

        async def answer(request: bytes) -> None:
            state.running += 1
            state.most_running = max(state.most_running, state.running)
            await state.release.wait()
            state.running -= 1
            replies.put_nowait(request)

        async def read() -> None:
            async for request in requests:
                task = asyncio.create_task(answer(request))
                pending.add(task)
                task.add_done_callback(pending.discard)
            await asyncio.gather(*pending)
            replies.put_nowait(None)

        reader = asyncio.create_task(read())
        while (reply := await replies.get()) is not None:
            yield reply
        await reader

    def unary(behaviour: Any) -> Any:
        return grpc.unary_unary_rpc_method_handler(
            behaviour, request_deserializer=bytes, response_serializer=bytes
        )

    def streaming(behaviour: Any) -> Any:
        return grpc.stream_stream_rpc_method_handler(
            behaviour, request_deserializer=bytes, response_serializer=bytes
        )

    return {
        "/test.Echo/Unary": unary(echo),
        "/test.Echo/Reverse": unary(reverse),
        "/test.Echo/Marked": unary(marked),
        "/test.Echo/Raw": grpc.unary_unary_rpc_method_handler(raw),
        "/test.Echo/Delayed": unary(delayed),
        "/test.Echo/Big": unary(big),
        "/test.Echo/Parts": grpc.unary_unary_rpc_method_handler(parts),
        "/test.Echo/Abort": unary(abort),
        "/test.Echo/Fail": unary(fail),
        "/test.Echo/Hang": unary(hang),
        "/test.Echo/Held": unary(held),
        "/test.Echo/TaskLocal": unary(task_local),
        "/test.Echo/Stream": streaming(stream),
        "/test.Echo/Sink": streaming(sink),
        "/test.Echo/FanOut": streaming(fan_out),
    }


# --- the client -----------------------------------------------------------------------------


@dataclass
class Reply:
    """Everything one stream received."""

    head: list[tuple[str, str]] | None = None
    trailers: list[tuple[str, str]] | None = None
    data: bytearray = field(default_factory=bytearray)
    data_sizes: list[int] = field(default_factory=list)
    reset: int | None = None
    ended: bool = False

    @property
    def done(self) -> bool:
        return self.ended or self.reset is not None

    def header(self, name: str) -> str | None:
        return dict(self.head or []).get(name)

    @property
    def status(self) -> int | None:
        """grpc-status, from the trailers or a trailers-only answer."""
        fields = dict(self.trailers if self.trailers is not None else self.head or [])
        value = fields.get("grpc-status")
        return None if value is None else int(value)

    @property
    def message(self) -> str | None:
        fields = dict(self.trailers if self.trailers is not None else self.head or [])
        value = fields.get("grpc-message")
        return None if value is None else urllib.parse.unquote(value, errors="strict")

    @property
    def messages(self) -> list[bytes]:
        out, rest = [], bytes(self.data)
        while rest:
            assert rest[0] == 0, "the server compressed a reply"
            length = int.from_bytes(rest[1:5], "big")
            assert len(rest) >= 5 + length, "a reply message was cut short"
            out.append(rest[5 : 5 + length])
            rest = rest[5 + length :]
        return out


def grpc_message(body: bytes, flag: int = 0) -> bytes:
    return bytes([flag]) + len(body).to_bytes(4, "big") + body


def raw_frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """A frame as bytes, whatever its content (for what hyperframe would not build)."""
    size = len(payload)
    return struct.pack(">HBBBL", size >> 8, size & 0xFF, kind, flags, stream_id) + payload


def _text(value: bytes | str) -> str:
    return value if isinstance(value, str) else value.decode("latin-1")


def request_fields(
    path: str,
    *,
    method: str = "POST",
    content_type: str = "application/grpc",
    metadata: Iterable[tuple[str, str]] = (),
) -> Fields:
    return [
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", content_type),
        ("te", "trailers"),
        *metadata,
    ]


class Client:
    """An h2 client connection; ``send_raw`` puts bytes on the wire past it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config)
        # No Huffman coding (hpack's is slow on long values; the server reads both alike).
        encode = self.h2.encoder.encode
        self.h2.encoder.encode = lambda headers, huffman=False: encode(headers, huffman=False)
        self.reader = reader
        self.writer = writer
        self.auto_window = True  # give back each DATA frame's bytes at once, as clients do
        self.replies: dict[int, Reply] = {}
        self.server_settings: dict[int, int] = {}
        self.acked = False
        self.pongs: list[bytes] = []
        self.terminated: h2.events.ConnectionTerminated | None = None
        self.eof = False

    @classmethod
    async def open(cls, port: int) -> Client:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT)
        return cls(reader, writer)

    @classmethod
    async def connect(cls, port: int, settings: dict[int, int] | None = None) -> Client:
        client = await cls.open(port)
        client.h2.initiate_connection()
        if settings:
            client.h2.update_settings(settings)
        client.flush()
        await client.wait(lambda: bool(client.server_settings) and client.acked)
        return client

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await asyncio.wait_for(self.writer.wait_closed(), TIMEOUT)

    # sending

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.writer.write(data)

    def send_raw(self, *chunks: bytes) -> None:
        self.flush()
        self.writer.write(b"".join(chunks))

    def block(self, fields: Fields) -> bytes:
        """A header block from the client's own encoder (so the server's table stays in step)."""
        block: bytes = self.h2.encoder.encode(fields)
        return block

    def request(
        self, path: str, message: bytes | None = b"", stream_id: int | None = None, **options: Any
    ) -> int:
        """Opens a stream with a request (one message and END_STREAM unless ``message`` is
        None, which leaves the stream open)."""
        if stream_id is None:
            stream_id = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream_id, request_fields(path, **options))
        if message is not None:
            self.h2.send_data(stream_id, grpc_message(message), end_stream=True)
        self.flush()
        return stream_id

    async def call(self, path: str, message: bytes = b"", **options: Any) -> Reply:
        return await self.reply(self.request(path, message, **options))

    # receiving

    async def pump(self, timeout: float = TIMEOUT) -> None:
        data = await asyncio.wait_for(self.reader.read(2**20), timeout)
        if not data:
            self.eof = True
            raise EOFError
        for event in self.h2.receive_data(data):
            self._file(event)
        self.flush()

    def _file(self, event: h2.events.Event) -> None:
        stream_id = getattr(event, "stream_id", 0)
        reply = self.replies.setdefault(stream_id, Reply()) if stream_id else None
        if isinstance(event, h2.events.RemoteSettingsChanged):
            self.server_settings.update(
                {int(k): v.new_value for k, v in event.changed_settings.items()}
            )
        elif isinstance(event, h2.events.SettingsAcknowledged):
            self.acked = True
        elif isinstance(event, h2.events.PingAckReceived):
            self.pongs.append(event.ping_data)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.terminated = event
        elif isinstance(event, h2.events.ResponseReceived):
            assert reply is not None
            reply.head = [(_text(n), _text(v)) for n, v in event.headers]
        elif isinstance(event, h2.events.TrailersReceived):
            assert reply is not None
            reply.trailers = [(_text(n), _text(v)) for n, v in event.headers]
        elif isinstance(event, h2.events.DataReceived):
            assert reply is not None and reply.head is not None
            reply.data += event.data
            reply.data_sizes.append(len(event.data))
            if self.auto_window and event.flow_controlled_length:
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            assert reply is not None
            reply.ended = True
        elif isinstance(event, h2.events.StreamReset):
            assert reply is not None
            reply.reset = event.error_code

    async def wait(self, condition: Callable[[], bool]) -> None:
        async def run() -> None:
            while not condition():
                await self.pump()

        await asyncio.wait_for(run(), TIMEOUT)

    async def reply(self, stream_id: int) -> Reply:
        reply = self.replies.setdefault(stream_id, Reply())
        await self.wait(lambda: reply.done)
        return reply

    async def until(self, stream_id: int, count: int) -> Reply:
        """The stream's reply once ``count`` bytes of DATA arrived."""
        reply = self.replies.setdefault(stream_id, Reply())

        def arrived() -> bool:
            assert len(reply.data) >= count or not reply.done, "the stream ended early"
            return len(reply.data) >= count

        await self.wait(arrived)
        return reply

    async def quiet(self, seconds: float = 0.05) -> None:
        """Asserts that nothing arrives for a while (the server is waiting on us)."""
        with pytest.raises(TimeoutError):
            await self.pump(seconds)

    async def raw_frames_until_closed(self) -> list[Frame]:
        """Every frame up to the end of the connection, read past the h2 client (whose view
        of the connection a hand-written violation has left behind)."""

        async def run() -> list[Frame]:
            data = b""
            with contextlib.suppress(ConnectionResetError):  # after the GOAWAY, if any
                while chunk := await self.reader.read(2**20):
                    data += chunk
            return parse_frames(data)

        return await asyncio.wait_for(run(), TIMEOUT)

    async def raw_frames(self, quiet: float = 0.3) -> list[Frame]:
        """The frames that arrive until the connection ends or nothing comes for ``quiet``
        seconds (read past the h2 client)."""
        data = b""
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := await asyncio.wait_for(self.reader.read(2**20), quiet):
                data += chunk
        return parse_frames(data)

    async def goaway_code(self) -> int:
        """The error code of the server's GOAWAY, once the connection ended."""
        goaways = [f for f in await self.raw_frames_until_closed() if isinstance(f, GoAwayFrame)]
        assert goaways, "no GOAWAY"
        code: int = goaways[-1].error_code
        return code


def hpack_integer(value: int, prefix_bits: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out = bytearray([limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes) -> bytes:
    """A header field as 'literal without indexing, new name', no Huffman (RFC 7541 6.2.2):
    quick to build however long, and leaving the table as it was."""
    return b"\x00" + hpack_integer(len(name), 7) + name + hpack_integer(len(value), 7) + value


def parse_frames(data: bytes) -> list[Frame]:
    frames: list[Frame] = []
    view = memoryview(data)
    while len(view) >= 9:
        frame, length = Frame.parse_frame_header(view[:9])
        assert len(view) >= 9 + length, "the connection ended inside a frame"
        frame.parse_body(view[9 : 9 + length])
        frames.append(frame)
        view = view[9 + length :]
    assert not view, "the connection ended inside a frame header"
    return frames


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def state() -> State:
    return State()


@pytest.fixture
def limits() -> Limits:
    return LIMITS


@pytest.fixture
async def server(state: State, limits: Limits) -> AsyncIterator[NativeGrpcServer]:
    server = NativeGrpcServer(servicer(state), MAX_MESSAGE, limits)
    await server.start("127.0.0.1", 0)
    yield server
    await server.stop(0)


@pytest.fixture
async def client(server: NativeGrpcServer) -> AsyncIterator[Client]:
    client = await Client.connect(server.port)
    yield client
    await client.close()


async def wait_for_event(event: asyncio.Event) -> None:
    await asyncio.wait_for(event.wait(), TIMEOUT)


def with_limits(**changes: Any) -> Any:
    """Runs a test against a server with other limits."""
    return pytest.mark.parametrize("limits", [replace(LIMITS, **changes)])


# --- connection setup -----------------------------------------------------------------------


async def test_settings_are_advertised_and_acknowledged(client: Client) -> None:
    assert client.server_settings == {
        SettingCodes.ENABLE_PUSH: 0,
        SettingCodes.MAX_CONCURRENT_STREAMS: 1024,
        SettingCodes.INITIAL_WINDOW_SIZE: 8 * 2**20,
        SettingCodes.MAX_FRAME_SIZE: 2**20,
        SettingCodes.MAX_HEADER_LIST_SIZE: 64 * 1024,
    }
    assert client.h2.outbound_flow_control_window == 64 * 2**20
    await client.quiet()
    client.h2.update_settings({SettingCodes.MAX_FRAME_SIZE: 32_768})
    client.flush()
    client.acked = False
    await client.wait(lambda: client.acked)
    assert (await client.call("/test.Echo/Unary", b"still fine")).messages == [b"still fine"]


async def test_ping_is_answered_with_the_same_bytes(client: Client) -> None:
    client.h2.ping(b"\x01\x02\x03\x04\x05\x06\x07\x08")
    client.flush()
    await client.wait(lambda: bool(client.pongs))
    assert client.pongs == [b"\x01\x02\x03\x04\x05\x06\x07\x08"]
    client.send_raw(PingFrame(0, opaque_data=b"ackedack", flags=["ACK"]).serialize())
    await client.quiet()  # an ACK is not answered


async def test_a_bad_preface_ends_the_connection_with_goaway(server: NativeGrpcServer) -> None:
    client = await Client.open(server.port)
    try:
        client.send_raw(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert await client.goaway_code() == ErrorCodes.PROTOCOL_ERROR
    finally:
        await client.close()


async def test_a_fault_of_ours_ends_only_its_connection(
    server: NativeGrpcServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception while handling frames: GOAWAY INTERNAL_ERROR on that connection;
    the server keeps serving new ones. (The fault is raised by the method table, looked up
    while the call's HEADERS frame is handled: the connection's own code is compiled, and a
    compiled method cannot be replaced from outside.)"""

    class Faulty(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            if key == "/test.Echo/Fault":
                raise RuntimeError("bug")
            return super().get(key, default)

    monkeypatch.setattr(server, "_methods", Faulty(server._methods))
    client = await Client.connect(server.port)
    try:
        client.request("/test.Echo/Fault", b"boom")
        client.flush()
        assert await client.goaway_code() == ErrorCodes.INTERNAL_ERROR
    finally:
        await client.close()
    again = await Client.connect(server.port)
    try:
        assert (await again.call("/test.Echo/Unary", b"still")).messages == [b"still"]
    finally:
        await again.close()


@with_limits(handshake_timeout=0.2)
async def test_a_connection_without_a_handshake_is_closed(server: NativeGrpcServer) -> None:
    loop = asyncio.get_running_loop()
    for opening in (b"", PREFACE[:10], PREFACE):  # nothing, part of the preface, no SETTINGS
        client = await Client.open(server.port)
        try:
            began = loop.time()
            client.send_raw(opening)
            assert await client.goaway_code() == ErrorCodes.PROTOCOL_ERROR
            assert loop.time() - began < 2.0
        finally:
            await client.close()


@with_limits(idle_timeout=0.3)
async def test_an_idle_connection_gets_goaway_and_is_closed(client: Client) -> None:
    assert (await client.call("/test.Echo/Unary", b"one")).messages == [b"one"]
    await client.wait(lambda: client.terminated is not None)
    assert client.terminated is not None
    assert client.terminated.error_code == ErrorCodes.NO_ERROR
    assert client.terminated.last_stream_id == 1
    with pytest.raises(EOFError):
        await client.wait(lambda: False)


@with_limits(idle_timeout=0.3)
async def test_a_connection_with_a_call_in_progress_is_not_idle(
    client: Client, state: State
) -> None:
    stream_id = client.request("/test.Echo/Held", b"long")
    await wait_for_event(state.started)
    await asyncio.sleep(0.6)
    state.release.set()
    reply = await client.reply(stream_id)
    assert reply.messages == [b"long"]
    assert client.terminated is None


# --- calls ----------------------------------------------------------------------------------


async def test_unary_echo(client: Client) -> None:
    reply = await client.call("/test.Echo/Unary", b"hello")
    assert reply.header(":status") == "200"
    assert reply.header("content-type") == "application/grpc"
    assert bytes(reply.data) == grpc_message(b"hello")
    assert reply.data_sizes == [10]
    assert reply.trailers == [("grpc-status", "0")]
    assert reply.ended and reply.reset is None


async def test_a_call_runs_in_its_own_task_and_context(client: Client, state: State) -> None:
    """asyncio.timeout and TaskGroup work in a method; a ContextVar one call sets is not seen
    by the next, on the same connection or another."""
    first = await client.call("/test.Echo/TaskLocal", b"first")
    second = await client.call("/test.Echo/TaskLocal", b"second")
    assert (first.status, second.status) == (0, 0)
    assert state.seen == ["unset", "unset"]
    assert all(task is not None for task in state.tasks)
    assert state.tasks[0] is not state.tasks[1]


async def test_a_method_without_a_deserializer_gets_the_calls_own_buffer(
    client: Client, state: State
) -> None:
    """Not a copy: a writable view of the message as it was received, past its 5-byte prefix,
    into a buffer of its own per call."""
    first = await client.call("/test.Echo/Raw", b"tensor bytes")
    second = await client.call("/test.Echo/Raw", b"more")
    assert (first.messages, second.messages) == ([b"tensor bytes"], [b"more"])
    assert [bytes(view) for view in state.raw] == [b"tensor bytes", b"more"]
    assert [bytes(view.obj) for view in state.raw] == [  # (the buffer the frames filled)
        grpc_message(b"tensor bytes"),
        grpc_message(b"more"),
    ]
    assert all(isinstance(view, memoryview) and not view.readonly for view in state.raw)
    assert state.raw[0].obj is not state.raw[1].obj


async def test_a_unary_call_takes_exactly_one_message(client: Client) -> None:
    """None (END_STREAM on the headers) or two are refused; the connection goes on."""
    none = client.h2.get_next_available_stream_id()
    client.h2.send_headers(none, request_fields("/test.Echo/Unary"), end_stream=True)
    client.flush()
    refused = await client.reply(none)
    assert refused.status == grpc.StatusCode.UNIMPLEMENTED.value[0]
    assert refused.message == "a unary call takes one request message, none came"
    two = client.request("/test.Echo/Unary", None)
    client.h2.send_data(two, grpc_message(b"a") + grpc_message(b"b"), end_stream=True)
    client.flush()
    assert (await client.reply(two)).status == grpc.StatusCode.UNIMPLEMENTED.value[0]
    assert (await client.call("/test.Echo/Unary", b"after")).messages == [b"after"]


async def test_an_empty_message_is_a_message(client: Client) -> None:
    reply = await client.call("/test.Echo/Unary", b"")
    assert (reply.status, reply.messages) == (0, [b""])


async def test_metadata_reaches_the_handler(client: Client, state: State) -> None:
    """Transport headers are not metadata; binary metadata arrives decoded."""
    binary = b"\x00\x01\xfe\xff"
    metadata = [
        ("x-user", "alice"),
        ("x-data-bin", base64.b64encode(binary).decode().rstrip("=")),
        ("grpc-timeout", "10S"),
    ]
    reply = await client.call("/test.Echo/Unary", b"m", metadata=metadata)
    assert reply.status == 0
    assert state.metadata == (("x-user", "alice"), ("x-data-bin", binary))
    assert state.peer.startswith("ipv4:127.0.0.1:")
    assert state.remaining is not None and 9.0 < state.remaining <= 10.0
    await client.call("/test.Echo/Unary", b"m")
    assert state.metadata == ()
    assert state.remaining is None


async def test_many_interleaved_calls_each_get_their_own_answer(client: Client) -> None:
    streams = {client.request("/test.Echo/Delayed", str(i).encode()): i for i in range(50)}
    for stream_id, i in streams.items():
        reply = await client.reply(stream_id)
        assert reply.status == 0
        assert reply.messages == [f"reply to {i}".encode()]


def record_writes(
    server: NativeGrpcServer, monkeypatch: pytest.MonkeyPatch, entry: Callable[[bytes], T]
) -> list[T]:
    """What ``entry`` makes of each write of the server's one connection, in order."""
    (connection,) = server._connections
    assert connection._transport is not None
    transport = connection._transport
    original = transport.write
    writes: list[T] = []

    def recorded(data: Any) -> None:
        writes.append(entry(bytes(data)))
        original(data)

    monkeypatch.setattr(transport, "write", recorded)
    return writes


async def test_answers_ready_together_leave_in_one_write(
    server: NativeGrpcServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await Client.connect(server.port)
    try:
        writes = record_writes(server, monkeypatch, len)
        streams = [client.request("/test.Echo/Unary", str(i).encode()) for i in range(20)]
        for stream_id in streams:
            assert (await client.reply(stream_id)).status == 0
        assert len(writes) <= 3  # the answers of one read go out together
    finally:
        await client.close()


async def test_a_lone_calls_answer_leaves_in_the_turn_it_is_ready(
    server: NativeGrpcServer, state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no other call open on its connection nothing could join the write: the answer
    (headers, message, trailers) goes out at once in one write, not a turn of the loop later."""
    loop = asyncio.get_running_loop()
    turns = 0

    def tick() -> None:
        nonlocal turns
        turns += 1
        ticker[0] = loop.call_soon(tick)

    ticker = [loop.call_soon(tick)]
    state.turn = lambda: turns
    client = await Client.connect(server.port)
    try:
        writes = record_writes(server, monkeypatch, lambda data: (turns, data))
        for i in range(3):
            writes.clear()
            message = b"lone %d" % i
            reply = await client.call("/test.Echo/Marked", message)
            assert (reply.status, reply.messages) == (0, [message])
            (answer,) = [(turn, data) for turn, data in writes if grpc_message(message) in data]
            kinds = [type(frame).__name__ for frame in parse_frames(answer[1])]
            assert kinds[-3:] == ["HeadersFrame", "DataFrame", "HeadersFrame"]
            assert answer[0] == state.marks[-1]
    finally:
        ticker[0].cancel()
        await client.close()


@pytest.mark.parametrize("method", ["/test.Echo/Big", "/test.Echo/Parts"])
async def test_a_reply_waits_for_the_clients_windows(server: NativeGrpcServer, method: str) -> None:
    """The reply goes out only as far as the stream and connection windows allow, in frames no
    larger than the client's maximum (a reply in parts as one in one piece)."""
    client = await Client.connect(server.port, {SettingCodes.INITIAL_WINDOW_SIZE: 1000})
    client.auto_window = False
    try:
        size = 100_000
        stream_id = client.request(method, str(size).encode())
        reply = await client.until(stream_id, 1000)
        await client.quiet()
        assert len(reply.data) == 1000 and not reply.done
        client.h2.increment_flow_control_window(10 * size, stream_id)
        client.flush()
        reply = await client.until(stream_id, 65_535)
        await client.quiet()
        assert len(reply.data) == 65_535 and not reply.done
        client.h2.increment_flow_control_window(size)
        client.flush()
        reply = await client.reply(stream_id)
        assert reply.status == 0
        assert reply.messages == [b"x" * size]
        assert max(reply.data_sizes) <= 16_384
    finally:
        await client.close()


async def test_a_large_reply_in_parts_is_written_from_its_own_buffers(
    server: NativeGrpcServer, state: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A method's reply given as parts reaches the client as one message, in DATA frames that
    the parts share, and its large buffer goes to the socket
    as it is: the pieces written are views of it, not a copy."""
    window = 1 << 20  # room for the whole reply at once, as a real client's windows give
    client = await Client.connect(server.port, {SettingCodes.INITIAL_WINDOW_SIZE: window})
    client.h2.increment_flow_control_window(window)
    client.flush()
    try:
        (connection,) = server._connections
        transport = connection._transport
        assert transport is not None
        original = transport.writelines
        gathered: list[list[Any]] = []

        def recorded(pieces: Any) -> None:
            gathered.append(list(pieces))
            original(pieces)

        monkeypatch.setattr(transport, "writelines", recorded)
        size = 300_000
        reply = await client.call("/test.Echo/Parts", str(size).encode())
        assert (reply.status, reply.messages) == (0, [b"x" * size])
        # The prefix, the first part and the start of the buffer share the first frame.
        assert reply.data_sizes[0] == 16_384 and sum(reply.data_sizes) == size + 5
        (source,) = state.parts
        views = [
            p
            for pieces in gathered
            for p in pieces
            if isinstance(p, memoryview) and p.obj is source
        ]
        assert sum(len(v) for v in views) == len(source)
    finally:
        await client.close()


async def test_a_small_reply_in_parts_is_one_data_frame(
    server: NativeGrpcServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short reply in parts is joined: on the wire it is what the same bytes in one piece
    make (one DATA frame, one write)."""
    client = await Client.connect(server.port)
    try:
        writes = record_writes(server, monkeypatch, parse_frames)
        reply = await client.call("/test.Echo/Parts", b"1000")
        assert (reply.status, reply.messages) == (0, [b"x" * 1000])
        assert reply.data_sizes == [1005]
        kinds = [type(frame).__name__ for frame in writes[-1]]
        assert kinds[-3:] == ["HeadersFrame", "DataFrame", "HeadersFrame"]
    finally:
        await client.close()


async def test_a_larger_max_frame_size_is_used(server: NativeGrpcServer) -> None:
    client = await Client.connect(server.port, {SettingCodes.MAX_FRAME_SIZE: 40_000})
    try:
        reply = await client.call("/test.Echo/Big", b"50000")  # within the default windows
        assert reply.messages == [b"x" * 50_000]
        assert max(reply.data_sizes) == 40_000
    finally:
        await client.close()


async def test_a_request_split_across_many_data_frames(client: Client) -> None:
    message = bytes(range(256)) * 4
    stream_id = client.request("/test.Echo/Unary", None)
    framed = grpc_message(message)
    for i in range(0, len(framed), 3):
        client.h2.send_data(stream_id, framed[i : i + 3])
    client.h2.send_data(stream_id, b"", end_stream=True)
    client.flush()
    reply = await client.reply(stream_id)
    assert (reply.status, reply.messages) == (0, [message])


async def test_a_request_arriving_byte_by_byte(client: Client) -> None:
    message = b"one byte at a time"
    stream_id = client.h2.get_next_available_stream_id()
    client.h2.send_headers(stream_id, request_fields("/test.Echo/Unary"))
    client.h2.send_data(stream_id, grpc_message(message), end_stream=True)
    wire = client.h2.data_to_send()
    for i in range(len(wire)):
        client.writer.write(wire[i : i + 1])
        await client.writer.drain()
        await asyncio.sleep(0)
    reply = await client.reply(stream_id)
    assert (reply.status, reply.messages) == (0, [message])


async def test_padded_and_prioritised_frames(client: Client) -> None:
    stream_id = client.h2.get_next_available_stream_id()
    client.h2.send_headers(stream_id, request_fields("/test.Echo/Unary"), priority_weight=16)
    client.h2.prioritize(stream_id, weight=32)
    client.h2.send_data(stream_id, grpc_message(b"padded"), end_stream=True, pad_length=7)
    client.flush()
    reply = await client.reply(stream_id)
    assert (reply.status, reply.messages) == (0, [b"padded"])


async def test_a_header_block_in_headers_and_continuation_frames(client: Client) -> None:
    stream_id = client.h2.get_next_available_stream_id()
    block = client.block(request_fields("/test.Echo/Unary", metadata=[("x-user", "bob" * 20)]))
    third = len(block) // 3
    client.send_raw(
        HeadersFrame(stream_id, data=block[:third]).serialize(),
        ContinuationFrame(stream_id, data=block[third : 2 * third]).serialize(),
        ContinuationFrame(stream_id, data=block[2 * third :], flags=["END_HEADERS"]).serialize(),
        raw_frame(0, 1, stream_id, grpc_message(b"continued")),
    )
    data = await asyncio.wait_for(client.reader.read(2**16), TIMEOUT)
    frames = parse_frames(data)
    assert [type(f).__name__ for f in frames] == ["HeadersFrame", "DataFrame", "HeadersFrame"]
    assert frames[1].data == grpc_message(b"continued")


# --- compression ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress)],
)
async def test_a_compressed_request_is_decompressed(
    client: Client, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    message = b"squeeze me " * 100
    stream_id = client.request("/test.Echo/Unary", None, metadata=[("grpc-encoding", encoding)])
    client.h2.send_data(stream_id, grpc_message(compress(message), flag=1), end_stream=True)
    client.flush()
    reply = await client.reply(stream_id)
    assert (reply.status, reply.messages) == (0, [message])


async def test_an_unknown_encoding_is_unimplemented(client: Client) -> None:
    stream_id = client.request("/test.Echo/Unary", None, metadata=[("grpc-encoding", "snappy")])
    client.h2.send_data(stream_id, grpc_message(b"whatever", flag=1), end_stream=True)
    client.flush()
    reply = await client.reply(stream_id)
    assert reply.status == grpc.StatusCode.UNIMPLEMENTED.value[0]
    assert reply.message is not None and "snappy" in reply.message


async def test_a_compressed_message_without_an_encoding_is_internal(client: Client) -> None:
    stream_id = client.request("/test.Echo/Unary", None)
    client.h2.send_data(stream_id, grpc_message(gzip.compress(b"x"), flag=1), end_stream=True)
    client.flush()
    assert (await client.reply(stream_id)).status == grpc.StatusCode.INTERNAL.value[0]


async def test_a_message_that_inflates_above_the_limit_is_resource_exhausted(
    client: Client,
) -> None:
    stream_id = client.request("/test.Echo/Unary", None, metadata=[("grpc-encoding", "gzip")])
    bomb = gzip.compress(b"\x00" * (MAX_MESSAGE + 1))
    client.h2.send_data(stream_id, grpc_message(bomb, flag=1), end_stream=True)
    client.flush()
    assert (await client.reply(stream_id)).status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


async def test_a_streamed_message_that_inflates_above_the_limit_ends_the_call(
    client: Client,
) -> None:
    stream_id = client.request("/test.Echo/Stream", None, metadata=[("grpc-encoding", "gzip")])
    client.h2.send_data(stream_id, grpc_message(gzip.compress(b"ok"), flag=1))
    bomb = gzip.compress(b"\x00" * (MAX_MESSAGE + 1))
    client.h2.send_data(stream_id, grpc_message(bomb, flag=1))
    client.flush()
    reply = await client.reply(stream_id)
    assert reply.messages == [b"echo ok"]
    assert reply.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert (await client.call("/test.Echo/Unary", b"next")).messages == [b"next"]


# --- errors ---------------------------------------------------------------------------------


async def test_an_unknown_method_is_unimplemented(client: Client) -> None:
    reply = await client.call("/test.Echo/Nothing", b"?")
    assert reply.trailers is None and not reply.data  # trailers-only
    assert reply.header(":status") == "200"
    assert reply.status == grpc.StatusCode.UNIMPLEMENTED.value[0]


async def test_get_is_405(client: Client) -> None:
    stream_id = client.h2.get_next_available_stream_id()
    client.h2.send_headers(
        stream_id, request_fields("/test.Echo/Unary", method="GET"), end_stream=True
    )
    client.flush()
    reply = await client.reply(stream_id)
    assert reply.head == [(":status", "405")]
    assert reply.ended


async def test_a_non_grpc_content_type_is_415(client: Client) -> None:
    reply = await client.call("/test.Echo/Unary", b"hi", content_type="text/plain")
    assert reply.head == [(":status", "415")]
    assert reply.ended


async def test_a_message_above_the_limit_is_resource_exhausted(client: Client) -> None:
    reply = await client.call("/test.Echo/Unary", b"x" * (MAX_MESSAGE + 1))
    assert reply.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    big = await client.call("/test.Echo/Unary", b"x" * MAX_MESSAGE)
    assert big.messages == [b"x" * MAX_MESSAGE]


async def test_abort_sends_its_status_and_percent_encoded_message(client: Client) -> None:
    reply = await client.call("/test.Echo/Abort", b"")
    assert reply.status == grpc.StatusCode.NOT_FOUND.value[0]
    assert reply.header("grpc-message") == "n%C3%B6 %25"
    assert reply.message == "nö %"


async def test_a_handler_that_raises_is_unknown_and_the_connection_goes_on(
    client: Client,
) -> None:
    reply = await client.call("/test.Echo/Fail", b"")
    assert reply.status == grpc.StatusCode.UNKNOWN.value[0]
    assert reply.message is not None and "handler bug" in reply.message
    assert (await client.call("/test.Echo/Unary", b"after")).messages == [b"after"]


async def test_a_deadline_ends_the_call_and_cancels_the_handler(
    client: Client, state: State
) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    reply = await client.call("/test.Echo/Hang", b"", metadata=[("grpc-timeout", "50m")])
    assert reply.status == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert 0.04 <= loop.time() - began < 0.5
    await wait_for_event(state.cancelled)


async def test_a_malformed_timeout_is_refused(client: Client) -> None:
    reply = await client.call("/test.Echo/Unary", b"", metadata=[("grpc-timeout", "soon")])
    assert reply.status == grpc.StatusCode.INTERNAL.value[0]
    assert (await client.call("/test.Echo/Unary", b"next")).messages == [b"next"]


# --- cancellation ---------------------------------------------------------------------------


async def test_rst_stream_cancels_the_running_handler(client: Client, state: State) -> None:
    stream_id = client.request("/test.Echo/Hang", b"")
    await wait_for_event(state.started)
    await asyncio.sleep(0.01)
    client.h2.reset_stream(stream_id, ErrorCodes.CANCEL)
    client.flush()
    await wait_for_event(state.cancelled)
    assert (await client.call("/test.Echo/Unary", b"next")).messages == [b"next"]
    assert client.replies.get(stream_id, Reply()).head is None


async def test_rst_stream_in_the_same_read_as_the_request_cancels_the_handler(
    client: Client, state: State
) -> None:
    stream_id = client.h2.get_next_available_stream_id()
    client.h2.send_headers(stream_id, request_fields("/test.Echo/Hang"))
    client.h2.send_data(stream_id, grpc_message(b""), end_stream=True)
    client.h2.reset_stream(stream_id, ErrorCodes.CANCEL)
    client.flush()
    # The Task was created, not started; it is cancelled before its first step or at it.
    await asyncio.sleep(0.05)
    assert (await client.call("/test.Echo/Unary", b"next")).messages == [b"next"]
    assert not state.started.is_set() or state.cancelled.is_set()


async def test_losing_the_connection_cancels_the_running_handler(
    server: NativeGrpcServer, state: State
) -> None:
    client = await Client.connect(server.port)
    client.request("/test.Echo/Hang", b"")
    await wait_for_event(state.started)
    await client.close()
    await wait_for_event(state.cancelled)


# --- streaming ------------------------------------------------------------------------------


async def test_a_bidirectional_stream_answers_each_request_as_it_comes(client: Client) -> None:
    stream_id = client.request("/test.Echo/Stream", None)
    expected = bytearray()
    for word in (b"one", b"two", b"three"):
        client.h2.send_data(stream_id, grpc_message(word))
        client.flush()
        expected += grpc_message(b"echo " + word)
        reply = await client.until(stream_id, len(expected))
        assert bytes(reply.data) == bytes(expected)
        assert not reply.done
    client.h2.end_stream(stream_id)
    client.flush()
    reply = await client.reply(stream_id)
    assert reply.messages == [b"echo one", b"echo two", b"echo three"]
    assert reply.status == 0
    assert reply.reset is None


@with_limits(max_unanswered=4)
async def test_a_stream_starts_no_more_work_than_its_bound(client: Client, state: State) -> None:
    """A method that starts a Task per request (as ModelStreamInfer does) gets no more than
    ``max_unanswered`` requests ahead of its answers, however many the client sends."""
    stream_id = client.request("/test.Echo/FanOut", None)
    for i in range(40):
        client.h2.send_data(stream_id, grpc_message(str(i).encode()))
    client.h2.end_stream(stream_id)
    client.flush()
    await asyncio.sleep(0.1)
    assert state.most_running == 4
    state.release.set()
    reply = await client.reply(stream_id)
    assert reply.status == 0
    assert sorted(reply.messages, key=int) == [str(i).encode() for i in range(40)]
    assert state.most_running == 4


@with_limits(stream_window=65_535)
async def test_a_stream_whose_method_falls_behind_holds_back_its_window(
    client: Client, state: State
) -> None:
    """The server stops giving the window back while the method does not read: the client
    can send no more than the window, and the rest once the method catches up."""
    stream_id = client.request("/test.Echo/Sink", None)
    await wait_for_event(state.started)
    message = grpc_message(b"x" * 1000)
    sent = 0
    for _ in range(200):
        if client.h2.local_flow_control_window(stream_id) < len(message):
            await client.quiet(0.1)  # and wait for a WINDOW_UPDATE that must not come
            if client.h2.local_flow_control_window(stream_id) < len(message):
                break
        client.h2.send_data(stream_id, message)
        client.flush()
        sent += 1
    assert 32 <= sent <= 100  # half the window was given back, then no more
    state.release.set()
    for _ in range(200 - sent):
        while client.h2.local_flow_control_window(stream_id) < len(message):
            await client.pump()
        client.h2.send_data(stream_id, message)
        client.flush()
    client.h2.end_stream(stream_id)
    client.flush()
    reply = await client.reply(stream_id)
    assert reply.status == 0 and len(reply.messages) == 200


# --- protocol errors ------------------------------------------------------------------------


def _settings(values: dict[int, int], flags: Iterable[str] = ()) -> bytes:
    payload = b"".join(struct.pack(">HL", k, v) for k, v in values.items())
    return raw_frame(0x4, 1 if "ACK" in flags else 0, 0, payload)


CONNECTION_ERRORS: dict[str, tuple[Callable[[Client], bytes], int]] = {
    "WINDOW_UPDATE overflowing the connection window": (
        lambda c: raw_frame(0x8, 0, 0, struct.pack(">L", 2**31 - 1)),
        ErrorCodes.FLOW_CONTROL_ERROR,
    ),
    "WINDOW_UPDATE of zero": (
        lambda c: raw_frame(0x8, 0, 0, struct.pack(">L", 0)),
        ErrorCodes.PROTOCOL_ERROR,
    ),
    "SETTINGS with a window above 2^31-1": (
        lambda c: _settings({0x4: 2**31}),
        ErrorCodes.FLOW_CONTROL_ERROR,
    ),
    "ENABLE_PUSH=2": (lambda c: _settings({0x2: 2}), ErrorCodes.PROTOCOL_ERROR),
    "SETTINGS ACK with a payload": (
        lambda c: _settings({0x4: 100}, ["ACK"]),
        ErrorCodes.FRAME_SIZE_ERROR,
    ),
    "SETTINGS of a bad length": (
        lambda c: raw_frame(0x4, 0, 0, b"\x00\x04\x00"),
        ErrorCodes.FRAME_SIZE_ERROR,
    ),
    "PRIORITY of a bad length": (
        lambda c: raw_frame(0x2, 0, 1, b"\x00\x00\x00\x00"),
        ErrorCodes.FRAME_SIZE_ERROR,
    ),
    "PING of a bad length": (lambda c: raw_frame(0x6, 0, 0, b"1234"), ErrorCodes.FRAME_SIZE_ERROR),
    "DATA on an idle stream": (
        lambda c: raw_frame(0x0, 1, 99, grpc_message(b"x")),
        ErrorCodes.PROTOCOL_ERROR,
    ),
    "WINDOW_UPDATE on an idle stream": (
        lambda c: WindowUpdateFrame(99, window_increment=10).serialize(),
        ErrorCodes.PROTOCOL_ERROR,
    ),
    "RST_STREAM on an idle stream": (
        lambda c: RstStreamFrame(99, error_code=8).serialize(),
        ErrorCodes.PROTOCOL_ERROR,
    ),
    "DATA on stream 0": (lambda c: raw_frame(0x0, 0, 0, b"x"), ErrorCodes.PROTOCOL_ERROR),
    "HEADERS on an even stream": (
        lambda c: HeadersFrame(
            2, data=c.block(request_fields("/test.Echo/Unary")), flags=["END_HEADERS"]
        ).serialize(),
        ErrorCodes.PROTOCOL_ERROR,
    ),
    "PUSH_PROMISE from a client": (
        lambda c: raw_frame(0x5, 0x4, 1, struct.pack(">L", 2)),
        ErrorCodes.PROTOCOL_ERROR,
    ),
    "a frame above MAX_FRAME_SIZE": (
        lambda c: struct.pack(">HBBBL", (2**20 + 1) >> 8, (2**20 + 1) & 0xFF, 0, 0, 1),
        ErrorCodes.FRAME_SIZE_ERROR,
    ),
    "CONTINUATION without HEADERS": (
        lambda c: ContinuationFrame(1, data=b"", flags=["END_HEADERS"]).serialize(),
        ErrorCodes.PROTOCOL_ERROR,
    ),
    "an undecodable header block": (
        lambda c: HeadersFrame(1, data=b"\xff\xff\xff\xff", flags=["END_HEADERS"]).serialize(),
        ErrorCodes.COMPRESSION_ERROR,
    ),
}


@pytest.mark.parametrize("case", list(CONNECTION_ERRORS))
async def test_protocol_violations_end_the_connection_with_their_error(
    client: Client, case: str
) -> None:
    build, code = CONNECTION_ERRORS[case]
    client.send_raw(build(client))
    assert await client.goaway_code() == code


async def test_settings_that_overflow_a_stream_window_end_the_connection(
    client: Client, state: State
) -> None:
    stream_id = client.request("/test.Echo/Held", b"")
    await wait_for_event(state.started)
    client.send_raw(
        WindowUpdateFrame(stream_id, window_increment=2**31 - 1 - 65_535).serialize(),
        _settings({0x4: 65_536}),
    )
    assert await client.goaway_code() == ErrorCodes.FLOW_CONTROL_ERROR


@with_limits(stream_window=65_535)
async def test_data_beyond_the_window_is_a_flow_control_error(client: Client, state: State) -> None:
    """20 frames of 16 KiB on a stream whose method does not read: past the window."""
    stream_id = client.request("/test.Echo/Sink", None)
    await wait_for_event(state.started)
    chunk = raw_frame(0x0, 0, stream_id, bytes(16_384))
    client.send_raw(chunk * 20)
    assert await client.goaway_code() == ErrorCodes.FLOW_CONTROL_ERROR


async def test_a_repeated_end_stream_does_not_run_the_call_again(
    client: Client, state: State
) -> None:
    """Trailing HEADERS after the request's END_STREAM: a stream error (ending the connection,
    as RFC 9113 section 5.4.1 allows); the call ran once."""
    stream_id = client.request("/test.Echo/Unary", b"once")
    assert (await client.reply(stream_id)).messages == [b"once"]
    trailers = client.block([("x-trailer", "again")])
    repeat = HeadersFrame(stream_id, data=trailers, flags=["END_HEADERS", "END_STREAM"])
    client.send_raw(repeat.serialize(), repeat.serialize())
    assert await client.goaway_code() == ErrorCodes.STREAM_CLOSED
    assert state.calls == 1


async def test_a_repeated_end_stream_while_the_call_runs_does_not_run_it_again(
    client: Client, state: State
) -> None:
    """While the call runs (the stream half-closed): RST_STREAM STREAM_CLOSED for that stream
    alone; the call is not started again, and the connection goes on."""
    stream_id = client.request("/test.Echo/Held", b"once")
    await wait_for_event(state.started)
    state.started.clear()
    trailers = client.block([("x-trailer", "again")])
    repeat = HeadersFrame(stream_id, data=trailers, flags=["END_HEADERS", "END_STREAM"])
    client.send_raw(repeat.serialize(), repeat.serialize())
    frames = await client.raw_frames()
    assert {(f.stream_id, f.error_code) for f in frames if isinstance(f, RstStreamFrame)} == {
        (stream_id, ErrorCodes.STREAM_CLOSED)
    }
    assert not any(isinstance(f, GoAwayFrame) for f in frames)
    state.release.set()
    await asyncio.sleep(0.05)
    assert not state.started.is_set()
    client.send_raw(PingFrame(0, opaque_data=b"stillhre").serialize())
    after = await client.raw_frames()
    assert [type(f).__name__ for f in after] == ["PingFrame"]  # and nothing for the old call


async def test_headers_on_a_lower_stream_id_end_the_connection(client: Client) -> None:
    assert (await client.call("/test.Echo/Unary", b"five", stream_id=5)).status == 0
    block = client.block(request_fields("/test.Echo/Unary"))
    client.send_raw(HeadersFrame(3, data=block, flags=["END_HEADERS"]).serialize())
    assert await client.goaway_code() == ErrorCodes.PROTOCOL_ERROR


async def test_data_on_a_closed_stream_is_refused(client: Client, state: State) -> None:
    stream_id = client.request("/test.Echo/Unary", b"done")
    await client.reply(stream_id)
    client.send_raw(raw_frame(0x0, 1, stream_id, grpc_message(b"late")))
    frames = await client.raw_frames()
    codes = {f.error_code for f in frames if isinstance(f, GoAwayFrame | RstStreamFrame)}
    assert codes & {ErrorCodes.STREAM_CLOSED}


async def test_closed_streams_are_remembered_up_to_a_bound_oldest_forgotten_first(
    server: NativeGrpcServer, client: Client
) -> None:
    """How each closed stream ended is kept for frames that come late, for the last
    ``_CLOSED_KEPT`` streams only: a peer that opens and closes streams without end cannot
    grow it."""
    stream_id = client.request("/test.Echo/Unary", b"done")
    await client.reply(stream_id)
    (connection,) = server._connections
    kept = h2_connection._CLOSED_KEPT
    closed = connection._closed_streams
    assert closed == {stream_id: h2_connection.ENDED}
    later = range(stream_id + 2, stream_id + 2 + 2 * (kept + 10), 2)
    for sid in later:
        connection._record(sid, h2_connection.RESET_BY_US)
    assert len(closed) == kept
    assert list(closed) == list(later)[10:]  # the 11 oldest went, in the order they closed
    assert list(connection._closed_order) == list(closed)
    connection._record(later[-1], h2_connection.ENDED)  # the first word on a stream stands
    assert closed[later[-1]] == h2_connection.RESET_BY_US and len(closed) == kept


async def test_headers_on_a_reset_stream_are_refused_and_the_connection_goes_on(
    client: Client, state: State
) -> None:
    stream_id = client.request("/test.Echo/Held", b"")
    await wait_for_event(state.started)
    client.h2.reset_stream(stream_id, ErrorCodes.CANCEL)
    client.flush()
    await asyncio.sleep(0.05)
    block = client.block(request_fields("/test.Echo/Unary"))
    client.send_raw(HeadersFrame(stream_id, data=block, flags=["END_HEADERS"]).serialize())
    resets = [f for f in await client.raw_frames() if isinstance(f, RstStreamFrame)]
    assert [(f.stream_id, f.error_code) for f in resets] == [(stream_id, ErrorCodes.STREAM_CLOSED)]
    # The connection lives (read on past the h2 client, whose stream state is now behind).
    client.send_raw(PingFrame(0, opaque_data=b"stillhre").serialize())
    assert any(isinstance(f, PingFrame) for f in await client.raw_frames())


# --- limits ---------------------------------------------------------------------------------


@with_limits(max_streams=8)
async def test_streams_beyond_the_limit_are_refused(client: Client, state: State) -> None:
    assert client.server_settings[SettingCodes.MAX_CONCURRENT_STREAMS] == 8
    held = [client.request("/test.Echo/Held", str(i).encode()) for i in range(8)]
    await wait_for_event(state.started)
    # The h2 client keeps to the limit the server advertised: let it go past.
    values = {k: client.h2.remote_settings[k] for k in client.h2.remote_settings}
    values[SettingCodes.MAX_CONCURRENT_STREAMS] = 2**31 - 1
    client.h2.remote_settings = h2.settings.Settings(client=False, initial_values=values)
    ninth = await client.reply(client.request("/test.Echo/Unary", b"nine"))
    assert ninth.reset == ErrorCodes.REFUSED_STREAM and ninth.head is None
    state.release.set()
    for stream_id in held:
        assert (await client.reply(stream_id)).status == 0
    assert (await client.call("/test.Echo/Unary", b"after")).messages == [b"after"]


async def test_metadata_above_the_advertised_limit_fails_only_its_call(client: Client) -> None:
    """Above SETTINGS_MAX_HEADER_LIST_SIZE (but within the hard limit): RESOURCE_EXHAUSTED for
    that call; the connection, its HPACK state and its other calls go on."""
    other = client.request("/test.Echo/Unary", None)
    big = [("x-big", "v" * 70_000)]
    stream_id = client.request("/test.Echo/Unary", b"too big", metadata=big)
    reply = await client.reply(stream_id)
    assert reply.header(":status") == "200"
    assert reply.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert reply.message is not None and "header list" in reply.message
    client.h2.send_data(other, grpc_message(b"other"), end_stream=True)
    client.flush()
    assert (await client.reply(other)).messages == [b"other"]
    again = await client.call("/test.Echo/Unary", b"fine", metadata=[("x-small", "v")])
    assert again.messages == [b"fine"]


async def test_a_header_block_above_the_hard_limit_ends_the_connection(client: Client) -> None:
    block = client.block(request_fields("/test.Echo/Unary")) + literal(b"x-huge", b"v" * 2**20)
    pieces = [block[i : i + 2**19] for i in range(0, len(block), 2**19)]
    frames = [HeadersFrame(1, data=pieces[0]).serialize()]
    frames += [ContinuationFrame(1, data=p).serialize() for p in pieces[1:-1]]
    frames.append(ContinuationFrame(1, data=pieces[-1], flags=["END_HEADERS"]).serialize())
    client.send_raw(*frames)
    assert await client.goaway_code() == ErrorCodes.ENHANCE_YOUR_CALM


async def test_a_continuation_flood_ends_the_connection(client: Client) -> None:
    block = client.block(request_fields("/test.Echo/Unary"))
    flood = [HeadersFrame(1, data=block).serialize()]
    flood += [ContinuationFrame(1, data=b"").serialize()] * 1000
    client.send_raw(*flood)
    assert await client.goaway_code() == ErrorCodes.ENHANCE_YOUR_CALM


async def test_a_ping_flood_ends_the_connection(client: Client) -> None:
    client.send_raw(PingFrame(0, opaque_data=b"flooding").serialize() * 5000)
    frames = await client.raw_frames_until_closed()
    pongs = [f for f in frames if isinstance(f, PingFrame)]
    assert len(pongs) <= LIMITS.flood_burst + 5  # cut at the frame that exhausted the budget
    assert [f.error_code for f in frames if isinstance(f, GoAwayFrame)] == [
        ErrorCodes.ENHANCE_YOUR_CALM
    ]


async def test_keepalive_pings_are_answered(client: Client) -> None:
    """A ping now and then (keepalive), and one after each response (BDP probes of busy
    clients), whatever their number, are fine."""
    for i in range(2 * LIMITS.flood_burst):
        assert (await client.call("/test.Echo/Unary", b"x")).status == 0
        client.h2.ping(i.to_bytes(8, "big"))
        client.flush()
    await client.wait(lambda: len(client.pongs) == 2 * LIMITS.flood_burst)
    for _ in range(5):
        client.h2.ping(b"keepaliv")
        client.flush()
        await asyncio.sleep(0.02)
    await client.wait(lambda: len(client.pongs) == 2 * LIMITS.flood_burst + 5)
    assert client.terminated is None


async def test_a_flood_of_empty_frames_ends_the_connection(client: Client) -> None:
    stream_id = client.request("/test.Echo/Stream", None)
    client.send_raw(raw_frame(0x0, 0, stream_id) * 5000)
    assert await client.goaway_code() == ErrorCodes.ENHANCE_YOUR_CALM


async def test_rapid_reset_ends_the_connection(client: Client) -> None:
    """Streams opened and reset at once (CVE-2023-44487)."""
    wire = bytearray()
    for stream_id in range(1, 2 * 1000, 2):
        block = client.block(request_fields("/test.Echo/Hang"))
        wire += HeadersFrame(stream_id, data=block, flags=["END_HEADERS"]).serialize()
        wire += RstStreamFrame(stream_id, error_code=8).serialize()
    client.send_raw(bytes(wire))
    assert await client.goaway_code() == ErrorCodes.ENHANCE_YOUR_CALM


@with_limits(max_streams=4)
async def test_refused_streams_count_as_resets(client: Client, state: State) -> None:
    for _ in range(4):
        client.request("/test.Echo/Held", b"")
    await wait_for_event(state.started)
    wire = b"".join(
        HeadersFrame(
            stream_id,
            data=client.block(request_fields("/test.Echo/Unary")),
            flags=["END_HEADERS", "END_STREAM"],
        ).serialize()
        for stream_id in range(9, 9 + 2 * 1000, 2)
    )
    client.send_raw(wire)
    assert await client.goaway_code() == ErrorCodes.ENHANCE_YOUR_CALM


# --- shutting down --------------------------------------------------------------------------


async def test_stop_with_grace_finishes_calls_in_flight_and_refuses_new_ones(
    server: NativeGrpcServer, client: Client, state: State
) -> None:
    port = server.port
    in_flight = client.request("/test.Echo/Held", b"in flight")
    await wait_for_event(state.started)
    stopping = asyncio.create_task(server.stop(5.0))
    await client.wait(lambda: client.terminated is not None)
    assert client.terminated is not None
    assert client.terminated.last_stream_id == in_flight
    assert client.terminated.error_code == ErrorCodes.NO_ERROR
    # The h2 client will not open streams after GOAWAY; write one past it.
    late = in_flight + 2
    block = client.block(request_fields("/test.Echo/Unary"))
    client.send_raw(HeadersFrame(late, data=block, flags=["END_HEADERS"]).serialize())
    refused = await client.raw_frames(0.2)
    resets = [(f.stream_id, f.error_code) for f in refused if isinstance(f, RstStreamFrame)]
    assert resets == [(late, ErrorCodes.REFUSED_STREAM)]
    assert not stopping.done()
    state.release.set()
    frames = await client.raw_frames_until_closed()
    await asyncio.wait_for(stopping, TIMEOUT)
    answered = [f for f in frames if f.stream_id == in_flight]
    assert [type(f).__name__ for f in answered] == ["HeadersFrame", "DataFrame", "HeadersFrame"]
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_stop_without_grace_cancels_calls_in_flight(
    server: NativeGrpcServer, client: Client, state: State
) -> None:
    stream_id = client.request("/test.Echo/Hang", b"")
    await wait_for_event(state.started)
    await asyncio.wait_for(server.stop(0), TIMEOUT)
    await wait_for_event(state.cancelled)
    frames = await client.raw_frames_until_closed()
    assert [type(f).__name__ for f in frames] == ["GoAwayFrame"]
    assert not client.replies.get(stream_id, Reply()).done
