"""Model lifecycle: reading a model folder, loading its versions, and unloading them."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ptserve.backends.base import Backend, unsupported_model
from ptserve.config import auto_complete, load_config, validate_config
from ptserve.config.parse import ModelConfig
from ptserve.core.errors import ServerError, invalid_arg, not_found, unavailable
from ptserve.core.inference import load_labels
from ptserve.core.iospec import model_io
from ptserve.core.model import Model, ModelVersion, State
from ptserve.repository import available_versions, select_versions

log = logging.getLogger("ptserve.manager")


@dataclass(slots=True)
class LoadOptions:
    """What the command line decides about loading models."""

    strict_model_config: bool = False
    model_config_name: str = ""
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)


class ModelManager:
    """Holds every known model; loading runs on worker threads, never on the event loop."""

    def __init__(self, backends: list[Backend], options: LoadOptions) -> None:
        self.backends = backends
        self.options = options
        self.models: dict[str, Model] = {}
        self._lock = threading.Lock()

    def backend_for(self, config: ModelConfig, model_dir: Path) -> Backend:
        for backend in self.backends:
            if backend.claims(config, model_dir):
                return backend
        raise unsupported_model(config, model_dir.name)

    def read_config(self, name: str, model_dir: Path) -> tuple[ModelConfig, Backend]:
        """Parse, auto-complete and validate a model's config."""
        config = load_config(
            model_dir, self.options.model_config_name, required=self.options.strict_model_config
        )
        backend = self.backend_for(config, model_dir)
        if not self.options.strict_model_config:
            backend.complete_config(config, model_dir)
        elif not config.backend:
            config.backend = backend.name
        auto_complete(config, name, backend.gpu_count())
        validate_config(config)
        return config, backend

    def load(self, name: str, model_dir: Path) -> Model:
        """Load (or reload) a model; a failure is recorded on the model and raised."""
        started = time.monotonic()
        model = Model(name, model_dir)
        with self._lock:
            previous = self.models.get(name)
            self.models[name] = model if previous is None else previous
        try:
            config, backend = self.read_config(name, model_dir)
            model.config = config
            io = model_io(config)
            labels = load_labels(model_dir, io)
            versions = select_versions(config, available_versions(model_dir))
            if not versions:
                raise invalid_arg(
                    f"model '{name}': no version folder of {model_dir} matches the version "
                    "policy (version folders are named by integers, e.g. 1/)"
                )
            backend_config = self.options.backend_config.get(backend.name, {})
            failures: list[str] = []
            for number in versions:
                version = ModelVersion(name, number, config, io, labels=labels)
                model.versions[number] = version
                try:
                    version.load(backend, model_dir, backend_config)
                    log.info("successfully loaded '%s' version %d", name, number)
                except ServerError as exc:
                    version.state = State.UNAVAILABLE
                    version.reason = exc.message
                    failures.append(exc.message)
                except Exception as exc:  # a backend bug still leaves a clear reason
                    version.state = State.UNAVAILABLE
                    version.reason = f"model '{name}' version {number}: {exc}"
                    failures.append(version.reason)
            if failures:
                raise invalid_arg("; ".join(failures))
        except ServerError as exc:
            model.reason = exc.message
            log.error("failed to load '%s': %s", name, exc.message)
            self._install(name, model, previous)
            raise
        self._install(name, model, previous)
        log.info("model '%s' loaded in %.3f s", name, time.monotonic() - started)
        return model

    def _install(self, name: str, model: Model, previous: Model | None) -> None:
        with self._lock:
            self.models[name] = model
        if previous is not None and previous is not model:
            for version in previous.versions.values():
                if version.ready:
                    version.unload()

    def unload_all(self, timeout: float | None = None) -> None:
        with self._lock:
            models = list(self.models.values())
        for model in models:
            for version in model.versions.values():
                if version.state in (State.READY, State.LOADING):
                    version.unload(timeout)

    def get_model(self, name: str) -> Model:
        model = self.models.get(name)
        if model is None:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        return model

    def get_version(self, name: str, version: str) -> ModelVersion:
        """The version a request addresses: the newest ready one when ``version`` is empty."""
        model = self.get_model(name)
        if not version:
            ready = model.ready_versions()
            if not ready:
                reason = f": {model.reason}" if model.reason else ""
                raise unavailable(
                    f"Request for unknown model: '{name}' has no available versions{reason}"
                )
            return ready[-1]
        try:
            number = int(version)
        except ValueError:
            raise invalid_arg(
                f"model '{name}': version '{version}' is not a valid version number"
            ) from None
        found = model.versions.get(number)
        if found is None:
            raise not_found(f"Request for unknown model: '{name}' version {number} is not found")
        if not found.ready:
            reason = f": {found.reason}" if found.reason else ""
            raise unavailable(
                f"Request for unknown model: '{name}' version {number} is not at ready state"
                f"{reason}"
            )
        return found
