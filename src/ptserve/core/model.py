"""A loaded model version: its config, instances, scheduler, statistics and state."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from pathlib import Path

from ptserve.backends.base import Backend, BackendModel, InstanceSpec, LoadContext
from ptserve.config.parse import ModelConfig
from ptserve.core.iospec import ModelIO
from ptserve.core.stats import ModelStats
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.default import DefaultScheduler
from ptserve.scheduling.worker import InstanceWorker

log = logging.getLogger("ptserve.model")

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

    @property
    def ready(self) -> bool:
        return self.state is State.READY

    def load(self, backend: Backend, model_dir: Path, backend_config: dict[str, str]) -> None:
        """Load the backend model and start one worker per instance (on a loader thread).

        On failure everything made so far is released and the error propagates.
        """
        context = LoadContext(
            name=self.name,
            version=self.version,
            model_dir=model_dir,
            config=self.config,
            io=self.io,
            backend_config=backend_config,
        )
        try:
            self.backend_model = backend.load(context)
            instances = [
                (spec, self.backend_model.create_instance(spec))
                for spec in instance_specs(self.config)
            ]
            self.scheduler = self._make_scheduler()
            for spec, instance in instances:
                worker = InstanceWorker(spec.name, instance, self.scheduler, self.stats)
                self.workers.append(worker)
            for worker in self.workers:
                worker.start()
        except BaseException:
            self.unload()
            raise
        self.state = State.READY

    def _make_scheduler(self) -> Scheduler:
        return DefaultScheduler()

    def unload(self, timeout: float | None = None) -> None:
        """Stop the workers once queued work is done, then release the model."""
        self.state = State.UNLOADING
        if self.scheduler is not None and self.workers:
            self.scheduler.close(len(self.workers))
            for worker in self.workers:
                worker.join(timeout)
        self.workers.clear()
        if self.backend_model is not None:
            try:
                self.backend_model.unload()
            except Exception:
                log.exception("unloading model '%s' version %d failed", self.name, self.version)
            self.backend_model = None
        self.state = State.UNAVAILABLE
        self.reason = "unloaded"


@dataclass(slots=True)
class Model:
    """A model of the repository: its folder, its config (once parsed) and its versions."""

    name: str
    path: Path
    config: ModelConfig | None = None
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    reason: str = ""  # why the model as a whole could not load

    def ready_versions(self) -> list[ModelVersion]:
        return [v for _, v in sorted(self.versions.items()) if v.ready]
