"""The default scheduler: first come, first served, one request per execution."""

from __future__ import annotations

import queue

from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.work import WorkItem


class DefaultScheduler(Scheduler):
    """A FIFO shared by every instance of the model; a free instance takes the next request."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[WorkItem | None] = queue.SimpleQueue()

    def enqueue(self, item: WorkItem) -> None:
        self._queue.put(item)

    def next_batch(self) -> list[WorkItem] | None:
        while True:
            item = self._queue.get()
            if item is None:
                return None
            if not item.cancelled:
                return [item]

    def close(self, workers: int) -> None:
        for _ in range(workers):
            self._queue.put(None)
