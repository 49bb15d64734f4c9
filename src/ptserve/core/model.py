"""A loaded model version: its config, instances, scheduler, statistics and state."""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ptserve.backends.base import (
    Backend,
    BackendInstance,
    BackendModel,
    InstanceSpec,
    LoadContext,
)
from ptserve.common.errors import unavailable
from ptserve.common.iospec import ModelIO
from ptserve.common.prepared import PreparedRequest
from ptserve.common.stats import ModelStats
from ptserve.common.sync import Condition
from ptserve.config.parameters import execution_timeout_ms, max_inline_execution_us
from ptserve.config.parse import ModelConfig
from ptserve.core.warmup import run_warmup
from ptserve.scheduling.factory import make_scheduler
from ptserve.scheduling.watchdog import Watchdog
from ptserve.scheduling.work import WorkItem
from ptserve.scheduling.worker import InstanceWorker, WorkerPool, inline_limit_ns

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
    pool: WorkerPool | None = None  # the instance workers and their scheduler, once loaded
    backend_model: BackendModel | None = None
    labels: dict[str, list[str]] = field(default_factory=dict)
    warmup: list[tuple[str, int, PreparedRequest]] = field(default_factory=list)
    load_seconds: float = 0.0
    # Requests between lookup and answer: a version retires only once they are all answered.
    inflight: int = 0
    requests: set[WorkItem] = field(default_factory=set)  # queued or running (for metrics)
    watchdog: Watchdog | None = None  # with EXECUTION_TIMEOUT_MS
    stuck_reason: str = ""  # set while every instance is stuck past the execution timeout
    _gate: Condition = field(default_factory=Condition)

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
        """Load the backend model and start one worker per instance, which warms its instance
        up on its own thread before the version is ready (this runs on a loader thread). On
        failure everything made so far is released and raised.
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
        workers: list[InstanceWorker] = []
        try:
            timeout_ms = execution_timeout_ms(self.config)
            max_inline_us = max_inline_execution_us(self.config)
            self.backend_model = backend.load(context)
            for spec in instance_specs(self.config):
                instances.append((spec, self.backend_model.create_instance(spec)))
            # Every instance of every group takes its batches from this one scheduler.
            scheduler = make_scheduler(self.config, self.io, self.stats, len(instances))
            for index, (spec, instance) in enumerate(instances):
                inline_ns = inline_limit_ns(spec.kind, max_inline_us, timeout_ms)
                workers.append(
                    InstanceWorker(
                        spec.name,
                        index,
                        instance,
                        scheduler,
                        self.stats,
                        inline_ns,
                        (self.name, str(self.version)),
                        partial(self._prepare, spec.name, instance),
                    )
                )
            if timeout_ms:
                self.watchdog = Watchdog(
                    self.name,
                    self.version,
                    timeout_ms,
                    scheduler,
                    self.stats,
                    self._all_stuck,
                    self._recovered,
                )
                for worker in workers:
                    worker.watchdog = self.watchdog
                self.watchdog.watch([worker.execution for worker in workers])
            self.pool = WorkerPool(scheduler, workers)
            self.pool.start()
        except BaseException:
            if self.pool is None:  # no worker thread started that would release them
                for _, instance in instances:
                    instance.unload()
            self.unload()
            raise
        self.load_seconds = time.monotonic() - started
        self.state = State.READY

    def _prepare(self, instance_name: str, instance: BackendInstance) -> None:
        """On the instance's worker thread, before it serves: the backend's own warm-up, then
        the config's ``model_warmup`` samples."""
        instance.prepare()
        if self.warmup:
            run_warmup(self.name, instance_name, instance, self.warmup)

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

    def unload(self, timeout: float | None = None) -> None:
        """Stop the workers once queued work is done, then release the model."""
        with self._gate:
            self.state = State.UNLOADING
            self.stuck_reason = ""
        if self.pool is not None:
            self.pool.stop(f"model '{self.name}' version {self.version}", timeout)
            self.pool = None
        if self.watchdog is not None:
            self.watchdog.stop()
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
