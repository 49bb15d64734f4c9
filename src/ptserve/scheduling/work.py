"""A queued request: the prepared inputs, its timestamps and how to deliver the result."""

from __future__ import annotations

import asyncio
import time

from ptserve.core.errors import ServerError
from ptserve.core.prepared import OutputMap, PreparedRequest


def _deliver(future: asyncio.Future[OutputMap], result: OutputMap | ServerError) -> None:
    if future.done():  # the client went away
        return
    if isinstance(result, ServerError):
        future.set_exception(result)
    else:
        future.set_result(result)


class WorkItem:
    """One request travelling from the event loop to an instance worker and back."""

    __slots__ = ("arrival_ns", "enqueue_ns", "future", "loop", "request", "start_ns")

    def __init__(self, request: PreparedRequest, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self.loop = loop
        self.future: asyncio.Future[OutputMap] = loop.create_future()
        self.arrival_ns = time.perf_counter_ns()
        self.enqueue_ns = self.arrival_ns
        self.start_ns = 0

    def complete(self, result: OutputMap | ServerError) -> None:
        """Hand the result back to the event loop (callable from any thread)."""
        self.loop.call_soon_threadsafe(_deliver, self.future, result)

    @property
    def cancelled(self) -> bool:
        return self.future.done()
