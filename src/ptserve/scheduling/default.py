"""The default scheduler: first come, first served, one request per execution.

A request that finds the queue empty and an instance idle is run at once on the calling thread
(the event loop) when that instance's recent executions were short: a hand-off to a worker
thread and back costs more than such a model takes to run. Everything else queues for the
instance workers.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence

from ptserve.core.stats import ModelStats
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.work import Batch, WorkItem
from ptserve.scheduling.worker import InstanceWorker

# Executions up to this long (moving average) may run on the event loop, which serves no other
# connection meanwhile: a few requests' worth of parsing, in exchange for two thread hand-offs.
DIRECT_LIMIT_NS = 500_000


class DefaultScheduler(Scheduler):
    """A FIFO shared by every instance of the model; a free instance takes the next request."""

    def __init__(self, stats: ModelStats) -> None:
        super().__init__(stats)
        self._queue: queue.SimpleQueue[WorkItem | None] = queue.SimpleQueue()
        self._direct: list[InstanceWorker] = []

    def attach(self, workers: Sequence[InstanceWorker], direct: bool) -> None:
        self._direct = list(workers) if direct else []

    def enqueue(self, item: WorkItem) -> None:
        if self._direct and self._queue.empty() and self._run_now(item):
            return
        self._queue.put(item)

    def _run_now(self, item: WorkItem) -> bool:
        """Run on an idle instance whose executions are short; False when there is none."""
        for worker in self._direct:
            if worker.average_ns > DIRECT_LIMIT_NS or not worker.claim.acquire(blocking=False):
                continue
            try:
                worker.run_batch(Batch.of([item]))
            finally:
                worker.claim.release()
            return True
        return False

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
