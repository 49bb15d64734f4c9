"""Model lifecycle: reading a model folder, loading its versions, and unloading them."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ptserve.backends.base import Backend, unsupported_model
from ptserve.common.errors import ServerError, invalid_arg, not_found, unavailable
from ptserve.config.autocomplete import auto_complete
from ptserve.config.io import model_io
from ptserve.config.parse import ModelConfig, load_config
from ptserve.config.validate import check_backend_fields, instance_group_labels, validate_config
from ptserve.core import collector
from ptserve.core.inference import load_labels
from ptserve.core.model import UNLOADED, Model, ModelVersion, State
from ptserve.core.warmup import warmup_requests
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
        self.on_version: Callable[[ModelVersion], None] | None = None  # e.g. metrics hooks
        self._lock = threading.Lock()
        self._model_locks: dict[str, threading.Lock] = {}

    def backend_for(self, config: ModelConfig, model_dir: Path) -> Backend:
        for backend in self.backends:
            if backend.claims(config, model_dir):
                return backend
        raise unsupported_model(config, model_dir.name)

    def read_config(
        self, name: str, model_dir: Path, override: ModelConfig | None = None
    ) -> tuple[ModelConfig, Backend]:
        """Parse (or take the override), auto-complete and validate a model's config.

        Only the config is looked at here, never the version folders or model files beyond
        what the backend's auto-complete reads, so a bad config is reported as such even
        when the model has no versions.
        """
        if override is not None:
            config = ModelConfig()
            config.CopyFrom(override)
        else:
            config = load_config(
                model_dir, self.options.model_config_name, required=self.options.strict_model_config
            )
        check_backend_fields(config, name)
        backend = self.backend_for(config, model_dir)
        if not self.options.strict_model_config:
            backend.complete_config(config, model_dir)
        elif not config.backend:
            config.backend = backend.name
        labels = instance_group_labels(config, name)
        gpu_count = backend.gpu_count()
        auto_complete(config, name, gpu_count)
        validate_config(config, gpu_count=gpu_count, group_labels=labels)
        return config, backend

    def _lock_for(self, name: str) -> threading.Lock:
        with self._lock:
            return self._model_locks.setdefault(name, threading.Lock())

    def load(
        self,
        name: str,
        model_dir: Path,
        override: ModelConfig | None = None,
        temp_dir: Path | None = None,
    ) -> Model:
        """Load (or reload) a model: the new versions load while the old ones keep serving, then
        the old ones retire once their requests are answered. A failure is recorded and raised;
        when an older copy of the model is still serving, it stays.
        """
        try:
            with self._lock_for(name):
                return self._load(name, model_dir, override, temp_dir)
        finally:
            collector.settle()

    def _load(
        self, name: str, model_dir: Path, override: ModelConfig | None, temp_dir: Path | None
    ) -> Model:
        started = time.monotonic()
        model = Model(name, model_dir, temp_dir=temp_dir)
        with self._lock:
            previous = self.models.get(name)
            if previous is None or not previous.ready_versions():
                self.models[name] = model  # its versions show LOADING while they load
        try:
            config, backend = self.read_config(name, model_dir, override)
            model.config = config
            io = model_io(config)
            labels = load_labels(model_dir, io)
            versions = select_versions(config, available_versions(model_dir))
            if not versions:
                raise invalid_arg(
                    f"model '{name}': no version folder of {model_dir} matches the version "
                    "policy (version folders are named by integers, e.g. 1/)"
                )
            warmup = warmup_requests(config, io, model_dir)
            backend_config = {  # the settings for every backend, then this backend's
                **self.options.backend_config.get("", {}),
                **self.options.backend_config.get(backend.name, {}),
            }
            failures: list[str] = []
            for number in versions:
                version = ModelVersion(name, number, config, io, labels=labels, warmup=warmup)
                model.versions[number] = version
                if self.on_version is not None:
                    self.on_version(version)
                try:
                    version.load(backend, model_dir, backend_config)
                    log.info(
                        "successfully loaded '%s' version %d in %.3f s",
                        name,
                        number,
                        version.load_seconds,
                    )
                except ServerError as exc:
                    version.state = State.UNAVAILABLE
                    version.reason = exc.message
                    failures.append(exc.message)
                except Exception as bug:  # a backend bug still leaves a clear reason
                    version.state = State.UNAVAILABLE
                    version.reason = f"model '{name}' version {number}: {bug}"
                    failures.append(version.reason)
            if failures:
                raise invalid_arg("; ".join(failures))
        except ServerError as exc:
            model.reason = exc.message
            log.error("failed to load '%s': %s", name, exc.message)
            if previous is not None and previous.ready_versions():
                log.warning("model '%s': the previously loaded versions keep serving", name)
                _retire(model)
            else:
                self._install(name, model, previous)
            raise
        self._install(name, model, previous)
        log.info("model '%s' loaded in %.3f s", name, time.monotonic() - started)
        return model

    def _install(self, name: str, model: Model, previous: Model | None) -> None:
        """Route new requests to ``model``, then retire what ``previous`` still serves."""
        with self._lock:
            self.models[name] = model
        if previous is not None and previous is not model:
            _retire(previous)

    def unload(self, name: str, forget: bool = False) -> None:
        """Retire every version of a model; ``forget`` also drops it from the index."""
        with self._lock_for(name):
            model = self.get_model(name)
            _retire(model)
            if not model.reason:
                model.reason = UNLOADED
            if forget:
                with self._lock:
                    if self.models.get(name) is model:
                        del self.models[name]
            log.info("successfully unloaded '%s'", name)
        collector.settle()

    def unload_all(self, timeout: float | None = None) -> None:
        with self._lock:
            models = list(self.models.values())
        for model in models:
            _retire(model, timeout)

    def get_model(self, name: str) -> Model:
        model = self.models.get(name)
        if model is None:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        return model

    def get_version(self, name: str, version: str) -> ModelVersion:
        """The version a request addresses: the newest ready one when ``version`` is empty."""
        model = self.get_model(name)
        if not version:
            newest = model.newest_ready()
            if newest is None:
                why = model.reason or "; ".join(
                    v.stuck_reason for v in model.versions.values() if v.stuck_reason
                )
                reason = f": {why}" if why else ""
                raise unavailable(
                    f"Request for unknown model: '{name}' has no available versions{reason}"
                )
            return newest
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


def _retire(model: Model, timeout: float | None = None) -> None:
    """Retire the versions still serving or loading, then drop an uploaded model's files."""
    for version in model.versions.values():
        if version.state in (State.READY, State.LOADING, State.UNLOADING) or version.stuck_reason:
            version.retire(timeout)
    _remove_temp(model)


def _remove_temp(model: Model) -> None:
    if model.temp_dir is not None:
        shutil.rmtree(model.temp_dir, ignore_errors=True)
        model.temp_dir = None
