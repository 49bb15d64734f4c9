"""A call's messages: compression both ways, limits, and the stream of requests."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import grpc
import pytest

from ptserve.transports.http2 import calls
from ptserve.transports.http2.calls import CallFailed


def test_messages_decompress_by_their_encoding() -> None:
    body = b"tensor bytes " * 100
    assert calls.unpack_message(0, body, "gzip", 10_000) == body  # flag 0: as it came
    assert calls.unpack_message(1, gzip.compress(body), "gzip", 10_000) == body
    assert calls.unpack_message(1, zlib.compress(body), "deflate", 10_000) == body
    with pytest.raises(CallFailed) as unknown:
        calls.unpack_message(1, body, "snappy", 10_000)
    assert unknown.value.code == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(CallFailed) as missing:
        calls.unpack_message(1, body, "identity", 10_000)
    assert missing.value.code == grpc.StatusCode.INTERNAL
    with pytest.raises(CallFailed) as corrupt:
        calls.unpack_message(1, b"not gzip", "gzip", 10_000)
    assert corrupt.value.code == grpc.StatusCode.INTERNAL


def test_a_decompressed_message_may_not_exceed_the_limit() -> None:
    """A small compressed message must not expand past the limit (a 'zip bomb')."""
    bomb = gzip.compress(bytes(1_000_000))
    with pytest.raises(CallFailed) as failed:
        calls.unpack_message(1, bomb, "gzip", 1000)
    assert failed.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in failed.value.message


def framed(body: bytes, flag: int = 0) -> bytes:
    return calls.MESSAGE_PREFIX.pack(flag, len(body)) + body


async def test_stream_requests_count_what_waits_and_report_what_is_taken() -> None:
    taken: list[int] = []
    requests = calls.Requests(
        lambda data: data.decode(), "identity", 1000, 10, lambda size: taken.append(size)
    )
    requests.put(framed(b"one") + framed(b"three")[:4])
    assert requests.queued == 12 and requests.partial
    requests.put(framed(b"three")[4:])
    assert requests.queued == 18 and not requests.partial

    async def read() -> list[str]:
        out = []
        async for item in requests:
            out.append(item)
            requests.answered()
        return out

    reader = asyncio.ensure_future(read())
    await asyncio.sleep(0.01)
    assert taken == [8, 10]  # the connection hears of each message as the method takes it
    assert requests.queued == 0
    requests.put(framed(b"later"))
    requests.end()
    assert await asyncio.wait_for(reader, 1) == ["one", "three", "later"]


async def test_stream_requests_wait_while_too_many_are_unanswered() -> None:
    """A method that starts work per message (ModelStreamInfer) gets no more than
    ``max_unanswered`` messages ahead of its answers."""
    requests = calls.Requests(bytes, "identity", 1000, 3)
    for i in range(10):
        requests.put(framed(str(i).encode()))
    got: list[bytes] = []

    async def read() -> None:
        async for item in requests:
            got.append(item)

    reader = asyncio.ensure_future(read())
    await asyncio.sleep(0.01)
    assert got == [b"0", b"1", b"2"]
    requests.answered()
    await asyncio.sleep(0.01)
    assert len(got) == 4
    for _ in range(10):
        requests.answered()
        await asyncio.sleep(0)
    requests.end()
    await asyncio.wait_for(reader, 1)
    assert len(got) == 10


async def test_stream_requests_are_decompressed_when_taken() -> None:
    body = b"squeeze " * 100
    requests = calls.Requests(bytes, "gzip", 10_000, 10)
    requests.put(framed(gzip.compress(body), flag=1))
    assert requests.queued < len(body)  # kept as it came
    requests.end()
    assert [item async for item in requests] == [body]


def test_a_stream_request_above_the_limit_is_refused_as_it_arrives() -> None:
    requests = calls.Requests(bytes, "identity", 10, 10)
    with pytest.raises(CallFailed) as failed:
        requests.put(calls.MESSAGE_PREFIX.pack(0, 11))
    assert failed.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_stream_request_that_cannot_be_unpacked_fails_the_call() -> None:
    failures: list[CallFailed] = []
    requests = calls.Requests(bytes, "gzip", 1000, 10, on_failed=failures.append)
    requests.put(framed(b"not gzip", flag=1))
    with pytest.raises(asyncio.CancelledError):
        async for _ in requests:
            pass
    assert [f.code for f in failures] == [grpc.StatusCode.INTERNAL]


def test_a_reply_in_one_piece_is_framed_whole() -> None:
    (framed,) = calls.framed_parts(memoryview(b"abc"))
    assert framed == b"\x00\x00\x00\x00\x03abc"


def test_a_short_reply_in_parts_is_joined_behind_its_prefix() -> None:
    (framed,) = calls.framed_parts([b"ab", bytearray(b"cd"), memoryview(b""), b"e"])
    assert framed == b"\x00\x00\x00\x00\x05abcde"


def test_a_long_reply_in_parts_keeps_its_parts() -> None:
    big = memoryview(bytearray(calls.JOIN_LIMIT))
    parts = calls.framed_parts([b"head", big, b"tail"])
    assert parts[0] == b"\x00" + (calls.JOIN_LIMIT + 8).to_bytes(4, "big")
    assert parts[1:] == [b"head", big, b"tail"] and parts[2] is big
