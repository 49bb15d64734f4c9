"""The dynamic batcher: one priority queue shared by the model's instances, batched on demand."""

from __future__ import annotations

import time
from collections.abc import Hashable

from ptserve.common.errors import ServerError, unavailable
from ptserve.common.iospec import ModelIO
from ptserve.common.prepared import OutputMap
from ptserve.common.stats import ModelStats
from ptserve.common.sync import Condition
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.batching import BatchRule
from ptserve.scheduling.hold import POLL_SECONDS, Hold
from ptserve.scheduling.ordering import OrderedDelivery
from ptserve.scheduling.policy import Priorities
from ptserve.scheduling.priority_queue import TIMEOUT_EXPIRED, PriorityQueue
from ptserve.scheduling.work import Batch, WorkItem


def shape_key(item: WorkItem, ragged: frozenset[str]) -> Hashable:
    """What must agree for requests to share a batch: the inputs sent and their item shapes."""
    return tuple(
        (name, None if name in ragged else array.shape[1:])
        for name, array in item.request.inputs.items()
    )


class DynamicBatcher(Scheduler):
    """Free workers take the best batch the queue offers, waiting up to the queue delay."""

    def __init__(
        self,
        stats: ModelStats,
        io: ModelIO,
        rule: BatchRule,
        priorities: Priorities,
        preserve_ordering: bool,
        hold: Hold | None = None,
    ) -> None:
        super().__init__(stats)
        self.rule = rule
        self._hold = hold or Hold()
        self._ragged = frozenset(s.name for s in io.inputs if s.allow_ragged_batch)
        self._queue = PriorityQueue(priorities)
        self._cond = Condition()
        self._ordering = OrderedDelivery() if preserve_ordering else None
        self._closed = False
        self._idle = 0  # workers waiting with no deadline
        self._timed = 0  # workers waiting for a queue delay to pass
        self._last_key: Hashable = None

    def enqueue(self, item: WorkItem) -> None:
        """On the event loop: queue, arm the timeout, and wake a worker only when one must act."""
        item.key = shape_key(item, self._ragged)
        with self._cond:
            if self._closed:
                raise unavailable("the model is unloading and accepts no new requests")
            timeout_ns = self._queue.push(item)
            if self._timed:
                # A worker is waiting out the delay; wake it early only if the batch is done.
                if self.rule.completes(self._queue.rows) or item.key != self._last_key:
                    self._cond.notify()
            elif self._idle:
                self._cond.notify()
            self._last_key = item.key
        if timeout_ns:
            item.loop.call_later(timeout_ns / 1e9, self._expire, item)

    def _expire(self, item: WorkItem) -> None:
        with self._cond:
            rejected = self._queue.expire(item)
        if rejected:
            self.stats.record_failure(time.perf_counter_ns() - item.arrival_ns, "REJECTED")
            item.complete(unavailable(TIMEOUT_EXPIRED))

    def next_batch(self, instance: int) -> Batch | None:
        with self._cond:
            while True:
                if not self._closed and self._hold.holding(self._queue.count):
                    self._timed += 1
                    self._cond.wait(POLL_SECONDS)
                    self._timed -= 1
                    continue
                chosen, wait_ns = self.rule.choose(
                    self._queue.live(), time.perf_counter_ns(), self._closed
                )
                if chosen:
                    self._queue.take(chosen)
                    if self._queue.count and self._idle:
                        self._cond.notify()  # the rest may already make a batch
                    batch = Batch.of(chosen)
                    if self._ordering is not None:
                        batch.ticket = self._ordering.ticket()
                    return batch
                if self._closed:
                    return None
                if wait_ns < 0:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                else:
                    self._timed += 1
                    self._cond.wait(wait_ns / 1e9)
                    self._timed -= 1

    def finish(self, batch: Batch, results: list[OutputMap | ServerError]) -> None:
        if self._ordering is None:
            super().finish(batch, results)
        else:
            self._ordering.deliver(batch.ticket, lambda: Scheduler.finish(self, batch, results))

    def close(self, workers: int) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
