"""One gRPC call on the native transport: the context a servicer method sees, the message
framing, and running the method (at once, so a call whose answer is ready is answered in the
same pass over the connection's input, and without a Task)."""

from __future__ import annotations

import asyncio
import logging
import struct
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn, Protocol

import grpc

from ptserve.frontends.grpc.native.headers import Metadata, RequestHead

log = logging.getLogger("ptserve.grpc")

MESSAGE_PREFIX = struct.Struct(">BL")  # compressed flag, length


class CallFailed(Exception):
    """Ends a call with a status before (or instead of) its method."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Aborted(grpc.aio.AbortError):  # type: ignore[misc]
    """Raised by ``Context.abort``; the servicer's error wrappers let it through as they do
    grpc.aio's own."""


class CallSink(Protocol):
    """What a call needs from its connection."""

    def send_message(self, stream_id: int, message: bytes) -> None: ...

    def finish(self, stream_id: int, code: grpc.StatusCode, message: str) -> None: ...


class Context:
    """The part of ``grpc.aio.ServicerContext`` the servicers use."""

    __slots__ = ("_code", "_details", "_head", "_peer", "deadline")

    def __init__(self, head: RequestHead, peer: str, deadline: float | None) -> None:
        self._head = head
        self._peer = peer
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self.deadline = deadline  # loop time

    def invocation_metadata(self) -> Metadata:
        return self._head.metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - asyncio.get_running_loop().time())

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Metadata = ()
    ) -> NoReturn:
        if code == grpc.StatusCode.OK:
            raise ValueError("abort with OK")
        self._code, self._details = code, details
        raise Aborted()

    def outcome(self) -> tuple[grpc.StatusCode, str]:
        return self._code or grpc.StatusCode.OK, self._details


def frame_message(body: bytes) -> bytes:
    return MESSAGE_PREFIX.pack(0, len(body)) + body


def unpack_message(flag: int, data: bytes, encoding: str, limit: int) -> bytes:
    """A received message's bytes, decompressed when its flag says so."""
    if not flag:
        return data
    if encoding == "gzip":
        wbits = 31
    elif encoding == "deflate":
        wbits = 15
    elif encoding == "identity":
        raise CallFailed(grpc.StatusCode.INTERNAL, "compressed message without grpc-encoding")
    else:
        raise CallFailed(
            grpc.StatusCode.UNIMPLEMENTED, f"compression algorithm '{encoding}' is not supported"
        )
    decompressor = zlib.decompressobj(wbits)
    try:
        result = decompressor.decompress(data, limit + 1)
    except zlib.error as exc:
        raise CallFailed(grpc.StatusCode.INTERNAL, f"cannot decompress message: {exc}") from None
    if len(result) > limit:
        raise CallFailed(grpc.StatusCode.RESOURCE_EXHAUSTED, too_large(len(result), limit))
    return result


def too_large(size: int, limit: int) -> str:
    return f"received message larger than max ({size} vs. {limit})"


class Requests:
    """The request messages of a streaming call, as the async iterator its method reads.
    ``queued`` counts the bytes received and not yet taken, so the connection can hold back
    the stream's flow-control window while the method falls behind."""

    __slots__ = ("_deserialize", "_ended", "_items", "_on_taken", "_waiter", "queued")

    def __init__(
        self, deserialize: Callable[[bytes], Any], on_taken: Callable[[], None] = lambda: None
    ) -> None:
        self._deserialize = deserialize
        self._on_taken = on_taken
        self._items: deque[bytes] = deque()
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None
        self.queued = 0

    def put(self, message: bytes) -> None:
        self._items.append(message)
        self.queued += len(message)
        self._wake()

    def end(self) -> None:
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while True:
            if self._items:
                message = self._items.popleft()
                self.queued -= len(message)
                self._on_taken()
                yield self._deserialize(message)
            elif self._ended:
                return
            else:
                self._waiter = asyncio.get_running_loop().create_future()
                await self._waiter
                self._waiter = None


async def run_unary(
    sink: CallSink, stream_id: int, handler: Any, context: Context, message: bytes
) -> None:
    try:
        request = handler.request_deserializer(message)
        reply = await handler.unary_unary(request, context)
        body = handler.response_serializer(reply)
    except Aborted:
        sink.finish(stream_id, *context.outcome())
        return
    except Exception as exc:
        log.exception("gRPC call failed")
        sink.finish(stream_id, grpc.StatusCode.UNKNOWN, f"unexpected error: {exc!r}")
        return
    code, details = context.outcome()
    if code == grpc.StatusCode.OK:
        sink.send_message(stream_id, frame_message(body))
    sink.finish(stream_id, code, details)


async def run_stream(
    sink: CallSink, stream_id: int, handler: Any, context: Context, requests: Requests
) -> None:
    serialize = handler.response_serializer
    try:
        async for reply in handler.stream_stream(requests, context):
            sink.send_message(stream_id, frame_message(serialize(reply)))
    except Aborted:
        pass
    except Exception as exc:
        log.exception("gRPC stream failed")
        context.set_code(grpc.StatusCode.UNKNOWN)
        context.set_details(f"unexpected error: {exc!r}")
    sink.finish(stream_id, *context.outcome())
