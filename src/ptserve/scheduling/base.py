"""The scheduler interface that the core submits to and instance workers take from."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ptserve.core.errors import ServerError
from ptserve.core.prepared import OutputMap
from ptserve.core.stats import ModelStats
from ptserve.scheduling.work import Batch, WorkItem, complete_all

if TYPE_CHECKING:
    from ptserve.scheduling.worker import InstanceWorker


class Scheduler(abc.ABC):
    """Queues work items and forms the batches that workers run."""

    def __init__(self, stats: ModelStats) -> None:
        self.stats = stats

    @abc.abstractmethod
    def enqueue(self, item: WorkItem) -> None:
        """Accept a request (on the event loop); raises ServerError when it cannot."""

    def attach(self, workers: Sequence[InstanceWorker], direct: bool) -> None:  # noqa: B027
        """Meet the workers (before they start); ``direct`` allows running on the caller."""

    @abc.abstractmethod
    def next_batch(self, instance: int) -> Batch | None:
        """Block until a batch for worker ``instance`` is ready; None means stop."""

    def finish(self, batch: Batch, results: list[OutputMap | ServerError]) -> None:
        """Take what the scheduler keeps from the results, then answer every item."""
        complete_all(batch.items, results)

    @abc.abstractmethod
    def close(self, workers: int) -> None:
        """Wake ``workers`` waiting workers with the stop signal once the queue is drained."""
