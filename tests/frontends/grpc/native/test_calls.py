"""A call's messages: compression both ways, limits, and the stream of requests."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import grpc
import pytest

from ptserve.frontends.grpc.native import calls
from ptserve.frontends.grpc.native.calls import CallFailed


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


async def test_stream_requests_count_what_waits_and_report_what_is_taken() -> None:
    taken: list[int] = []
    requests = calls.Requests(lambda data: data.decode(), lambda: taken.append(requests.queued))
    requests.put(b"one")
    requests.put(b"three")
    assert requests.queued == 8

    async def read() -> list[str]:
        return [item async for item in requests]

    reader = asyncio.ensure_future(read())
    await asyncio.sleep(0.01)
    assert taken == [5, 0]  # the connection hears of each message as the method takes it
    requests.put(b"later")
    requests.end()
    assert await asyncio.wait_for(reader, 1) == ["one", "three", "later"]
