"""Instance workers: one long-lived thread per model instance, running batches as they come."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TYPE_CHECKING

from ptserve.backends.base import BackendInstance
from ptserve.core.errors import ServerError, internal
from ptserve.core.prepared import OutputMap
from ptserve.core.stats import ModelStats
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.work import Batch

if TYPE_CHECKING:
    from ptserve.scheduling.watchdog import Watchdog

log = logging.getLogger("ptserve.scheduling")

SWITCH_INTERVAL_S = 0.0005
_UNKNOWN_NS = float("inf")  # no execution measured yet


class InstanceWorker:
    """Takes batches from the scheduler and runs them on one backend instance.

    Torch releases the GIL while it computes, so the workers of a model run side by side. With
    an execution timeout, ``running`` tells the version's watchdog what runs since when; a batch
    the watchdog abandoned (``stuck``) was already answered, so its late results are dropped.
    ``claim`` is held while a batch runs, by this thread or by a scheduler that runs a batch on
    its caller's thread (``run_batch``); ``average_ns`` is the moving average of executions.
    """

    def __init__(
        self,
        name: str,
        index: int,
        instance: BackendInstance,
        scheduler: Scheduler,
        stats: ModelStats,
    ) -> None:
        self.name = name
        self.index = index
        self.instance = instance
        self.scheduler = scheduler
        self.stats = stats
        self.watchdog: Watchdog | None = None
        self.running: tuple[Batch, int] | None = None  # read by the watchdog
        self.stuck = False  # the watchdog gave up on the running batch
        self.guard = threading.Lock()  # between the watchdog's abandon and the batch's end
        self.claim = threading.Lock()  # one batch at a time on the instance
        self.average_ns = _UNKNOWN_NS
        self.thread = threading.Thread(target=self._run, name=f"instance-{name}", daemon=True)

    def start(self) -> None:
        # The event loop and the workers share the GIL; by default a thread waiting for it may
        # wait 5 ms, which stalls a worker between batches. A shorter interval keeps it busy.
        if sys.getswitchinterval() > SWITCH_INTERVAL_S:
            sys.setswitchinterval(SWITCH_INTERVAL_S)
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _run(self) -> None:
        while True:
            batch = self.scheduler.next_batch(self.index)
            if batch is None:
                break
            with self.claim:
                self.run_batch(batch)
        try:
            self.instance.unload()
        except Exception:
            log.exception("unloading instance '%s' failed", self.name)

    def run_batch(self, batch: Batch) -> None:
        start = time.perf_counter_ns()
        for item in batch.items:
            if item is not None:
                item.start_ns = start
        results: list[OutputMap | ServerError]
        watchdog = self.watchdog
        if watchdog is not None:
            self.running = (batch, start)
        try:
            outcome = self.instance.execute(batch.requests)
            results = outcome.results
            times = outcome.times
        except Exception as exc:  # a backend bug must not kill the worker
            log.exception("instance '%s' failed to execute a batch", self.name)
            results = [internal(f"instance '{self.name}' failed: {exc}")] * len(batch.requests)
            times = None
        end = time.perf_counter_ns()
        took = end - start
        average = self.average_ns
        self.average_ns = took if average == _UNKNOWN_NS else average + (took - average) / 8
        if watchdog is not None:
            with self.guard:
                self.running = None
                abandoned = self.stuck
                self.stuck = False
            if abandoned:  # answered and counted by the watchdog already
                watchdog.rejoined(self, (end - start) / 1e9)
                return
        if times is not None:
            self.stats.record_execution(
                batch.size,
                times.compute_input_ns,
                times.compute_infer_ns,
                times.compute_output_ns,
                batch.rows,
            )
        answered: list[tuple[int, int]] = []  # total and queue time of each success
        for item, result in zip(batch.items, results, strict=True):
            if item is None:
                continue
            item.end_ns = end
            total = end - item.arrival_ns
            if isinstance(result, ServerError) or times is None:
                self.stats.record_failure(total)
            else:
                answered.append((total, item.start_ns - item.enqueue_ns))
        if times is not None:
            self.stats.record_successes(
                answered, times.compute_input_ns, times.compute_infer_ns, times.compute_output_ns
            )
        try:
            self.scheduler.finish(batch, results)
        except Exception as exc:  # the scheduler must still answer every client
            log.exception("instance '%s': finishing a batch failed", self.name)
            error = internal(f"instance '{self.name}' failed to finish a batch: {exc}")
            for item in batch.items:
                if item is not None:
                    item.complete(error)
