"""One gRPC call on the native transport: the context a servicer method sees, the message
framing and compression, the request stream a streaming method reads, and the coroutines that
run a method (each in its own Task, started by the connection). Compiled with the request path:
the request stream is an iterator class rather than an async generator, which mypyc does not
compile."""

from __future__ import annotations

import asyncio
import logging
import struct
import zlib
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

import grpc

from ptserve.common.loops import running_loop
from ptserve.transports.http2.aborts import Aborted
from ptserve.transports.http2.headers import Metadata, RequestHead

log = logging.getLogger("ptserve.grpc")

MESSAGE_PREFIX = struct.Struct(">BL")  # compressed flag, length


class CallFailed(Exception):
    """Ends a call with a status before (or instead of) its method."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class CallSink(Protocol):
    """What a call needs from its connection."""

    def send_message(self, stream: Any, message: bytes) -> None: ...

    def answer(
        self, stream: Any, parts: list[Buffer], code: grpc.StatusCode, details: str
    ) -> None: ...

    def finish(self, stream: Any, code: grpc.StatusCode, message: str) -> None: ...


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
        return max(0.0, self.deadline - running_loop().time())

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        if code == grpc.StatusCode.OK:
            raise ValueError("abort with OK")
        self._code, self._details = code, details
        raise Aborted()

    def outcome(self) -> tuple[grpc.StatusCode, str]:
        return self._code or grpc.StatusCode.OK, self._details


Buffer = bytes | bytearray | memoryview  # (memoryviews of bytes: len() counts bytes)
Reply = Buffer | list[Buffer]  # what a method without a serializer returns: a message, or its parts

# A message in parts that is at most this long is joined (one small copy, one DATA frame as
# before); a longer one is written as its parts, so that large tensor data is never copied on
# its way to the socket.
JOIN_LIMIT = 64 * 1024


def frame_message(body: Buffer) -> bytes:
    return MESSAGE_PREFIX.pack(0, len(body)) + body


def framed_parts(reply: Reply) -> list[Buffer]:
    """A unary answer framed as a gRPC message: the length prefix first, then the message's
    bytes, the parts of a long one as they are (see ``JOIN_LIMIT``)."""
    if not isinstance(reply, list):
        return [frame_message(reply)]
    size = 0
    for part in reply:
        size += len(part)
    prefix = MESSAGE_PREFIX.pack(0, size)
    if size <= JOIN_LIMIT:
        return [b"".join([prefix, *reply])]
    return [prefix, *reply]


def unpack_message(
    flag: int, data: bytes | memoryview, encoding: str, limit: int
) -> bytes | memoryview:
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

    What arrived is kept as it came (framed, maybe compressed) in one buffer: ``waiting`` counts
    its whole messages' bytes, so the connection can hold back the stream's window while the
    method falls behind, and a message is unpacked (decompressed) only when the method takes
    it. The method may hold
    at most ``max_unanswered`` messages it has not answered yet: the iterator waits for
    answers beyond that."""

    __slots__ = (
        "_buffer",
        "_deserialize",
        "_encoding",
        "_ended",
        "_limit",
        "_max_unanswered",
        "_on_failed",
        "_on_taken",
        "_ready",
        "_scanned",
        "_unanswered",
        "_waiter",
    )

    def __init__(
        self,
        deserialize: Callable[[bytes], Any],
        encoding: str,
        limit: int,
        max_unanswered: int,
        on_taken: Callable[[int], None] = lambda size: None,
        on_failed: Callable[[CallFailed], None] = lambda failed: None,
    ) -> None:
        self._deserialize = deserialize
        self._encoding = encoding
        self._limit = limit
        self._max_unanswered = max_unanswered
        self._on_taken = on_taken
        self._on_failed = on_failed
        self._buffer = bytearray()
        self._scanned = 0  # where the first message not yet known to be whole begins
        self._ready = 0  # whole messages in the buffer
        self._unanswered = 0
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def queued(self) -> int:
        """Bytes received and not taken."""
        return len(self._buffer)

    @property
    def waiting(self) -> int:
        """Bytes of whole messages not taken (a message still arriving is not counted: it must
        arrive whole before the method can take it)."""
        return self._scanned

    @property
    def partial(self) -> bool:
        """Part of a message came, not all of it."""
        return self._scanned < len(self._buffer)

    def put(self, data: bytes) -> None:
        """Raises CallFailed (RESOURCE_EXHAUSTED) for a message above the limit."""
        buffer = self._buffer
        buffer += data
        position, size, ready = self._scanned, len(buffer), self._ready
        while size - position >= 5:
            _, length = MESSAGE_PREFIX.unpack_from(buffer, position)
            if length > self._limit:
                raise CallFailed(grpc.StatusCode.RESOURCE_EXHAUSTED, too_large(length, self._limit))
            if position + 5 + length > size:
                break
            position += 5 + length
            ready += 1
        self._scanned = position
        if ready != self._ready:
            self._ready = ready
            self._wake()

    def end(self) -> None:
        self._ended = True
        self._wake()

    def answered(self) -> None:
        """The method sent a response."""
        if self._unanswered:
            self._unanswered -= 1
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _take(self) -> bytes:
        buffer = self._buffer
        flag, length = MESSAGE_PREFIX.unpack_from(buffer, 0)
        data = bytes(memoryview(buffer)[5 : 5 + length])
        del buffer[: 5 + length]
        self._scanned -= 5 + length
        self._ready -= 1
        self._unanswered += 1
        self._on_taken(5 + length)
        # (bytes in, so bytes out: bytes() of a bytes object is that object, not a copy)
        return bytes(unpack_message(flag, data, self._encoding, self._limit))

    def __aiter__(self) -> Requests:
        return self

    async def __anext__(self) -> Any:
        while True:
            if self._ready and self._unanswered < self._max_unanswered:
                try:
                    message = self._take()
                except CallFailed as failed:
                    self._on_failed(failed)  # ends the call and cancels its Task
                    raise asyncio.CancelledError() from None
                return self._deserialize(message)
            if self._ended and not self._ready:
                raise StopAsyncIteration
            self._waiter = running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


async def run_unary(
    sink: CallSink, stream: Any, handler: Any, context: Context, message: bytes | memoryview
) -> None:
    try:
        deserialize, serialize = handler.request_deserializer, handler.response_serializer
        # A method without a deserializer takes the view of the call's buffer; deserializers
        # are given bytes, as grpc gives them.
        request = message if deserialize is None else deserialize(bytes(message))
        reply = await handler.unary_unary(request, context)
        body = reply if serialize is None else serialize(reply)  # None: the method's bytes
    except asyncio.CancelledError:
        sink.finish(stream, grpc.StatusCode.CANCELLED, "Cancelled")  # unless already ended
        raise
    except Aborted:
        sink.finish(stream, *context.outcome())
        return
    except Exception as exc:
        log.exception("gRPC call failed")
        sink.finish(stream, grpc.StatusCode.UNKNOWN, f"unexpected error: {exc!r}")
        return
    code, details = context.outcome()
    if code == grpc.StatusCode.OK:
        sink.answer(stream, framed_parts(body), code, details)
    else:
        sink.finish(stream, code, details)


async def run_stream(
    sink: CallSink, stream: Any, handler: Any, context: Context, requests: Requests
) -> None:
    serialize = handler.response_serializer
    try:
        async for reply in handler.stream_stream(requests, context):
            sink.send_message(stream, frame_message(serialize(reply)))
            requests.answered()
    except asyncio.CancelledError:
        sink.finish(stream, grpc.StatusCode.CANCELLED, "Cancelled")  # unless already ended
        raise
    except Aborted:
        pass
    except Exception as exc:
        log.exception("gRPC stream failed")
        context.set_code(grpc.StatusCode.UNKNOWN)
        context.set_details(f"unexpected error: {exc!r}")
    sink.finish(stream, *context.outcome())
