"""A queued request and a batch of them: what travels between the event loop and the workers."""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from ptserve.common.errors import ServerError
from ptserve.common.prepared import ExecutionTimes, OutputMap, PreparedRequest
from ptserve.scheduling.params import NO_OPTIONS, RequestOptions


class ExecutionObserver(Protocol):
    """Told how a traced request's batch ran (by the worker, before the answer goes back)."""

    def executed(self, batch_size: int, times: ExecutionTimes | None) -> None: ...


def _deliver(future: asyncio.Future[OutputMap], result: OutputMap | ServerError) -> None:
    if future.done():  # the client went away
        return
    if isinstance(result, ServerError):
        future.set_exception(result)
    else:
        future.set_result(result)


Answer = tuple[asyncio.Future[OutputMap], OutputMap | ServerError]


def _deliver_all(answers: list[Answer]) -> None:
    for future, result in answers:
        _deliver(future, result)


def complete_all(
    items: Iterable[WorkItem | None], results: Iterable[OutputMap | ServerError]
) -> None:
    """Answer a batch's items (None: a filler row), waking each event loop once rather than
    once per item: a wake-up from another thread costs about as much as the answer itself."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Answer]] = {}
    on_loop: set[asyncio.AbstractEventLoop] = set()
    here = threading.get_ident()
    for item, result in zip(items, results, strict=True):
        if item is not None:
            by_loop.setdefault(item.loop, []).append((item.future, result))
            if item.thread == here:
                on_loop.add(item.loop)
    for loop, answers in by_loop.items():
        if loop in on_loop:
            _deliver_all(answers)
        else:
            loop.call_soon_threadsafe(_deliver_all, answers)


class Place(enum.Enum):
    """Where a queued item is; queues keep stale entries and skip those not in their place."""

    QUEUED = 0
    DELAYED = 1  # timed out with the DELAY action: after the level's punctual requests
    TAKEN = 2  # in a batch
    DROPPED = 3  # rejected while queued (timeout)


class WorkItem:
    """One request travelling from the event loop to an instance worker and back."""

    __slots__ = (
        "arrival_ns",
        "end_ns",
        "enqueue_ns",
        "future",
        "key",
        "level",
        "loop",
        "options",
        "place",
        "request",
        "start_ns",
        "thread",
        "trace",
    )

    def __init__(
        self,
        request: PreparedRequest,
        loop: asyncio.AbstractEventLoop,
        options: RequestOptions = NO_OPTIONS,
        trace: ExecutionObserver | None = None,
    ) -> None:
        self.request = request
        self.trace = trace  # None unless the request is traced
        self.loop = loop
        self.thread = threading.get_ident()  # the loop's: items are made on their loop
        self.future: asyncio.Future[OutputMap] = loop.create_future()
        self.arrival_ns = time.perf_counter_ns()
        self.enqueue_ns = self.arrival_ns
        self.start_ns = 0
        self.end_ns = 0  # when its batch finished executing
        self.options = options
        self.level = options.priority  # the queue turns it into a level index
        self.place = Place.QUEUED
        self.key: Hashable = None  # what must agree between requests batched together

    def complete(self, result: OutputMap | ServerError) -> None:
        """Hand the result back to the event loop (callable from any thread)."""
        if threading.get_ident() == self.thread:  # run on the loop itself
            _deliver(self.future, result)
        else:
            self.loop.call_soon_threadsafe(_deliver, self.future, result)

    @property
    def cancelled(self) -> bool:
        return self.future.done()


@dataclass(slots=True)
class Batch:
    """What a worker runs: the requests for the backend, and the items they answer.

    ``items[i]`` answers ``requests[i]``; None marks a filler row (a sequence slot with nothing
    to run), whose result is dropped.
    """

    items: list[WorkItem | None]
    requests: list[PreparedRequest]
    ticket: int = -1  # delivery order when the scheduler preserves ordering
    context: list[object] = field(default_factory=list)  # scheduler's own, per row

    def __init__(
        self,
        items: list[WorkItem | None],
        requests: list[PreparedRequest],
        ticket: int = -1,
        context: list[object] | None = None,
    ) -> None:
        self.items = items
        self.requests = requests
        self.ticket = ticket
        self.context = [] if context is None else context

    @classmethod
    def of(cls, items: list[WorkItem]) -> Batch:
        return cls(list(items), [item.request for item in items])

    @property
    def size(self) -> int:
        """Every row the model runs, filler rows included (the batch size statistics count)."""
        return sum(request.batch_size for request in self.requests)

    @property
    def rows(self) -> int:
        """Rows of real requests (filler rows are not inferences)."""
        return sum(item.request.batch_size for item in self.items if item is not None)
