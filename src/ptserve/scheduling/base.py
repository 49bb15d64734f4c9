"""The scheduler contract, as the reference's: ``enqueue`` queues a request, instance workers
take the batches it forms with ``next_batch`` and answer them through ``finish``."""

from __future__ import annotations

import abc

from ptserve.common.errors import ServerError
from ptserve.common.prepared import OutputMap
from ptserve.common.stats import ModelStats
from ptserve.scheduling.work import Batch, WorkItem, complete_all


class Scheduler(abc.ABC):
    """Queues work items and forms the batches that workers run."""

    def __init__(self, stats: ModelStats) -> None:
        self.stats = stats

    @abc.abstractmethod
    def enqueue(self, item: WorkItem) -> None:
        """Queue a request (on the event loop); raises ServerError when it cannot."""

    @abc.abstractmethod
    def next_batch(self, instance: int) -> Batch | None:
        """Block until a batch for worker ``instance`` is ready; None means stop."""

    def finish(self, batch: Batch, results: list[OutputMap | ServerError]) -> None:
        """Take what the scheduler keeps from the results, then answer every item."""
        complete_all(batch.items, results)

    @abc.abstractmethod
    def close(self, workers: int) -> None:
        """Wake ``workers`` waiting workers with the stop signal once the queue is drained."""

    def idle(self) -> bool:
        """Whether a request arriving now would run next, and alone: then an idle instance may
        run it at once instead of it being queued (see ``worker.WorkerPool.submit``). Batchers
        never are: they exist to put requests together."""
        return False
