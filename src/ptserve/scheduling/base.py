"""The scheduler interface that the core submits to and instance workers take from."""

from __future__ import annotations

import abc

from ptserve.scheduling.work import WorkItem


class Scheduler(abc.ABC):
    """Queues work items and forms the batches that workers run."""

    @abc.abstractmethod
    def enqueue(self, item: WorkItem) -> None:
        """Accept a request (from the event loop); raises ServerError when it cannot."""

    @abc.abstractmethod
    def next_batch(self) -> list[WorkItem] | None:
        """Block until a batch is ready (on a worker thread); None means stop."""

    @abc.abstractmethod
    def close(self, workers: int) -> None:
        """Wake ``workers`` waiting workers with the stop signal once the queue is drained."""
