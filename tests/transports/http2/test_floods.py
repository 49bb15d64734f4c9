"""Hostile peers against the native transport: floods stay bounded in memory, end their own
connection as RFC 9113 asks, and cost the other connections little latency.

Each flood is a plain blocking socket in a thread (loopback, bounded in bytes and seconds), so
that the server, on the test's event loop, is what does the work. Memory is the process's RSS
(psutil): the server runs in it; the floods' own bytes are prepared before measuring.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import psutil
import pytest
from h2.errors import ErrorCodes
from hyperframe.frame import ContinuationFrame, HeadersFrame, PingFrame, RstStreamFrame

from ptserve.transports.http2.policing import DEFAULT_LIMITS, PREFACE, Limits
from ptserve.transports.http2.server import NativeGrpcServer
from tests.transports.http2.test_connection import (
    MAX_MESSAGE,
    Client,
    State,
    parse_frames,
    raw_frame,
    request_fields,
    servicer,
)

MiB = 2**20
RSS_BOUND = 48 * MiB  # what a flood may add to the process's memory, at most
FLOOD_SECONDS = 2.0
# A flood budget nobody reaches: the flood goes on, and what bounds it is backpressure.
UNPOLICED = replace(DEFAULT_LIMITS, flood_burst=10**9, flood_rate=1e9)

SETTINGS = raw_frame(0x4, 0, 0)  # an empty SETTINGS frame: the client's preface is complete


def rss() -> int:
    value: int = psutil.Process().memory_info().rss
    return value


FLOODER = r"""
import socket, sys, threading, time
port, seconds, total = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
mode, out = sys.argv[4], sys.argv[5]  # read: "always", "after" the flood, or "never"
read = mode == "always"
data = sys.stdin.buffer.read()
size = int.from_bytes(data[:4], "big")
opening, unit = data[4 : 4 + size], data[4 + size :]
unit = unit * max(1, 2**20 // len(unit))
sock = socket.create_connection(("127.0.0.1", port))
sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 2**20)
received, closed, sent = bytearray(), [False], 0
def reader():
    while True:
        try:
            chunk = sock.recv(2**20)
        except OSError:
            closed[0] = True
            return
        if not chunk:
            closed[0] = True
            return
        if not read:  # the flood reads only once it is over
            received.extend(chunk)
if read:
    threading.Thread(target=reader, daemon=True).start()
deadline = time.monotonic() + seconds
sock.settimeout(0.2)
try:
    sock.sendall(opening)
    while sent < total and time.monotonic() < deadline and not closed[0]:
        try:
            sent += sock.send(unit)
        except TimeoutError:
            continue
except OSError:
    closed[0] = True
if mode == "after":
    sock.settimeout(5)
    try:
        while chunk := sock.recv(2**20):
            received.extend(chunk)
        closed[0] = True
    except TimeoutError:
        pass
    except OSError:
        closed[0] = True
with open(out, "wb") as f:
    f.write(received)
print(sent, int(closed[0]))
"""


class Flood:
    """Another process that writes ``unit`` over and over (up to ``total`` bytes or
    ``seconds``) after ``opening``; it reads what comes back ``always``, or only once it is done
    (``after``: then up to the end of the connection), or ``never``. ``sent``, ``closed`` (the
    server ended the connection) and ``received`` once it has finished."""

    def __init__(self, port: int, opening: bytes, unit: bytes, total: int, mode: str) -> None:
        self.port, self.opening, self.unit, self.total, self.mode = port, opening, unit, total, mode
        self.sent = 0
        self.closed = False
        self.received = b""
        self._out = tempfile.NamedTemporaryFile(suffix=".flood")  # noqa: SIM115 - closed in finish
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> Flood:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            FLOODER,
            str(self.port),
            str(FLOOD_SECONDS),
            str(self.total),
            self.mode,
            self._out.name,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.process.stdin is not None
        self.process.stdin.write(len(self.opening).to_bytes(4, "big") + self.opening + self.unit)
        self.process.stdin.close()
        return self

    async def finish(self) -> Flood:
        assert self.process is not None
        try:
            out, _ = await asyncio.wait_for(self.process.communicate(), FLOOD_SECONDS + 10)
        except TimeoutError:
            self.process.kill()
            raise
        sent, closed = out.split()
        self.sent, self.closed = int(sent), closed == b"1"
        self.received = Path(self._out.name).read_bytes()
        self._out.close()
        return self


@pytest.fixture
def limits() -> Limits:
    return DEFAULT_LIMITS


@pytest.fixture
async def server(limits: Limits) -> AsyncIterator[NativeGrpcServer]:
    server = NativeGrpcServer(servicer(State()), MAX_MESSAGE, limits)
    await server.start("127.0.0.1", 0)
    yield server
    await server.stop(0)


def goaway_codes(data: bytes) -> list[int]:
    # The stream may end inside a frame only if the server reset the connection: it must not.
    return [f.error_code for f in parse_frames(bytes(data)) if type(f).__name__ == "GoAwayFrame"]


# --- floods that end their connection -------------------------------------------------------


async def test_a_ping_flood_from_a_client_that_never_reads(server: NativeGrpcServer) -> None:
    ping = PingFrame(0, opaque_data=b"flooding").serialize()
    before = rss()
    flood = await (
        await Flood(server.port, PREFACE + SETTINGS, ping, 64 * MiB, "after").start()
    ).finish()
    assert rss() - before < RSS_BOUND
    assert flood.closed
    assert goaway_codes(flood.received)[-1:] == [ErrorCodes.ENHANCE_YOUR_CALM]


@pytest.mark.parametrize("limits", [UNPOLICED])
async def test_a_client_that_never_reads_cannot_grow_the_write_buffer(
    server: NativeGrpcServer,
) -> None:
    """Without the flood budget, PINGs whose ACKs are not read: the server stops reading once
    its write buffer is above the high-water mark, so the flood stalls in the sockets."""
    ping = PingFrame(0, opaque_data=b"flooding").serialize()
    before = rss()
    flood = await Flood(server.port, PREFACE + SETTINGS, ping, 256 * MiB, "never").start()
    largest = 0
    for _ in range(int(FLOOD_SECONDS / 0.05)):
        await asyncio.sleep(0.05)
        for connection in server._connections:
            transport = connection._transport
            if transport is None:  # an earlier test's connection, closing
                continue
            sock = transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65_536)  # little in the kernel
            largest = max(largest, transport.get_write_buffer_size())
    assert rss() - before < RSS_BOUND
    await flood.finish()
    # Above the mark by no more than what one read's answers came to.
    assert 0 < largest <= DEFAULT_LIMITS.write_high_water + 512 * 1024, largest
    assert flood.sent < 64 * MiB  # it could not send on: the server stopped reading


async def test_a_continuation_flood(server: NativeGrpcServer) -> None:
    client = await Client.connect(server.port)  # for a valid header block
    block = client.block(request_fields("/test.Echo/Unary"))
    await client.close()
    opening = PREFACE + SETTINGS + HeadersFrame(1, data=block).serialize()
    empty = ContinuationFrame(1, data=b"").serialize()
    before = rss()
    flood = await (await Flood(server.port, opening, empty, 64 * MiB, "after").start()).finish()
    assert rss() - before < RSS_BOUND
    assert flood.closed
    assert goaway_codes(flood.received)[-1:] == [ErrorCodes.ENHANCE_YOUR_CALM]


async def test_a_flood_of_streams_opened_and_reset(server: NativeGrpcServer) -> None:
    client = await Client.connect(server.port)
    wire = bytearray()
    for stream_id in range(1, 40_000, 2):
        block = client.block(request_fields("/test.Echo/Hang"))
        wire += HeadersFrame(stream_id, data=block, flags=["END_HEADERS"]).serialize()
        wire += RstStreamFrame(stream_id, error_code=8).serialize()
    client.writer.write(bytes(wire))
    before = rss()
    frames = await client.raw_frames_until_closed()
    assert rss() - before < RSS_BOUND
    await client.close()
    codes = [f.error_code for f in frames if type(f).__name__ == "GoAwayFrame"]
    assert codes == [ErrorCodes.ENHANCE_YOUR_CALM]


async def test_calls_with_huge_metadata_fail_alone_and_cost_nothing_after(
    server: NativeGrpcServer,
) -> None:
    """900 KiB of metadata per call: above the advertised limit, within the hard one."""
    client = await Client.connect(server.port)
    try:
        huge = [("x-huge", "v" * (900 * 1024))]
        assert (await client.call("/test.Echo/Unary", b"warm", metadata=huge)).status == 8
        before = rss()
        for _ in range(20):
            reply = await client.call("/test.Echo/Unary", b"x", metadata=huge)
            assert reply.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        assert rss() - before < RSS_BOUND
        assert (await client.call("/test.Echo/Unary", b"fine")).messages == [b"fine"]
    finally:
        await client.close()


# --- the others' latency --------------------------------------------------------------------


async def latencies(client: Client, count: int) -> list[float]:
    loop = asyncio.get_running_loop()
    out = []
    for i in range(count):
        began = loop.time()
        reply = await client.call("/test.Echo/Unary", str(i).encode())
        out.append(loop.time() - began)
        assert reply.status == 0
    return out


@pytest.mark.parametrize("limits", [UNPOLICED])
async def test_a_flood_on_one_connection_delays_another_little(server: NativeGrpcServer) -> None:
    """A PING flood that is read (so it goes on for the whole time): every call of another
    connection is still answered promptly, since one connection's input is handled a bounded
    number of frames per callback."""
    other = await Client.connect(server.port)
    try:
        ping = PingFrame(0, opaque_data=b"flooding").serialize()
        flood = await Flood(server.port, PREFACE + SETTINGS, ping, 2**40, "always").start()
        await asyncio.sleep(0.3)
        during = await latencies(other, 50)
        await flood.finish()
        assert flood.sent > 4 * MiB  # the flood was served all along
        # Handled all at once, one read of it takes over 100 ms here, and a call caught
        # behind several of them waits a second; a turn of 256 frames takes about 2 ms.
        assert statistics.median(during) < 0.05, statistics.median(during)
        assert max(during) < 0.5, max(during)
    finally:
        await other.close()


async def test_an_oversized_header_block_ends_only_its_connection(
    server: NativeGrpcServer,
) -> None:
    other = await Client.connect(server.port)
    try:
        size = DEFAULT_LIMITS.max_frame
        opening = PREFACE + SETTINGS + raw_frame(0x1, 0, 1, bytes(size))  # no END_HEADERS
        continuation = raw_frame(0x9, 0, 1, bytes(size))
        flood = await Flood(server.port, opening, continuation, 8 * MiB, "after").start()
        await flood.finish()
        assert flood.closed
        assert goaway_codes(flood.received)[-1:] == [ErrorCodes.ENHANCE_YOUR_CALM]
        assert (await other.call("/test.Echo/Unary", b"on")).messages == [b"on"]
    finally:
        await other.close()
