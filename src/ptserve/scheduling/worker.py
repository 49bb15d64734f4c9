"""Instance workers: one long-lived thread per model instance, running batches as they come, and
the pool of a version's workers that requests enter through.

Inline execution: a request that finds its scheduler idle (nothing queued that it would overtake,
no batching) may run at once on the thread that submitted it, the event loop, on an idle
instance whose recent executions were short. Handing a request to a worker thread and back
costs two thread wake-ups and GIL hand-offs, more than a small model takes to run; the price is
that the event loop serves no other connection while the execution runs. It is the worker's
decision (``InstanceWorker.run_inline``), bounded by the model's ``MAX_INLINE_EXECUTION_US``
(0 turns it off) and never taken by instances of another kind than CPU (a device
synchronisation would block every connection) or of a model with an execution timeout (whose
hung executions the watchdog must be able to abandon, which it cannot on the event loop).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ptserve.common import logging_setup
from ptserve.common.errors import ServerError, Status, internal
from ptserve.common.logging_setup import RequestFields, request_fields
from ptserve.common.prepared import BatchResult, ExecutionTimes, OutputMap, PreparedRequest
from ptserve.common.stats import ModelStats
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.watchdog import Execution, Watchdog
from ptserve.scheduling.work import Batch, WorkItem

log = logging_setup.module_logger("ptserve.scheduling", __file__)

_UNKNOWN_NS = float("inf")  # no execution measured yet


class Instance(Protocol):
    """What a worker runs batches on: a backend's model instance."""

    def execute(self, batch: Sequence[PreparedRequest]) -> BatchResult:
        """Run the batch; errors are returned per request, never raised."""

    def unload(self) -> None:
        """Release what the instance holds."""


Prepare = Callable[[], None]


def inline_limit_ns(kind: str, max_inline_us: int, timeout_ms: int) -> int:
    """How short an instance's executions must be to run inline; 0: never (see the module)."""
    if kind != "KIND_CPU" or timeout_ms:
        return 0
    return max_inline_us * 1000


class InstanceWorker:
    """Takes batches from the scheduler and runs them on one backend instance.

    Torch releases the GIL while it computes, so the workers of a model run side by side. With
    an execution timeout, ``execution`` tells the version's watchdog what runs since when; a
    batch the watchdog abandoned (``execution.stuck``) was already answered, so its late results
    are dropped. ``claim`` is held while a batch runs, by this thread or by the thread that runs
    a request inline; ``average_ns`` is the moving average of executions.
    """

    def __init__(
        self,
        name: str,
        index: int,
        instance: Instance,
        scheduler: Scheduler,
        stats: ModelStats,
        inline_ns: int = 0,
        model: tuple[str, str] = ("", ""),
        prepare: Prepare | None = None,
    ) -> None:
        self.name = name
        self.model = model  # name and version, for log lines about its batches
        self.index = index
        self.instance = instance
        self.scheduler = scheduler
        self.stats = stats
        self.inline_ns = inline_ns
        self.watchdog: Watchdog | None = None
        self.execution = Execution(name)
        self.claim = threading.Lock()  # one batch at a time on the instance
        self.average_ns = _UNKNOWN_NS
        self.prepare = prepare
        self.holding = False  # a batch taken from the scheduler waits for the instance
        self._prepared = threading.Event()
        self._prepare_error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"instance-{name}", daemon=True)

    @property
    def stuck(self) -> bool:
        return self.execution.stuck

    def start(self) -> None:
        self.thread.start()

    def wait_prepared(self) -> None:
        """Wait until the thread has run ``prepare``; raise what it raised."""
        self._prepared.wait()
        if self._prepare_error is not None:
            raise self._prepare_error

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _run(self) -> None:
        # Warm-ups run here, on the thread that serves: what they leave behind may belong to
        # the thread (torch.compile's CUDA graphs are recorded per thread).
        try:
            if self.prepare is not None:
                self.prepare()
        except BaseException as exc:
            self._prepare_error = exc
        self._prepared.set()
        while self._prepare_error is None:
            batch = self.scheduler.next_batch(self.index)
            if batch is None:
                break
            # Taken from the queue but not yet running (the instance may be busy with an inline
            # run): a new request must not run inline ahead of it.
            self.holding = True
            with self.claim:
                self.holding = False
                outcome = self._execute(batch)
            self._answer(batch, outcome)
        try:
            self.instance.unload()
        except Exception:
            log.exception("unloading instance '%s' failed", self.name)

    def run_inline(self, item: WorkItem) -> bool:
        """Run ``item`` now on the calling thread if this instance is idle and its executions
        are short enough (see the module); False when it declines."""
        if self.average_ns > self.inline_ns or not self.claim.acquire(blocking=False):
            return False
        batch = Batch.of([item])
        try:
            outcome = self._execute(batch)
        finally:
            self.claim.release()
        self._answer(batch, outcome)
        return True

    def _execute(self, batch: Batch) -> _Outcome:
        """Run the batch on the instance; the instance is free again once this returns."""
        start = time.perf_counter_ns()
        for item in batch.items:
            if item is not None:
                item.start_ns = start
        watchdog = self.watchdog
        execution = self.execution
        if watchdog is not None:
            execution.running = (batch, start)
        try:
            outcome = self.instance.execute(batch.requests)
            results, times = outcome.results, outcome.times
        except Exception as exc:  # a backend bug must not kill the worker
            log.exception(
                "instance '%s' failed to execute a batch", self.name, extra=self._about(batch)
            )
            error = internal(f"instance '{self.name}' failed: {exc}")
            results, times = [error] * len(batch.requests), None
        end = time.perf_counter_ns()
        took = end - start
        average = self.average_ns
        self.average_ns = took if average == _UNKNOWN_NS else average + (took - average) / 8
        abandoned = False
        if watchdog is not None:
            with execution.guard:
                execution.running = None
                abandoned = execution.stuck
                execution.stuck = False
            if abandoned:  # answered and counted by the watchdog already
                watchdog.rejoined(execution, took / 1e9)
        return _Outcome(results, times, end, abandoned)

    def _answer(self, batch: Batch, outcome: _Outcome) -> None:
        """Count the batch in the statistics and hand its results to the scheduler, which
        answers the clients (after the instance was let go: it is not needed for this)."""
        if outcome.abandoned:
            return
        results, times, end = outcome.results, outcome.times, outcome.end_ns
        if times is not None:
            self.stats.record_execution(
                batch.size,
                times.compute_input_ns,
                times.compute_infer_ns,
                times.compute_output_ns,
                batch.rows,
            )
        answered: list[tuple[int, int]] = []  # total and queue time of each success
        failed = False
        for item, result in zip(batch.items, results, strict=True):
            if item is None:
                continue
            item.end_ns = end
            if item.trace is not None:
                item.trace.executed(batch.size, times)
            total = end - item.arrival_ns
            if isinstance(result, ServerError) or times is None:
                self.stats.record_failure(total)
                failed = True
            else:
                answered.append((total, item.start_ns - item.enqueue_ns))
        if failed:
            self._log_failures(batch, results)
        if times is not None:
            self.stats.record_successes(
                answered, times.compute_input_ns, times.compute_infer_ns, times.compute_output_ns
            )
        try:
            self.scheduler.finish(batch, results)
        except Exception as exc:  # the scheduler must still answer every client
            log.exception(
                "instance '%s': finishing a batch failed", self.name, extra=self._about(batch)
            )
            error = internal(f"instance '{self.name}' failed to finish a batch: {exc}")
            for item in batch.items:
                if item is not None:
                    item.complete(error)

    def _about(self, batch: Batch) -> dict[str, RequestFields]:
        """``extra`` for a log line about ``batch``: its model and its requests' ids."""
        ids = [item.request.id for item in batch.items if item is not None]
        return request_fields(self.model[0], self.model[1], ids)

    def _log_failures(self, batch: Batch, results: list[OutputMap | ServerError]) -> None:
        """A line per distinct failure of a batch, naming the requests it failed: an error
        for the model's failures (INTERNAL), a verbose line for a request's own mistake."""
        by_error: dict[tuple[Status, str], list[str]] = {}
        for item, result in zip(batch.items, results, strict=True):
            if item is not None and isinstance(result, ServerError):
                by_error.setdefault((result.status, result.message), []).append(item.request.id)
        for (status, message), ids in by_error.items():
            log.log(
                logging.ERROR if status is Status.INTERNAL else logging.DEBUG,
                "instance '%s': %d of the batch's %d request(s) failed (%s): %s",
                self.name,
                len(ids),
                len(batch.requests),
                status.name,
                message,
                extra=request_fields(self.model[0], self.model[1], ids),
            )


@dataclass(slots=True)
class _Outcome:
    """What one execution gave: its results (per request), its phase times (None when the
    backend failed), when it ended, and whether the watchdog had abandoned it."""

    results: list[OutputMap | ServerError]
    times: ExecutionTimes | None
    end_ns: int
    abandoned: bool

    def __init__(
        self,
        results: list[OutputMap | ServerError],
        times: ExecutionTimes | None,
        end_ns: int,
        abandoned: bool,
    ) -> None:
        self.results = results
        self.times = times
        self.end_ns = end_ns
        self.abandoned = abandoned


class WorkerPool:
    """The workers of one model version around their scheduler: requests enter through
    ``submit`` and the workers take them out.

    Inline runs of one event-loop pass go back to back: once a request has run inline, the
    requests submitted after it in the same pass wait in ``_deferred`` and run together at the
    start of the next pass (in order, inline while an instance takes them, else queued), so
    their answers then leave together too. Answers written one at a time between executions
    each wake their client's reader, which on a virtual machine costs about as much as a small
    model's forward; one request at a time runs at once as before.
    """

    def __init__(self, scheduler: Scheduler, workers: Sequence[InstanceWorker]) -> None:
        self.scheduler = scheduler
        self.workers = list(workers)
        self._inline_workers = [worker for worker in self.workers if worker.inline_ns]
        self._deferred: list[WorkItem] | None = None  # None: no inline run in this pass yet

    def submit(self, item: WorkItem) -> None:
        """Run the request inline when a worker takes it (see the module), else queue it."""
        deferred = self._deferred
        if deferred is not None:  # behind this pass's inline run: after it, in order
            deferred.append(item)
            return
        if self._inline_workers and self._may_run_inline():
            for worker in self._inline_workers:
                if worker.run_inline(item):
                    self._deferred = []
                    item.loop.call_soon(self._run_deferred)
                    return
        self.scheduler.enqueue(item)

    def _may_run_inline(self) -> bool:
        """Nothing queued or taken from the queue that an inline run would overtake."""
        return self.scheduler.idle() and not any(worker.holding for worker in self.workers)

    def _run_deferred(self) -> None:
        """The requests deferred behind the last pass's inline run, back to back."""
        items, self._deferred = self._deferred or [], None
        queueing = False  # once one is queued the rest follow it, in order
        for item in items:
            if item.cancelled:
                continue  # (counted by whoever awaited it)
            try:
                if (
                    not queueing
                    and self._may_run_inline()
                    and any(worker.run_inline(item) for worker in self._inline_workers)
                ):
                    continue
                queueing = True
                self.scheduler.enqueue(item)
            except ServerError as exc:  # the version is unloading: refused, as at submit
                self.scheduler.stats.record_failure(
                    time.perf_counter_ns() - item.arrival_ns, "REJECTED"
                )
                item.complete(exc)
            except Exception as bug:  # a bug here must not leave the rest unanswered
                log.exception("running deferred inline requests failed")
                item.complete(internal(f"running the request failed: {bug}"))

    def start(self) -> None:
        """Start every worker and wait until each has prepared; raise the first failure
        (the caller then stops the pool)."""
        for worker in self.workers:
            worker.start()
        for worker in self.workers:
            worker.wait_prepared()

    def stop(self, log_name: str, timeout: float | None = None) -> None:
        """Stop the workers once the queue is drained; wait for each (up to ``timeout`` in
        all), but not for one stuck past the execution timeout: a thread cannot be stopped,
        so it is left to return on its own."""
        self.scheduler.close(len(self.workers))
        deadline = None if timeout is None else time.monotonic() + timeout
        for worker in self.workers:
            while worker.thread.is_alive():
                if worker.stuck:
                    log.warning(
                        "%s: instance '%s' is stuck in an execution; unloading without waiting "
                        "for it",
                        log_name,
                        worker.name,
                    )
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                worker.join(0.1 if left is None else min(left, 0.1))
