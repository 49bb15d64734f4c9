"""The default scheduler: first come, first served, one request per execution."""

from __future__ import annotations

import queue

from ptserve.common.stats import ModelStats
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.work import Batch, WorkItem


class DefaultScheduler(Scheduler):
    """A FIFO shared by every instance of the model; a free instance takes the next request."""

    def __init__(self, stats: ModelStats) -> None:
        super().__init__(stats)
        self._queue: queue.SimpleQueue[WorkItem | None] = queue.SimpleQueue()

    def enqueue(self, item: WorkItem) -> None:
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
        for _ in range(workers):
            self._queue.put(None)
