"""One gRPC call on the native transport: the context a servicer method sees, the message
framing, and running the method (at once, so a call whose answer is ready is answered in the
same pass over the connection's input, and without a Task)."""

from __future__ import annotations

import asyncio
import logging
import struct
import zlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
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


class Running:
    """A call's coroutine, driven by the futures it waits on.

    A Task per call cost about a tenth of a small model's served request (creating and
    registering it, copying the context, scheduling its steps); a call needs none of that.
    ``start`` runs the coroutine up to its first wait; each future it then waits on resumes it
    when done. The catch: there is no current Task while a call runs, so a method must not use
    what needs one (``asyncio.timeout``, ``TaskGroup``, and ``wait_for`` from Python 3.12); it
    may create Tasks and await them, futures, queues, events and sleeps."""

    __slots__ = ("_cancelling", "_coro", "_loop", "_waiting", "done")

    def __init__(self, coro: Coroutine[Any, Any, None]) -> None:
        self._coro = coro
        self._loop = asyncio.get_running_loop()
        self._waiting: asyncio.Future[Any] | None = None
        self._cancelling = False
        self.done = False

    def step(self, error: BaseException | None = None) -> None:
        """Resume the coroutine (with ``error`` thrown in, if given) up to its next wait."""
        if self._cancelling and error is None:
            error = asyncio.CancelledError()
        self._cancelling = False
        try:
            waiting = self._coro.send(None) if error is None else self._coro.throw(error)
        except (StopIteration, asyncio.CancelledError):
            self.done = True
            return
        except (KeyboardInterrupt, SystemExit):
            self.done = True
            raise
        except BaseException:  # run_unary and run_stream catch what a method raises
            self.done = True
            log.exception("gRPC call failed")
            return
        if waiting is None:  # a bare yield (``asyncio.sleep(0)``): go on in the next iteration
            self._loop.call_soon(self.step)
        elif getattr(waiting, "_asyncio_future_blocking", None):
            waiting._asyncio_future_blocking = False
            self._waiting = waiting
            waiting.add_done_callback(self._wake)
        else:
            self._loop.call_soon(self.step, RuntimeError(f"a call awaited {waiting!r}"))

    def _wake(self, future: asyncio.Future[Any]) -> None:
        self._waiting = None
        self.step()  # the coroutine reads the future's result (or its cancellation) itself

    def cancel(self) -> None:
        """The coroutine gets CancelledError where it waits (or at its next step)."""
        if self.done:
            return
        if self._waiting is not None:
            self._waiting.cancel()
        else:
            self._cancelling = True


def start(coro: Coroutine[Any, Any, None]) -> Running | None:
    """Run ``coro`` now, up to its first wait; it goes on as the futures it waits on finish
    (see Running, returned so that it can be cancelled). None when it finished at once."""
    running = Running(coro)
    running.step()
    return None if running.done else running
