"""A loaded model version: its config, instances, scheduler, statistics and state."""

from __future__ import annotations

import enum
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ptserve.backends.base import (
    Backend,
    BackendInstance,
    BackendModel,
    InstanceSpec,
    LoadContext,
)
from ptserve.config.parse import ModelConfig
from ptserve.core.errors import unavailable
from ptserve.core.inference import PlanCache
from ptserve.core.iospec import ModelIO
from ptserve.core.prepared import PreparedRequest
from ptserve.core.stats import ModelStats
from ptserve.core.warmup import run_warmup
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.factory import make_scheduler
from ptserve.scheduling.watchdog import Watchdog, execution_timeout_ms
from ptserve.scheduling.work import WorkItem
from ptserve.scheduling.worker import InstanceWorker

log = logging.getLogger("ptserve.model")

UNLOADED = "unloaded"  # the reason of a model or version unloaded on purpose

_KIND_NAMES = {1: "KIND_GPU", 2: "KIND_CPU", 3: "KIND_MODEL"}


class State(enum.Enum):
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


def instance_specs(config: ModelConfig) -> list[InstanceSpec]:
    """Every instance the config's groups ask for, named like the reference (``<group>_<i>``)."""
    specs: list[InstanceSpec] = []
    for group in config.instance_group:
        kind = _KIND_NAMES.get(group.kind, "KIND_CPU")
        devices: list[int] = list(group.gpus) if kind == "KIND_GPU" else [-1]
        for device in devices:
            for index in range(group.count):
                suffix = f"_{index}" if len(devices) == 1 else f"_{device}_{index}"
                specs.append(InstanceSpec(f"{group.name}{suffix}", kind, device))
    return specs


@dataclass(slots=True)
class ModelVersion:
    """One version of a model and everything it runs on."""

    name: str
    version: int
    config: ModelConfig
    io: ModelIO
    state: State = State.LOADING
    reason: str = ""
    stats: ModelStats = field(default_factory=ModelStats)
    scheduler: Scheduler | None = None
    workers: list[InstanceWorker] = field(default_factory=list)
    backend_model: BackendModel | None = None
    labels: dict[str, list[str]] = field(default_factory=dict)
    warmup: list[tuple[str, int, PreparedRequest]] = field(default_factory=list)
    load_seconds: float = 0.0
    # Requests between lookup and answer: a version retires only once they are all answered.
    inflight: int = 0
    requests: set[WorkItem] = field(default_factory=set)  # queued or running (for metrics)
    watchdog: Watchdog | None = None  # with EXECUTION_TIMEOUT_MS
    stuck_reason: str = ""  # set while every instance is stuck past the execution timeout
    plans: PlanCache = field(default_factory=PlanCache)  # checked request signatures
    _gate: threading.Condition = field(default_factory=threading.Condition)

    @property
    def ready(self) -> bool:
        return self.state is State.READY

    def acquire(self) -> bool:
        """Count a request in; False once the version stopped taking requests."""
        with self._gate:
            if self.state is not State.READY:
                return False
            self.inflight += 1
            return True

    def pending(self) -> int:
        """Requests queued and not yet picked up by an instance."""
        return sum(1 for item in list(self.requests) if not item.start_ns)

    def release(self) -> None:
        with self._gate:
            self.inflight -= 1
            if self.inflight == 0:
                self._gate.notify_all()

    def retire(self, timeout: float | None = None) -> None:
        """Take no new requests, wait for those in flight (up to ``timeout``), then unload."""
        with self._gate:
            if self.state is State.READY or self.stuck_reason:
                self.state = State.UNLOADING
                self.stuck_reason = ""
            self._gate.wait_for(lambda: self.inflight == 0, timeout)
        self.unload(timeout)

    def load(self, backend: Backend, model_dir: Path, backend_config: dict[str, str]) -> None:
        """Load the backend model, warm each instance up, and start one worker per instance
        (on a loader thread). On failure everything made so far is released and raised.
        """
        started = time.monotonic()
        instances: list[tuple[InstanceSpec, BackendInstance]] = []
        context = LoadContext(
            name=self.name,
            version=self.version,
            model_dir=model_dir,
            config=self.config,
            io=self.io,
            backend_config=backend_config,
        )
        try:
            timeout_ms = execution_timeout_ms(self.config)
            self.backend_model = backend.load(context)
            for spec in instance_specs(self.config):
                instances.append((spec, self.backend_model.create_instance(spec)))
            for spec, instance in instances if self.warmup else []:
                run_warmup(self.name, spec.name, instance, self.warmup)
            self.scheduler = self._make_scheduler(len(instances))
            for index, (spec, instance) in enumerate(instances):
                worker = InstanceWorker(spec.name, index, instance, self.scheduler, self.stats)
                self.workers.append(worker)
            if timeout_ms:
                self.watchdog = Watchdog(
                    self.name,
                    self.version,
                    timeout_ms,
                    self.scheduler,
                    self.stats,
                    self._all_stuck,
                    self._recovered,
                )
                self.watchdog.watch(self.workers)
            # A watched execution must stay on a worker thread, where a hang cannot stall the
            # event loop; unwatched short ones may run on the loop.
            self.scheduler.attach(self.workers, direct=not timeout_ms)
            for worker in self.workers:
                worker.start()
        except BaseException:
            for _, instance in instances[len(self.workers) :]:
                instance.unload()  # instances without a worker thread to release them
            self.unload()
            raise
        self.load_seconds = time.monotonic() - started
        self.state = State.READY

    def _all_stuck(self, reason: str) -> None:
        """Every instance is stuck past the execution timeout: refuse new requests with the
        reason, and fail the queued ones, which no instance would pick up."""
        with self._gate:
            if self.state is not State.READY:
                return
            self.state = State.UNAVAILABLE
            self.reason = self.stuck_reason = reason
        error = unavailable(reason)
        now = time.perf_counter_ns()
        for item in list(self.requests):
            if not item.start_ns and not item.cancelled:
                self.stats.record_failure(now - item.arrival_ns, "REJECTED")
                item.complete(error)

    def _recovered(self) -> None:
        """A stuck instance returned: serve again, unless the version retired meanwhile."""
        with self._gate:
            if self.state is not State.UNAVAILABLE or not self.stuck_reason:
                return
            self.state = State.READY
            self.reason = self.stuck_reason = ""
        log.info("model '%s' version %d is ready again", self.name, self.version)

    def _join(self, worker: InstanceWorker, deadline: float | None) -> None:
        """Wait for a worker to drain and exit, but not for one stuck past the execution
        timeout: a thread cannot be stopped, so it is left to return on its own."""
        while worker.thread.is_alive():
            if worker.stuck:
                log.warning(
                    "model '%s' version %d: instance '%s' is stuck in an execution; unloading "
                    "without waiting for it",
                    self.name,
                    self.version,
                    worker.name,
                )
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            worker.join(0.1 if left is None else min(left, 0.1))

    def _make_scheduler(self, instances: int) -> Scheduler:
        """Every instance of every group takes its batches from this one scheduler."""
        return make_scheduler(self.config, self.io, self.stats, instances)

    def unload(self, timeout: float | None = None) -> None:
        """Stop the workers once queued work is done, then release the model."""
        with self._gate:
            self.state = State.UNLOADING
            self.stuck_reason = ""
        if self.scheduler is not None and self.workers:
            self.scheduler.close(len(self.workers))
            deadline = None if timeout is None else time.monotonic() + timeout
            for worker in self.workers:
                self._join(worker, deadline)
        if self.watchdog is not None:
            self.watchdog.stop()
        self.workers.clear()
        if self.backend_model is not None:
            try:
                self.backend_model.unload()
            except Exception:
                log.exception("unloading model '%s' version %d failed", self.name, self.version)
            self.backend_model = None
        self.state = State.UNAVAILABLE
        self.reason = UNLOADED


@dataclass(slots=True)
class Model:
    """A model of the repository: its folder, its config (once parsed) and its versions."""

    name: str
    path: Path
    config: ModelConfig | None = None
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    reason: str = ""  # why the model as a whole could not load
    temp_dir: Path | None = None  # where the files of a load request were written

    def ready_versions(self) -> list[ModelVersion]:
        return [v for _, v in sorted(self.versions.items()) if v.ready]

    def newest_ready(self) -> ModelVersion | None:
        """The version an unversioned request goes to (on every request: no sorting)."""
        best: ModelVersion | None = None
        for number, version in self.versions.items():
            if version.ready and (best is None or number > best.version):
                best = version
        return best
