"""The default scheduler: first come, first served, one request per execution."""

from __future__ import annotations

import queue

from ptserve.common.errors import unavailable
from ptserve.common.stats import ModelStats
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.work import Batch, WorkItem


class DefaultScheduler(Scheduler):
    """A FIFO shared by every instance of the model; a free instance takes the next request."""

    def __init__(self, stats: ModelStats) -> None:
        super().__init__(stats)
        self._queue: queue.SimpleQueue[WorkItem | None] = queue.SimpleQueue()
        self._closed = False

    def enqueue(self, item: WorkItem) -> None:
        if self._closed:  # it would wait behind the workers' stop signals forever
            raise unavailable("the model is unloading and accepts no new requests")
        self._queue.put(item)

    def idle(self) -> bool:
        return self._queue.empty()

    def next_batch(self, instance: int) -> Batch | None:
        while True:
            item = self._queue.get()
            if item is None:
                return None
            if not item.cancelled:
                return Batch.of([item])

    def close(self, workers: int) -> None:
        self._closed = True
        for _ in range(workers):
            self._queue.put(None)
