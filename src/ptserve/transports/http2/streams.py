"""One call's HTTP/2 stream as the connection sees it: where it stands, the request bytes it
collected, and the response bytes waiting for the peer's flow-control window.

``State`` is the call's view, which decides what the connection does next and makes sure a call
is started once and answered once; it also gives the stream's HTTP/2 state (RFC 9113 section
5.1): open while the request arrives (RECEIVING, ANSWERED_EARLY), half-closed (remote) once it
has ended (RUNNING, ANSWERED), closed when the connection has forgotten it. The stream's windows
are kept here too: what we may send, and what the peer may."""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from typing import Any

from ptserve.transports.http2.calls import Context, Requests
from ptserve.transports.http2.headers import RequestHead


class State(enum.Enum):
    RECEIVING = 1  # the request is still arriving (a streaming call's method may be running)
    RUNNING = 2  # the peer ended its side: the method runs with what came
    ANSWERED_EARLY = 3  # answered (data and trailers may wait for the window); the peer's side
    # is still open: what it sends is dropped, and it is told to stop (RST_STREAM NO_ERROR)
    ANSWERED = 4  # answered after the peer's side ended
    CLOSED = 5  # the answer is out, or the stream was reset: forgotten by the connection


class Stream:
    __slots__ = (
        "context",
        "deadline",
        "handler",
        "head",
        "id",
        "inbound",
        "message",
        "opened",
        "pending",
        "processed",
        "requests",
        "state",
        "task",
        "trailers",
        "unacked",
        "window",
    )

    def __init__(
        self,
        stream_id: int,
        head: RequestHead,
        handler: Any,
        context: Context,
        window: int,
        inbound: int,
    ) -> None:
        self.id = stream_id
        self.head = head
        self.handler = handler
        self.context = context
        self.state = State.RECEIVING
        self.message = bytearray()  # a unary call's request, as it arrives (framed)
        self.requests: Requests | None = None  # a streaming call's
        self.task: asyncio.Task[None] | None = None
        self.deadline: asyncio.TimerHandle | None = None
        self.opened = False  # the response headers went out
        self.pending: deque[memoryview] = deque()  # response data waiting for the window
        self.trailers: bytes | None = None  # their header block, waiting behind ``pending``
        self.unacked = 0  # received bytes the call has not consumed yet
        self.window = window  # what we may still send (the peer's window for the stream)
        self.inbound = inbound  # what the peer may still send (the window we gave it)
        self.processed = 0  # consumed bytes not yet given back with WINDOW_UPDATE
