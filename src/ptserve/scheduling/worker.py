"""Instance workers: one long-lived thread per model instance, running batches as they come."""

from __future__ import annotations

import logging
import threading
import time

from ptserve.backends.base import BackendInstance
from ptserve.core.errors import ServerError, internal
from ptserve.core.stats import ModelStats
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.work import WorkItem

log = logging.getLogger("ptserve.scheduling")


class InstanceWorker:
    """Takes batches from the scheduler and runs them on one backend instance."""

    def __init__(
        self,
        name: str,
        instance: BackendInstance,
        scheduler: Scheduler,
        stats: ModelStats,
    ) -> None:
        self.name = name
        self.instance = instance
        self.scheduler = scheduler
        self.stats = stats
        self.thread = threading.Thread(target=self._run, name=f"instance-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _run(self) -> None:
        while True:
            batch = self.scheduler.next_batch()
            if batch is None:
                break
            self.run_batch(batch)
        try:
            self.instance.unload()
        except Exception:
            log.exception("unloading instance '%s' failed", self.name)

    def run_batch(self, batch: list[WorkItem]) -> None:
        start = time.perf_counter_ns()
        for item in batch:
            item.start_ns = start
        try:
            outcome = self.instance.execute([item.request for item in batch])
            results = outcome.results
            times = outcome.times
        except Exception as exc:  # a backend bug must not kill the worker
            log.exception("instance '%s' failed to execute a batch", self.name)
            error = internal(f"instance '{self.name}' failed: {exc}")
            results = [error] * len(batch)
            times = None
        end = time.perf_counter_ns()
        if times is not None:
            self.stats.record_execution(
                sum(item.request.batch_size for item in batch),
                times.compute_input_ns,
                times.compute_infer_ns,
                times.compute_output_ns,
            )
        for item, result in zip(batch, results, strict=True):
            total = end - item.arrival_ns
            if isinstance(result, ServerError) or times is None:
                self.stats.record_failure(total)
            else:
                self.stats.record_success(
                    total,
                    item.start_ns - item.enqueue_ns,
                    times.compute_input_ns,
                    times.compute_infer_ns,
                    times.compute_output_ns,
                )
            item.complete(result)
