"""The transport-agnostic server: what every frontend calls."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptserve import __version__
from ptserve.backends.base import Backend
from ptserve.config import config_to_dict
from ptserve.core.errors import ServerError, invalid_arg, not_found, unavailable
from ptserve.core.inference import build_response, prepare
from ptserve.core.manager import LoadOptions, ModelManager
from ptserve.core.model import ModelVersion
from ptserve.core.types import InferRequest, InferResponse
from ptserve.repository import scan_repositories
from ptserve.scheduling.work import WorkItem

log = logging.getLogger("ptserve.server")

EXTENSIONS = (
    "classification",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
)


@dataclass(slots=True)
class ServerOptions:
    model_repositories: list[Path] = field(default_factory=list)
    strict_model_config: bool = False
    model_config_name: str = ""
    exit_on_error: bool = True
    strict_readiness: bool = True
    backend_config: dict[str, dict[str, str]] = field(default_factory=dict)
    server_id: str = "ptserve"
    load_threads: int = 4


def default_backends() -> list[Backend]:
    from ptserve.backends.pytorch import PyTorchBackend

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
        self.startup_failures: list[str] = []

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> list[str]:
        """Load every model of the repositories; returns the failures (also logged)."""
        scan = scan_repositories(self.options.model_repositories)
        failures: list[str] = []
        for name, paths in scan.duplicates.items():
            message = (
                f"model '{name}' appears in several repositories "
                f"({', '.join(str(p) for p in paths)}); it is not loaded"
            )
            log.error(message)
            failures.append(message)
        self.live = True
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(self.options.load_threads, "model-load") as pool:
            jobs = [
                loop.run_in_executor(pool, self.manager.load, name, path)
                for name, path in scan.models.items()
            ]
            for outcome in await asyncio.gather(*jobs, return_exceptions=True):
                if isinstance(outcome, ServerError):
                    failures.append(outcome.message)
                elif isinstance(outcome, BaseException):
                    log.error("model load failed: %r", outcome)
                    failures.append(str(outcome))
        self.startup_failures = failures
        return failures

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Stop readiness, let queued work finish, and unload every model."""
        self.shutting_down = True
        await asyncio.to_thread(self.manager.unload_all, timeout)
        self.live = False

    # --- health and metadata ---------------------------------------------------------------

    @property
    def ready(self) -> bool:
        if not self.live or self.shutting_down:
            return False
        if self.options.strict_readiness:
            for model in self.manager.models.values():
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
        """Whether the model (version) can serve; raises not-found for unknown models."""
        model = self.manager.get_model(name)
        if version:
            try:
                found = model.versions.get(int(version))
            except ValueError:
                raise invalid_arg(
                    f"model '{name}': version '{version}' is not a valid number"
                ) from None
            if found is None:
                raise not_found(
                    f"Request for unknown model: '{name}' version {version} is not found"
                )
            return found.ready
        return bool(model.ready_versions())

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        target = self.manager.get_version(name, version)
        model = self.manager.get_model(name)
        io = target.io
        return {
            "name": name,
            "versions": [str(v.version) for v in model.ready_versions()],
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

    # --- inference -------------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        """Validate, queue, wait for the instance, and shape the response."""
        if self.shutting_down:
            raise unavailable("the server is shutting down and accepts no new requests")
        target = self.manager.get_version(request.model_name, request.model_version)
        prepared, requested = prepare(request, target.io)
        scheduler = target.scheduler
        if scheduler is None:
            raise unavailable(f"model '{target.name}' version {target.version} is not ready")
        item = WorkItem(prepared, asyncio.get_running_loop())
        scheduler.enqueue(item)
        outputs = await item.future
        return build_response(
            request, str(target.version), target.io, requested, outputs, target.labels
        )
