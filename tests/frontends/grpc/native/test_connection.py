"""The native gRPC transport over a real socket, driven frame by frame by a minimal HTTP/2
client, so that each protocol rule is checked on the bytes a peer actually sees."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc
import hpack
import pytest

from ptserve.frontends.grpc.native import NativeGrpcServer, frames
from ptserve.frontends.grpc.native.calls import Context
from ptserve.frontends.grpc.native.connection import (
    CONNECTION_WINDOW,
    STREAM_WINDOW,
    Connection,
)

MAX_MESSAGE = 200_000
TIMEOUT = 2.0  # for any single wait: a bug fails the test instead of hanging it

Field = tuple[str, str] | tuple[str, str, bool]


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


def servicer(state: State) -> dict[str, Any]:
    async def echo(request: bytes, context: Context) -> bytes:
        state.metadata = context.invocation_metadata()
        state.peer = context.peer()
        state.remaining = context.time_remaining()
        return request

    async def reverse(request: bytes, context: Context) -> bytes:
        state.metadata = context.invocation_metadata()
        return request[::-1]

    async def delayed(request: bytes, context: Context) -> bytes:
        await asyncio.sleep(int(request) % 5 * 0.002)
        return b"reply to " + request

    async def big(request: bytes, context: Context) -> bytes:
        return b"x" * int(request)

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

    async def stream(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
        async for request in requests:
            yield b"echo " + request

    def unary(behaviour: Any) -> Any:
        return grpc.unary_unary_rpc_method_handler(
            behaviour, request_deserializer=bytes, response_serializer=bytes
        )

    return {
        "/test.Echo/Unary": unary(echo),
        "/test.Echo/Reverse": unary(reverse),
        "/test.Echo/Delayed": unary(delayed),
        "/test.Echo/Big": unary(big),
        "/test.Echo/Abort": unary(abort),
        "/test.Echo/Fail": unary(fail),
        "/test.Echo/Hang": unary(hang),
        "/test.Echo/Held": unary(held),
        "/test.Echo/Stream": grpc.stream_stream_rpc_method_handler(
            stream, request_deserializer=bytes, response_serializer=bytes
        ),
    }


# --- the client -----------------------------------------------------------------------------


@dataclass
class Frame:
    kind: int
    flags: int
    stream_id: int
    payload: bytes


@dataclass
class Reply:
    """Everything one stream received, in order."""

    head: list[tuple[str, str]] | None = None
    trailers: list[tuple[str, str]] | None = None
    data: bytearray = field(default_factory=bytearray)
    kinds: list[int] = field(default_factory=list)
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


def data(stream_id: int, payload: bytes, end: bool = True) -> bytes:
    return frames.frame(frames.DATA, frames.END_STREAM if end else 0, stream_id, payload)


def _text(value: bytes | str) -> str:
    return value if isinstance(value, str) else value.decode("latin-1")


class Client:
    """A bare HTTP/2 client: frames go out as the test builds them and are read one at a time,
    each stored with the stream it belongs to."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.auto_window = True  # give back each DATA frame's bytes at once, as clients do
        self.reader = reader
        self.writer = writer
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.replies: dict[int, Reply] = {}
        self.control: list[Frame] = []  # frames on stream 0, not yet looked at
        self.next_stream = 1
        self.settings: dict[int, int] = {}  # what the server advertised
        self.window_update = 0  # the server's first connection WINDOW_UPDATE
        self._continuing: tuple[int, int, bytearray] | None = None

    @classmethod
    async def connect(cls, port: int, settings: dict[int, int] | None = None) -> Client:
        """Preface and SETTINGS out; the server's SETTINGS, WINDOW_UPDATE and ACK in; ours out."""
        client = await cls.open(port)
        client.send(frames.PREFACE + frames.settings(settings or {}))
        server_settings = await client.read_frame()
        assert (server_settings.kind, server_settings.flags) == (frames.SETTINGS, 0)
        client.settings = dict(frames.parse_settings(server_settings.payload))
        update = await client.read_frame()
        assert (update.kind, update.stream_id) == (frames.WINDOW_UPDATE, 0)
        client.window_update = frames.parse_u32(update.payload)
        ack = await client.read_frame()
        assert (ack.kind, ack.flags, ack.payload) == (frames.SETTINGS, frames.ACK, b"")
        client.send(frames.frame(frames.SETTINGS, frames.ACK, 0))
        return client

    @classmethod
    async def open(cls, port: int) -> Client:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT)
        return cls(reader, writer)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await asyncio.wait_for(self.writer.wait_closed(), TIMEOUT)

    # sending

    def send(self, *chunks: bytes) -> None:
        self.writer.write(b"".join(chunks))

    def new_stream(self) -> int:
        stream_id = self.next_stream
        self.next_stream += 2
        return stream_id

    def block(self, fields: Iterable[Field]) -> bytes:
        return self.encoder.encode(list(fields))

    def headers(self, stream_id: int, fields: Iterable[Field], end: bool = False) -> bytes:
        flags = frames.END_HEADERS | (frames.END_STREAM if end else 0)
        return frames.frame(frames.HEADERS, flags, stream_id, self.block(fields))

    def request(self, path: str, message: bytes | None = b"", **options: Any) -> int:
        """Opens a stream with a request (one message and END_STREAM unless ``message`` is
        None, which leaves the stream open)."""
        stream_id = self.new_stream()
        head = self.headers(stream_id, request_fields(path, **options))
        if message is None:
            self.send(head)
        else:
            self.send(head, data(stream_id, grpc_message(message)))
        return stream_id

    async def call(self, path: str, message: bytes = b"", **options: Any) -> Reply:
        return await self.reply(self.request(path, message, **options))

    # receiving

    async def read_frame(self, timeout: float = TIMEOUT) -> Frame:
        head = await asyncio.wait_for(self.reader.readexactly(frames.HEADER_BYTES), timeout)
        length, kind, flags, stream_id = frames.parse_header(head, 0)
        payload = await asyncio.wait_for(self.reader.readexactly(length), timeout)
        return Frame(kind, flags, stream_id, payload)

    async def pump(self) -> Frame:
        """Reads one frame and files it."""
        frame = await self.read_frame()
        if frame.stream_id == 0:
            self.control.append(frame)
            return frame
        reply = self.replies.setdefault(frame.stream_id, Reply())
        reply.kinds.append(frame.kind)
        if frame.kind == frames.DATA:
            assert reply.head is not None, "DATA before the response headers"
            assert reply.trailers is None, "DATA after the trailers"
            reply.data += frame.payload
            reply.data_sizes.append(len(frame.payload))
            if self.auto_window and frame.payload:
                self.send(frames.window_update(0, len(frame.payload)))
                if not frame.flags & frames.END_STREAM:
                    self.send(frames.window_update(frame.stream_id, len(frame.payload)))
        elif frame.kind in (frames.HEADERS, frames.CONTINUATION):
            self._header_frame(reply, frame)
        elif frame.kind == frames.RST_STREAM:
            reply.reset = frames.parse_u32(frame.payload)
        if frame.kind in (frames.DATA, frames.HEADERS) and frame.flags & frames.END_STREAM:
            reply.ended = True
        return frame

    def _header_frame(self, reply: Reply, frame: Frame) -> None:
        if frame.kind == frames.HEADERS:
            assert self._continuing is None
            self._continuing = (frame.stream_id, frame.flags, bytearray())
        assert self._continuing is not None and self._continuing[0] == frame.stream_id
        self._continuing[2].extend(frame.payload)
        if not frame.flags & frames.END_HEADERS:
            return
        block = bytes(self._continuing[2])
        self._continuing = None
        fields = [(_text(n), _text(v)) for n, v in self.decoder.decode(block, raw=True)]
        if reply.head is None:
            reply.head = fields
        else:
            assert reply.trailers is None, "a third header block"
            reply.trailers = fields

    async def reply(self, stream_id: int) -> Reply:
        """The stream's reply once it ended (or was reset)."""

        async def wait() -> Reply:
            reply = self.replies.setdefault(stream_id, Reply())
            while not reply.done:
                await self.pump()
            return reply

        return await asyncio.wait_for(wait(), TIMEOUT)

    async def until(self, stream_id: int, count: int) -> Reply:
        """The stream's reply once ``count`` bytes of DATA arrived."""

        async def wait() -> Reply:
            reply = self.replies.setdefault(stream_id, Reply())
            while len(reply.data) < count:
                assert not reply.done, "the stream ended early"
                await self.pump()
            return reply

        return await asyncio.wait_for(wait(), TIMEOUT)

    async def control_frame(self, kind: int) -> Frame:
        """The next stream-0 frame of ``kind``, reading on as needed."""

        async def wait() -> Frame:
            while True:
                for frame in self.control:
                    if frame.kind == kind:
                        self.control.remove(frame)
                        return frame
                await self.pump()

        return await asyncio.wait_for(wait(), TIMEOUT)

    async def quiet(self, seconds: float = 0.05) -> None:
        """Asserts that nothing arrives for a while (the server is waiting on us)."""
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(self.reader.readexactly(1), seconds)

    async def frames_until_closed(self) -> list[Frame]:
        """Every frame up to the end of the connection."""

        async def wait() -> list[Frame]:
            seen = []
            while True:
                try:
                    seen.append(await self.pump())
                except asyncio.IncompleteReadError as exc:
                    assert exc.partial == b"", "the connection ended inside a frame"
                    return seen

        return await asyncio.wait_for(wait(), TIMEOUT)


def request_fields(
    path: str,
    *,
    method: str = "POST",
    content_type: str = "application/grpc",
    metadata: Iterable[Field] = (),
) -> list[Field]:
    return [
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", content_type),
        ("te", "trailers"),
        *metadata,
    ]


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def state() -> State:
    return State()


@pytest.fixture
async def server(state: State) -> AsyncIterator[NativeGrpcServer]:
    server = NativeGrpcServer(servicer(state), MAX_MESSAGE)
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


# --- connection setup -----------------------------------------------------------------------


async def test_settings_are_exchanged_and_acknowledged(client: Client) -> None:
    """What the server advertises decides how much a client may send before it waits."""
    assert client.settings == {
        frames.ENABLE_PUSH: 0,
        frames.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
        frames.MAX_FRAME_SIZE: frames.LARGEST_FRAME,
        frames.MAX_HEADER_LIST_SIZE: 64 * 1024,
    }
    assert client.window_update == CONNECTION_WINDOW - frames.DEFAULT_WINDOW
    # Our ACK of its SETTINGS needs no answer; new SETTINGS of ours get another ACK.
    await client.quiet()
    client.send(frames.settings({frames.MAX_FRAME_SIZE: 32_768}))
    ack = await client.control_frame(frames.SETTINGS)
    assert (ack.flags, ack.payload) == (frames.ACK, b"")
    assert (await client.call("/test.Echo/Unary", b"still fine")).messages == [b"still fine"]


async def test_ping_is_answered_with_the_same_bytes(client: Client) -> None:
    client.send(frames.frame(frames.PING, 0, 0, b"\x01\x02\x03\x04\x05\x06\x07\x08"))
    pong = await client.control_frame(frames.PING)
    assert (pong.flags, pong.payload) == (frames.ACK, b"\x01\x02\x03\x04\x05\x06\x07\x08")
    client.send(frames.frame(frames.PING, frames.ACK, 0, b"ackedack"))  # an ACK is not answered
    await client.quiet()


async def test_a_bad_preface_ends_the_connection_with_goaway(server: NativeGrpcServer) -> None:
    client = await Client.open(server.port)
    try:
        client.send(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        seen = await client.frames_until_closed()
    finally:
        await client.close()
    goaway = [f for f in seen if f.kind == frames.GOAWAY]
    assert len(goaway) == 1
    assert frames.parse_u32(goaway[0].payload[4:]) == frames.PROTOCOL_ERROR


async def test_a_fault_of_ours_ends_only_its_connection(
    server: NativeGrpcServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception while reading frames: GOAWAY INTERNAL_ERROR on that connection;
    the server keeps serving new ones."""
    original = Connection._frame

    def faulty(self: Connection, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == frames.PING:
            raise RuntimeError("bug")
        original(self, kind, flags, stream_id, payload)

    monkeypatch.setattr(Connection, "_frame", faulty)
    client = await Client.connect(server.port)
    try:
        client.send(frames.frame(frames.PING, 0, 0, bytes(8)))
        seen = await client.frames_until_closed()
    finally:
        await client.close()
    goaway = [f for f in seen if f.kind == frames.GOAWAY]
    assert len(goaway) == 1
    assert frames.parse_u32(goaway[0].payload[4:]) == frames.INTERNAL_ERROR
    again = await Client.connect(server.port)
    try:
        assert (await again.call("/test.Echo/Unary", b"still")).messages == [b"still"]
    finally:
        await again.close()


# --- unary calls ----------------------------------------------------------------------------


async def test_unary_echo(client: Client) -> None:
    reply = await client.call("/test.Echo/Unary", b"hello")
    assert reply.kinds == [frames.HEADERS, frames.DATA, frames.HEADERS]
    assert reply.header(":status") == "200"
    assert reply.header("content-type") == "application/grpc"
    assert bytes(reply.data) == grpc_message(b"hello")
    assert reply.data_sizes == [10]
    assert reply.trailers == [("grpc-status", "0")]
    assert reply.ended and reply.reset is None


async def test_a_unary_call_takes_exactly_one_message(client: Client) -> None:
    """None (END_STREAM on the headers) or two are refused; the connection goes on."""
    none = client.new_stream()
    client.send(client.headers(none, request_fields("/test.Echo/Unary"), end=True))
    refused = await client.reply(none)
    assert refused.status == grpc.StatusCode.UNIMPLEMENTED.value[0]
    assert refused.header("grpc-message") == "a unary call takes one request message, none came"
    two = client.new_stream()
    client.send(
        client.headers(two, request_fields("/test.Echo/Unary")),
        data(two, grpc_message(b"a") + grpc_message(b"b")),
    )
    assert (await client.reply(two)).status == grpc.StatusCode.UNIMPLEMENTED.value[0]
    assert (await client.call("/test.Echo/Unary", b"after")).messages == [b"after"]


async def test_an_empty_message_is_a_message(client: Client) -> None:
    reply = await client.call("/test.Echo/Unary", b"")
    assert (reply.status, reply.messages) == (0, [b""])


async def test_metadata_reaches_the_handler(client: Client, state: State) -> None:
    """Transport headers are not metadata; binary metadata arrives decoded."""
    binary = b"\x00\x01\xfe\xff"
    metadata: list[Field] = [
        ("x-user", "alice"),
        ("x-data-bin", base64.b64encode(binary).decode().rstrip("=")),
        ("grpc-timeout", "10S"),
    ]
    reply = await client.call("/test.Echo/Unary", b"m", metadata=metadata)
    assert reply.status == 0
    assert state.metadata == (("x-user", "alice"), ("x-data-bin", binary))
    assert state.peer.startswith("ipv4:127.0.0.1:")
    assert state.remaining is not None and 9.0 < state.remaining <= 10.0
    state.metadata = None
    await client.call("/test.Echo/Unary", b"m")
    assert state.metadata is not None and len(state.metadata) == 0
    assert state.remaining is None


async def test_many_interleaved_calls_each_get_their_own_answer(client: Client) -> None:
    streams = {client.request("/test.Echo/Delayed", str(i).encode()): i for i in range(50)}
    for stream_id, i in streams.items():
        reply = await client.reply(stream_id)
        assert reply.status == 0
        assert reply.messages == [f"reply to {i}".encode()]
    assert len(client.replies) == 50


async def test_a_reply_waits_for_the_clients_windows(server: NativeGrpcServer) -> None:
    """The reply goes out only as far as the stream and connection windows allow, in frames no
    larger than the default maximum."""
    client = await Client.connect(server.port, {frames.INITIAL_WINDOW_SIZE: 1000})
    client.auto_window = False
    try:
        size = 100_000
        stream_id = client.request("/test.Echo/Big", str(size).encode())
        reply = await client.until(stream_id, 1000)
        await client.quiet()
        assert len(reply.data) == 1000 and not reply.done
        client.send(frames.window_update(stream_id, 10 * size))
        reply = await client.until(stream_id, frames.DEFAULT_WINDOW)
        await client.quiet()
        assert len(reply.data) == frames.DEFAULT_WINDOW and not reply.done
        client.send(frames.window_update(0, size))
        reply = await client.reply(stream_id)
        assert reply.status == 0
        assert reply.messages == [b"x" * size]
        assert max(reply.data_sizes) <= frames.DEFAULT_MAX_FRAME
    finally:
        await client.close()


async def test_a_larger_max_frame_size_is_used(server: NativeGrpcServer) -> None:
    client = await Client.connect(server.port, {frames.MAX_FRAME_SIZE: 40_000})
    try:
        stream_id = client.request("/test.Echo/Big", b"50000")  # within the default windows
        reply = await client.reply(stream_id)
        assert reply.messages == [b"x" * 50_000]
        assert max(reply.data_sizes) == 40_000
    finally:
        await client.close()


async def test_a_request_split_across_many_data_frames(client: Client) -> None:
    message = bytes(range(256)) * 4
    stream_id = client.new_stream()
    framed = grpc_message(message)
    pieces = [framed[i : i + 3] for i in range(0, len(framed), 3)]
    client.send(
        client.headers(stream_id, request_fields("/test.Echo/Unary")),
        *(data(stream_id, piece, end=False) for piece in pieces),
        data(stream_id, b"", end=True),
    )
    reply = await client.reply(stream_id)
    assert (reply.status, reply.messages) == (0, [message])


async def test_a_request_arriving_byte_by_byte(client: Client) -> None:
    message = b"one byte at a time"
    stream_id = client.new_stream()
    framed = grpc_message(message)
    wire = client.headers(stream_id, request_fields("/test.Echo/Unary")) + b"".join(
        data(stream_id, framed[i : i + 7], end=i + 7 >= len(framed))
        for i in range(0, len(framed), 7)
    )
    for i in range(len(wire)):
        client.send(wire[i : i + 1])
        await client.writer.drain()
        await asyncio.sleep(0)
    reply = await client.reply(stream_id)
    assert (reply.status, reply.messages) == (0, [message])


async def test_padded_and_prioritised_frames(client: Client) -> None:
    stream_id = client.new_stream()
    block = client.block(request_fields("/test.Echo/Unary"))
    priority = b"\x00\x00\x00\x00\x10"  # depends on stream 0, weight 16
    head = frames.frame(
        frames.HEADERS,
        frames.END_HEADERS | frames.PADDED | frames.PRIORITY_FLAG,
        stream_id,
        b"\x03" + priority + block + b"\x00" * 3,
    )
    body = frames.frame(
        frames.DATA,
        frames.END_STREAM | frames.PADDED,
        stream_id,
        b"\x02" + grpc_message(b"padded") + b"\x00\x00",
    )
    client.send(head, frames.frame(frames.PRIORITY, 0, stream_id, priority), body)
    reply = await client.reply(stream_id)
    assert (reply.status, reply.messages) == (0, [b"padded"])


async def test_a_header_block_in_headers_and_continuation_frames(client: Client) -> None:
    stream_id = client.new_stream()
    block = client.block(request_fields("/test.Echo/Unary", metadata=[("x-user", "bob" * 20)]))
    third = len(block) // 3
    client.send(
        frames.frame(frames.HEADERS, 0, stream_id, block[:third]),
        frames.frame(frames.CONTINUATION, 0, stream_id, block[third : 2 * third]),
        frames.frame(frames.CONTINUATION, frames.END_HEADERS, stream_id, block[2 * third :]),
        data(stream_id, grpc_message(b"continued")),
    )
    reply = await client.reply(stream_id)
    assert (reply.status, reply.messages) == (0, [b"continued"])


# --- compression ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress)],
)
async def test_a_compressed_request_is_decompressed(
    client: Client, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    message = b"squeeze me " * 100
    stream_id = client.new_stream()
    fields = request_fields("/test.Echo/Unary", metadata=[("grpc-encoding", encoding)])
    client.send(
        client.headers(stream_id, fields),
        data(stream_id, grpc_message(compress(message), flag=1)),
    )
    reply = await client.reply(stream_id)
    assert (reply.status, reply.messages) == (0, [message])


async def test_an_unknown_encoding_is_unimplemented(client: Client) -> None:
    stream_id = client.new_stream()
    fields = request_fields("/test.Echo/Unary", metadata=[("grpc-encoding", "snappy")])
    client.send(
        client.headers(stream_id, fields), data(stream_id, grpc_message(b"whatever", flag=1))
    )
    reply = await client.reply(stream_id)
    assert reply.status == grpc.StatusCode.UNIMPLEMENTED.value[0]
    assert reply.message is not None and "snappy" in reply.message


async def test_a_compressed_message_without_an_encoding_is_internal(client: Client) -> None:
    stream_id = client.new_stream()
    client.send(
        client.headers(stream_id, request_fields("/test.Echo/Unary")),
        data(stream_id, grpc_message(gzip.compress(b"x"), flag=1)),
    )
    reply = await client.reply(stream_id)
    assert reply.status == grpc.StatusCode.INTERNAL.value[0]


# --- errors ---------------------------------------------------------------------------------


async def test_an_unknown_method_is_unimplemented(client: Client) -> None:
    reply = await client.call("/test.Echo/Nothing", b"?")
    assert reply.kinds == [frames.HEADERS]  # trailers-only
    assert reply.header(":status") == "200"
    assert reply.status == grpc.StatusCode.UNIMPLEMENTED.value[0]


async def test_get_is_405(client: Client) -> None:
    stream_id = client.new_stream()
    client.send(client.headers(stream_id, request_fields("/test.Echo/Unary", method="GET"), True))
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
    assert (await client.call("/test.Echo/Unary", b"x" * MAX_MESSAGE)).messages == [
        b"x" * MAX_MESSAGE
    ]


async def test_a_message_that_inflates_above_the_limit_is_resource_exhausted(
    client: Client,
) -> None:
    stream_id = client.new_stream()
    fields = request_fields("/test.Echo/Unary", metadata=[("grpc-encoding", "gzip")])
    client.send(
        client.headers(stream_id, fields),
        data(stream_id, grpc_message(gzip.compress(b"\x00" * (MAX_MESSAGE + 1)), flag=1)),
    )
    reply = await client.reply(stream_id)
    assert reply.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


async def test_abort_sends_its_status_and_percent_encoded_message(client: Client) -> None:
    reply = await client.call("/test.Echo/Abort", b"")
    assert reply.status == grpc.StatusCode.NOT_FOUND.value[0]
    raw = dict(reply.head or []).get("grpc-message")
    assert raw == "n%C3%B6 %25"
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


# --- cancellation -------------------------------------------------------------------------


async def test_rst_stream_cancels_the_running_handler(client: Client, state: State) -> None:
    stream_id = client.request("/test.Echo/Hang", b"")
    await wait_for_event(state.started)
    await asyncio.sleep(0.01)  # the handler is now suspended in its Task
    client.send(frames.rst_stream(stream_id, frames.CANCEL))
    await wait_for_event(state.cancelled)
    assert (await client.call("/test.Echo/Unary", b"next")).messages == [b"next"]
    assert client.replies.get(stream_id, Reply()).kinds == []


async def test_rst_stream_in_the_same_read_as_the_request_cancels_the_handler(
    client: Client, state: State
) -> None:
    """The handler starts at once and suspends; the reset right behind it must still reach it
    as a cancellation, not leave it waiting (or silently dropped)."""
    stream_id = client.new_stream()
    client.send(
        client.headers(stream_id, request_fields("/test.Echo/Hang")),
        data(stream_id, grpc_message(b"")),
        frames.rst_stream(stream_id, frames.CANCEL),
    )
    await wait_for_event(state.started)
    await wait_for_event(state.cancelled)
    assert (await client.call("/test.Echo/Unary", b"next")).messages == [b"next"]
    assert client.replies.get(stream_id, Reply()).kinds == []


# --- streaming ------------------------------------------------------------------------------


async def test_a_bidirectional_stream_answers_each_request_as_it_comes(client: Client) -> None:
    stream_id = client.request("/test.Echo/Stream", None)
    expected = bytearray()
    for word in (b"one", b"two", b"three"):
        client.send(data(stream_id, grpc_message(word), end=False))
        expected += grpc_message(b"echo " + word)
        reply = await client.until(stream_id, len(expected))
        assert bytes(reply.data) == bytes(expected)
        assert not reply.done
    client.send(data(stream_id, b"", end=True))
    reply = await client.reply(stream_id)
    assert reply.messages == [b"echo one", b"echo two", b"echo three"]
    assert reply.status == 0
    assert reply.reset is None


# --- the header cache -----------------------------------------------------------------------


async def test_a_refused_header_block_still_moves_the_table_on(client: Client) -> None:
    """A conforming encoder may reuse the bytes of an earlier block once the table changed; a
    block refused for a malformed field changed the table too, so the reused bytes must be read
    with their new meaning (here: another method and other metadata)."""

    def fields(path: str, user: str) -> list[Field]:
        # content-type never indexed: only :path and x-user enter the table
        return [
            (":method", "POST"),
            (":path", path),
            ("content-type", "application/grpc", True),
            ("x-user", user),
        ]

    first = client.new_stream()
    client.send(client.headers(first, fields("/test.Echo/Unary", "alice")))
    client.send(data(first, grpc_message(b"abc")))
    assert (await client.reply(first)).messages == [b"abc"]
    again = client.new_stream()
    block = client.block(fields("/test.Echo/Unary", "alice"))
    client.send(frames.frame(frames.HEADERS, frames.END_HEADERS, again, block))
    client.send(data(again, grpc_message(b"abc")))
    assert (await client.reply(again)).messages == [b"abc"]
    refused = client.new_stream()
    bad = [*fields("/test.Echo/Reverse", "bob"), ("grpc-timeout", "soon", True)]
    client.send(client.headers(refused, bad), data(refused, grpc_message(b"abc")))
    assert (await client.reply(refused)).status == grpc.StatusCode.INTERNAL.value[0]
    reused = client.new_stream()
    reused_block = client.block(fields("/test.Echo/Reverse", "bob"))
    assert reused_block == block
    client.send(frames.frame(frames.HEADERS, frames.END_HEADERS, reused, reused_block))
    client.send(data(reused, grpc_message(b"abc")))
    assert (await client.reply(reused)).messages == [b"cba"]


# --- shutting down --------------------------------------------------------------------------


async def test_stop_with_grace_finishes_calls_in_flight_and_refuses_new_ones(
    server: NativeGrpcServer, client: Client, state: State
) -> None:
    port = server.port
    # The server closes as soon as the last call ends: nothing of ours should be in flight then.
    client.auto_window = False
    in_flight = client.request("/test.Echo/Held", b"in flight")
    await wait_for_event(state.started)
    stopping = asyncio.create_task(server.stop(5.0))
    goaway = await client.control_frame(frames.GOAWAY)
    assert frames.parse_u32(goaway.payload) == in_flight
    assert frames.parse_u32(goaway.payload[4:]) == frames.NO_ERROR
    late = client.request("/test.Echo/Unary", b"late")
    refused = await client.reply(late)
    assert refused.reset == frames.REFUSED_STREAM
    assert refused.head is None
    assert not stopping.done()
    state.release.set()
    reply = await client.reply(in_flight)
    assert (reply.status, reply.messages) == (0, [b"in flight"])
    await asyncio.wait_for(stopping, TIMEOUT)
    assert await client.frames_until_closed() == []
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_stop_without_grace_cancels_calls_in_flight(
    server: NativeGrpcServer, client: Client, state: State
) -> None:
    stream_id = client.request("/test.Echo/Hang", b"")
    await wait_for_event(state.started)
    await asyncio.wait_for(server.stop(0), TIMEOUT)
    await wait_for_event(state.cancelled)
    seen = await client.frames_until_closed()
    assert [f.kind for f in seen] == [frames.GOAWAY]
    assert not client.replies.get(stream_id, Reply()).done
