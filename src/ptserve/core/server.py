"""The transport-agnostic server: what every frontend calls."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptserve.backends.base import Backend
from ptserve.backends.pytorch.backend import PyTorchBackend
from ptserve.common import logging_setup
from ptserve.common.errors import ServerError, Status, invalid_arg, unavailable
from ptserve.common.loops import IdlePoll, running_loop
from ptserve.common.requests import InferRequest, InferResponse
from ptserve.common.version import __version__
from ptserve.config.render import config_to_dict
from ptserve.core.control import ModelControl
from ptserve.core.inference import build_response, prepare
from ptserve.core.manager import LoadOptions, ModelManager
from ptserve.core.model import UNLOADED, ModelVersion
from ptserve.core.shared_memory import SharedMemoryRegistry
from ptserve.core.trace_records import Trace
from ptserve.core.trace_settings import TraceSettings, TraceValue, parse_config
from ptserve.core.tracing import Tracer
from ptserve.repository import RepositoryOptions
from ptserve.scheduling.params import request_options
from ptserve.scheduling.work import WorkItem

log = logging_setup.module_logger("ptserve.server", __file__)

# The live log settings: whether requests get ids and a log context (see ``infer``).
_LOG = logging_setup.settings()

EXTENSIONS = (
    "classification",
    "sequence",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "logging",
    "trace",
    "system_shared_memory",
)


@dataclass(slots=True)
class ServerOptions:
    model_repositories: list[str | Path] = field(default_factory=list)  # paths or s3:// URLs
    strict_model_config: bool = False
    model_config_name: str = ""
    exit_on_error: bool = True
    strict_readiness: bool = True
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    server_id: str = "ptserve"
    load_threads: int = 4
    allow_client_shm: bool = False
    model_control_mode: str = "none"
    load_models: list[str] = field(default_factory=list)
    repository_poll_secs: float = 15.0
    idle_poll_us: int = 0  # see common.loops.IdlePoll (the CLI's default: DEFAULT_IDLE_POLL_US)
    repository_options: RepositoryOptions = field(default_factory=RepositoryOptions)


def default_backends() -> list[Backend]:
    return [PyTorchBackend()]


class InferenceServer:
    """Models, their readiness, and inference; knows nothing of HTTP or gRPC."""

    def __init__(self, options: ServerOptions, backends: list[Backend] | None = None) -> None:
        self.options = options
        self.manager = ModelManager(
            backends if backends is not None else default_backends(),
            LoadOptions(
                strict_model_config=options.strict_model_config,
                model_config_name=options.model_config_name,
                backend_config=options.backend_config,
            ),
        )
        self.live = False
        self.shutting_down = False
        self.shared_memory = SharedMemoryRegistry(options.allow_client_shm)
        self.trace_settings = TraceSettings()
        self.tracer = Tracer(self.trace_settings)
        self.control = ModelControl(
            self.manager,
            options.model_repositories,
            options.model_control_mode,
            options.load_models,
            options.repository_poll_secs,
            options.load_threads,
            options.repository_options,
        )
        self.active_requests = 0  # inference requests between arrival and answer
        self.idle_poll = IdlePoll(options.idle_poll_us * 1000, self._busy)

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> list[str]:
        """Load the models the control mode loads at start; returns the failures (also logged)."""
        self.live = True
        return await self.control.start()

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Turn readiness off and refuse new requests at once; let those in flight finish (up to
        ``timeout`` seconds), then unload every model."""
        self.shutting_down = True
        await self.control.stop()
        deadline = time.monotonic() + timeout
        if self.active_requests:
            log.info("waiting for %d request(s) in flight", self.active_requests)
        while self.active_requests and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self.active_requests:
            log.warning(
                "exit timeout of %.0f s passed with %d request(s) still in flight",
                timeout,
                self.active_requests,
            )
        await asyncio.to_thread(self.manager.unload_all, max(deadline - time.monotonic(), 1.0))
        await asyncio.to_thread(self.tracer.close)
        self.shared_memory.close()
        self.live = False

    # --- health and metadata ---------------------------------------------------------------

    @property
    def ready(self) -> bool:
        if not self.live or self.shutting_down:
            return False
        if self.options.strict_readiness:
            for model in list(self.manager.models.values()):
                if model.reason == UNLOADED:
                    continue  # unloaded on request: no longer part of what must be ready
                if model.reason or not model.ready_versions():
                    return False
        return True

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.options.server_id,
            "version": __version__,
            "extensions": list(EXTENSIONS),
        }

    def model_ready(self, name: str, version: str = "") -> bool:
        """Whether the model (version) can serve; False for unknown models and versions, as the
        reference answers (only a version that is not a number is an error)."""
        number = 0
        if version:
            try:
                number = int(version)
            except ValueError:
                raise invalid_arg(
                    f"model '{name}': version '{version}' is not a valid number"
                ) from None
        try:
            model = self.manager.get_model(name)
        except ServerError:
            return False
        if number:
            found = model.versions.get(number)
            return found is not None and found.ready
        return bool(model.ready_versions())

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        target = self.manager.get_version(name, version)
        model = self.manager.get_model(name)
        io = target.io
        # One version asked for: only that one, as the reference lists it.
        versions = [target] if version else model.ready_versions()
        return {
            "name": name,
            "versions": [str(v.version) for v in versions],
            "platform": target.config.platform,
            "inputs": [
                {"name": s.name, "datatype": s.datatype.name, "shape": s.full_shape(io.batching)}
                for s in io.inputs
            ],
            "outputs": [
                {"name": s.name, "datatype": s.datatype.name, "shape": s.full_shape(io.batching)}
                for s in io.outputs
            ],
        }

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return config_to_dict(self.manager.get_version(name, version).config)

    def model_version(self, name: str, version: str = "") -> ModelVersion:
        return self.manager.get_version(name, version)

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        entries: list[dict[str, Any]] = []
        if name:
            model = self.manager.get_model(name)
            if version:
                targets = [self.manager.get_version(name, version)]
            else:
                targets = model.ready_versions()
        else:
            targets = [
                v
                for m in sorted(self.manager.models.values(), key=lambda m: m.name)
                for v in m.ready_versions()
            ]
        for target in targets:
            entries.append(target.stats.snapshot(target.name, str(target.version)))
        return {"model_stats": entries}

    # --- repository ------------------------------------------------------------------------

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Every model version known, with its state and why it is not ready."""
        index: list[dict[str, str]] = []
        if not ready_only and self.control.mode == "explicit":
            index += [{"name": n} for n in self.control.unloaded_names()]
        for name, model in sorted(self.manager.models.items()):
            if not model.versions and not ready_only:
                index.append(
                    {"name": name, "version": "", "state": "UNAVAILABLE", "reason": model.reason}
                )
            for number, version in sorted(model.versions.items()):
                if ready_only and not version.ready:
                    continue
                index.append(
                    {
                        "name": name,
                        "version": str(number),
                        "state": version.state.value,
                        "reason": "" if version.ready else version.reason,
                    }
                )
        index.sort(key=lambda e: (e["name"], int(e.get("version") or 0)))
        return index

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Load or reload ``name`` (explicit mode), optionally with a JSON config override and
        the model's files; a model that fails to load answers with the reason."""
        self.control.check_explicit()
        await asyncio.to_thread(self.control.load, name, config, dict(files or {}))

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self.control.check_explicit()
        await asyncio.to_thread(self.control.unload, name, unload_dependents)

    # --- logging and trace settings -----------------------------------------------------------

    def log_settings(self) -> dict[str, bool | int | str]:
        return logging_setup.settings().as_dict()

    def update_log_settings(self, changes: dict[str, Any]) -> dict[str, bool | int | str]:
        """Validate every change first, then apply them together; returns the new settings."""
        current = logging_setup.settings()
        new = logging_setup.LogSettings(
            current.log_info,
            current.log_warning,
            current.log_error,
            current.log_verbose_level,
            current.log_format,
        )
        for key, value in changes.items():
            if key in ("log_info", "log_warning", "log_error"):
                if not isinstance(value, bool):
                    raise invalid_arg(f"log setting '{key}' must be a boolean, got {value!r}")
                setattr(new, key, value)
            elif key == "log_verbose_level":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise invalid_arg(
                        f"log setting '{key}' must be a non-negative integer, got {value!r}"
                    )
                new.log_verbose_level = value
            elif key == "log_format":
                if value not in logging_setup.LOG_FORMATS:
                    raise invalid_arg(
                        f"log setting 'log_format' must be one of "
                        f"{', '.join(logging_setup.LOG_FORMATS)}, got {value!r}"
                    )
                new.log_format = value
            elif key == "log_file":
                if value != "":
                    raise invalid_arg(
                        "log setting 'log_file' cannot be changed: ptserve logs to stderr"
                    )
            else:
                raise invalid_arg(
                    f"unknown log setting '{key}'; known settings: {', '.join(current.as_dict())}"
                )
        logging_setup.apply(new)
        log.info("log settings updated: %s", new.as_dict())
        return new.as_dict()

    def get_trace_settings(self, model: str = "") -> dict[str, TraceValue]:
        if model:
            self.manager.get_model(model)
        values = self.trace_settings.get(model)
        remaining = self.tracer.remaining(model)
        if remaining is not None:
            values["trace_count"] = str(remaining)
        return values

    def update_trace_settings(
        self, changes: dict[str, TraceValue | None], model: str = ""
    ) -> dict[str, TraceValue]:
        if model:
            self.manager.get_model(model)
        self.tracer.check_mode(changes)  # before anything changes: the mode must be usable
        self.trace_settings.update(changes, model)
        self.tracer.reset()
        return self.trace_settings.get(model)

    def configure_traces(self, items: list[tuple[str, str]]) -> None:
        """The initial trace settings, as ``--trace-config`` items parsed by
        ``trace_settings.parse_config_item``: global settings and the OpenTelemetry exporter's
        (which hold for the process). Raises ServerError for a setting that cannot work."""
        changes, otel = parse_config(items)
        self.trace_settings.otel = otel
        if changes:
            self.update_trace_settings(dict(changes))

    # --- inference -------------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        """Validate, queue, wait for the instance, and shape the response."""
        if self.shutting_down:
            raise unavailable("the server is shutting down and accepts no new requests")
        if _LOG.per_request and logging_setup.REQUEST.get() is None:
            return await self._infer_logged(request)
        trace = self.tracer.begin(request.model_name, request.id)
        if trace is not None:
            trace.mark("REQUEST_START")
        self.active_requests += 1
        try:
            response = await self._infer(request, trace)
        except ServerError as exc:
            if trace is not None:
                trace.error, trace.status = exc.message, exc.status.name
            raise
        finally:
            self.active_requests -= 1
            if not self.active_requests:
                self.idle_poll.settle()
            if trace is not None:
                trace.mark("REQUEST_END")
                self.tracer.end(trace)
        return response

    async def _infer_logged(self, request: InferRequest) -> InferResponse:
        """``infer`` with the request's id (the client's, else a new one) and model in the log
        context of every line logged while it runs (``--log-format json``), and a verbose line
        when it ends. A new id stays out of the response, which names only a client's id."""
        generated = not request.id
        if generated:
            request.id = logging_setup.new_request_id()
        token = logging_setup.REQUEST.set(
            logging_setup.RequestFields(request.model_name, request.model_version, request.id)
        )
        start = time.perf_counter_ns()
        try:
            response = await self.infer(request)
            log.debug(
                "request for model '%s' version %s answered in %d us",
                response.model_name,
                response.model_version,
                (time.perf_counter_ns() - start) // 1000,
            )
        except ServerError as exc:
            log.debug(
                "request for model '%s' failed with %s after %d us: %s",
                request.model_name,
                exc.status.name,
                (time.perf_counter_ns() - start) // 1000,
                exc.message,
            )
            raise
        finally:
            logging_setup.REQUEST.reset(token)
            if generated:
                request.id = ""
        if generated:
            response.id = ""
        return response

    def _busy(self) -> bool:
        return self.active_requests > 0

    def _acquire(self, request: InferRequest) -> ModelVersion:
        """The version to run on, counted in so that a reload waits for this request."""
        for _ in range(3):  # a reload may retire the version between lookup and acquire
            target = self.manager.get_version(request.model_name, request.model_version)
            if target.acquire():
                return target
        raise unavailable(f"model '{request.model_name}' is being reloaded; retry the request")

    async def _infer(self, request: InferRequest, trace: Trace | None) -> InferResponse:
        target = self._acquire(request)
        arrival = time.perf_counter_ns()
        try:
            try:
                prepared, requested = prepare(request, target.io)
                options = request_options(request.parameters)
                pool = target.pool
                if pool is None:
                    raise unavailable(
                        f"model '{target.name}' version {target.version} is not ready"
                    )
                item = WorkItem(prepared, running_loop(), options, trace)
                pool.submit(item)
            except ServerError as exc:
                reason = "REJECTED" if exc.status is Status.UNAVAILABLE else "OTHER"
                target.stats.record_failure(time.perf_counter_ns() - arrival, reason)
                raise
            target.requests.add(item)
            try:
                outputs = await item.future
            except asyncio.CancelledError:
                # The client went away. A request still queued is skipped by the scheduler and
                # counted here; one already running is counted by its worker.
                if not item.start_ns:
                    target.stats.record_failure(time.perf_counter_ns() - arrival, "CANCELED")
                raise
            finally:
                target.requests.discard(item)
                if trace is not None:
                    trace.model_version = target.version
                    trace.mark("QUEUE_START", item.enqueue_ns)
                    if item.start_ns:
                        trace.mark("COMPUTE_START", item.start_ns)
                        trace.mark("COMPUTE_END", item.end_ns or None)
        finally:
            target.release()
        return build_response(
            request, str(target.version), target.io, requested, outputs, target.labels
        )
