"""Execution timeouts: one watchdog thread per model version watches its instance workers.

A Python thread cannot be stopped, so a batch that runs past ``EXECUTION_TIMEOUT_MS`` is
abandoned rather than killed: its requests are answered with an error at once, the instance (still
inside the call) takes no new work, and when every instance of the version is stuck the version
is marked unavailable. When the stuck call returns, its results are dropped and the instance
rejoins. Workers only publish what they run in their ``Execution`` (one attribute store per
batch); all timing happens here, on one thread that sleeps until the earliest deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from ptserve.common.errors import ServerError, internal
from ptserve.common.logging_setup import request_fields
from ptserve.common.prepared import OutputMap
from ptserve.common.stats import ModelStats
from ptserve.common.sync import Condition
from ptserve.config.parameters import EXECUTION_TIMEOUT_PARAMETER
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.work import Batch

log = logging.getLogger("ptserve.scheduling")


class Execution:
    """What one instance is running, shared between its worker and the watchdog.

    The worker sets ``running`` to (batch, start) before an execution and back to None after;
    the watchdog sets ``stuck`` when it abandons the batch. ``guard`` orders the two."""

    __slots__ = ("guard", "name", "running", "stuck")

    def __init__(self, name: str) -> None:
        self.name = name
        self.running: tuple[Batch, int] | None = None
        self.stuck = False
        self.guard = threading.Lock()


class Watchdog:
    """Abandons batches that run past the timeout and tracks which instances are stuck.

    ``on_all_stuck(reason)`` runs when the last serving instance gets stuck; ``on_recovered()``
    when a stuck instance returns after that. Both run on a watchdog or worker thread, under
    the watchdog's lock, and must not call back into it.
    """

    def __init__(
        self,
        model: str,
        version: int,
        timeout_ms: int,
        scheduler: Scheduler,
        stats: ModelStats,
        on_all_stuck: Callable[[str], None],
        on_recovered: Callable[[], None],
    ) -> None:
        self.model = model
        self.version = version
        self.timeout_ms = timeout_ms
        self.timeout_ns = timeout_ms * 1_000_000
        self.scheduler = scheduler
        self.stats = stats
        self._on_all_stuck = on_all_stuck
        self._on_recovered = on_recovered
        self._executions: list[Execution] = []
        self._cond = Condition()
        self._stopped = False
        self._stuck = 0
        self._all_stuck = False
        self._thread = threading.Thread(
            target=self._run, name=f"watchdog-{model}-{version}", daemon=True
        )

    def watch(self, executions: Sequence[Execution]) -> None:
        """Watch these instances (before their workers start) and start the watchdog thread."""
        self._executions = list(executions)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        wait_ns = self.timeout_ns
        while True:
            with self._cond:
                if self._stopped:
                    return
                self._cond.wait(wait_ns / 1e9)
                if self._stopped:
                    return
            # A batch that starts after this check cannot be overdue before a full timeout.
            wait_ns = self.timeout_ns
            now = time.perf_counter_ns()
            for execution in self._executions:
                running = execution.running
                if running is None or execution.stuck:
                    continue
                batch, started = running
                left = started + self.timeout_ns - now
                if left <= 0:
                    self._abandon(execution, batch, started, now)
                else:
                    wait_ns = min(wait_ns, left)

    def _abandon(self, execution: Execution, batch: Batch, started: int, now: int) -> None:
        with execution.guard:
            running = execution.running
            if running is None or running[0] is not batch:
                return  # it finished meanwhile
            execution.stuck = True
        error = internal(
            f"model '{self.model}' version {self.version}: instance '{execution.name}' ran a batch "
            f"for longer than {EXECUTION_TIMEOUT_PARAMETER} ({self.timeout_ms} ms); its "
            "requests are failed and the instance takes no new work until the call returns"
        )
        ids = [item.request.id for item in batch.items if item is not None]
        about = request_fields(self.model, str(self.version), ids)
        log.error("%s (running %.1f s)", error.message, (now - started) / 1e9, extra=about)
        for item in batch.items:
            if item is not None:
                self.stats.record_failure(now - item.arrival_ns, "BACKEND")
        results: list[OutputMap | ServerError] = [error] * len(batch.items)
        try:  # through the scheduler: ordering tickets and sequence slots are released too
            self.scheduler.finish(batch, results)
        except Exception:
            log.exception("model '%s': failing an abandoned batch failed", self.model, extra=about)
            for item in batch.items:
                if item is not None:
                    item.complete(error)
        # The callbacks run under the lock, so that "all stuck" and "recovered" cannot swap.
        with self._cond:
            self._stuck += 1
            if self._stuck == len(self._executions) and not self._all_stuck:
                self._all_stuck = True
                reason = (
                    f"every instance of model '{self.model}' version {self.version} is stuck "
                    f"in an execution longer than {EXECUTION_TIMEOUT_PARAMETER} "
                    f"({self.timeout_ms} ms); it is unavailable until one returns"
                )
                log.error("%s", reason)
                self._on_all_stuck(reason)

    def rejoined(self, execution: Execution, seconds: float) -> None:
        """Called by a worker whose abandoned call returned; its results were dropped."""
        log.warning(
            "model '%s' version %d: instance '%s' returned from its abandoned call after %.1f s; "
            "it takes work again",
            self.model,
            self.version,
            execution.name,
            seconds,
        )
        with self._cond:
            self._stuck -= 1
            if self._all_stuck:
                self._all_stuck = False
                self._on_recovered()
