"""The asynchronous in-process API: the core on the caller's running event loop.

Every call goes to the same ``InferenceServer`` methods the HTTP and gRPC frontends call, so
requests are checked, scheduled, counted in the statistics and traced exactly as theirs are;
errors are the same ``ServerError`` (status and message) the wire APIs answer with.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import orjson

from ptserve.common.errors import unavailable
from ptserve.common.requests import InferRequest, RequestedOutput
from ptserve.core.metrics import Metrics, MetricsConfig
from ptserve.core.server import InferenceServer, ServerOptions
from ptserve.embedded.arrays import capture, claim, from_response, output_device, to_tensor
from ptserve.frontends.listeners import (
    GrpcSettings,
    HttpSettings,
    bound_port,
    start_grpc,
    start_http,
)
from ptserve.frontends.metrics import start_metrics_server
from ptserve.repository.remote import is_remote

log = logging.getLogger("ptserve.embedded")

Repository = str | Path | Sequence[str | Path]
Version = int | str | None


def server_options(model_repository: Repository, options: Mapping[str, Any]) -> ServerOptions:
    """``ServerOptions`` from the repository (or several) and its other fields by name."""
    if isinstance(model_repository, str | Path):
        model_repository = [model_repository]
    repositories: list[str | Path] = [
        str(r) if is_remote(str(r)) else Path(r) for r in model_repository
    ]
    known = {f.name for f in fields(ServerOptions)} - {"model_repositories"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(
            f"unknown server option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return ServerOptions(model_repositories=repositories, **options)


def _version(version: Version) -> str:
    return "" if version is None else str(version)


class AsyncModel:
    """One model (or one version of it) of an ``AsyncServer``."""

    def __init__(self, server: AsyncServer, name: str, version: Version = None) -> None:
        self.server = server
        self.name = name
        self.version = _version(version)

    async def infer(
        self,
        inputs: Mapping[str, object],
        outputs: Sequence[str] | None = None,
        parameters: Mapping[str, Any] | None = None,
        request_id: str = "",
    ) -> dict[str, Any]:
        """Run one request. ``inputs``: name → numpy array or torch tensor; ``outputs``: the
        outputs to return (default all). Returns name → array: torch tensors on the first torch
        input's device when any input is a torch tensor, else numpy arrays. CUDA tensors are
        used in place: they must be ready on this thread's current stream, and outputs are."""
        inputs = capture(inputs)
        request = InferRequest(
            model_name=self.name,
            model_version=self.version,
            id=request_id,
            inputs=[to_tensor(name, value) for name, value in inputs.items()],
            outputs=None if outputs is None else [RequestedOutput(name) for name in outputs],
            parameters=dict(parameters or {}),
        )
        response = await self.server.core.infer(request)
        result = from_response(response, output_device(inputs))
        claim(result)
        return result

    def ready(self) -> bool:
        return self.server.core.model_ready(self.name, self.version)

    def metadata(self) -> dict[str, Any]:
        return self.server.core.model_metadata(self.name, self.version)

    def config(self) -> dict[str, Any]:
        return self.server.core.model_config(self.name, self.version)

    def statistics(self) -> dict[str, Any]:
        return self.server.core.statistics(self.name, self.version)


class AsyncServer:
    """The core without listeners, on the running loop: ``async with AsyncServer(...) as s``
    (or ``await AsyncServer(...).start()`` and ``await s.close()``).

    ``options`` are ``ServerOptions`` fields (e.g. ``model_control_mode="explicit"``,
    ``load_models=[...]``, ``exit_on_error=False``); ``exit_timeout`` is how long ``close``
    lets requests in flight finish (the command's ``--exit-timeout-secs``).
    """

    def __init__(
        self,
        model_repository: Repository,
        *,
        exit_timeout: float = 30.0,
        metrics_config: MetricsConfig | None = None,
        **options: Any,
    ) -> None:
        self.core = InferenceServer(server_options(model_repository, options))
        self.exit_timeout = exit_timeout
        # Made before the models load, as the command does, so latencies count from the start.
        self.metrics = Metrics(self.core, metrics_config or MetricsConfig())
        self._listeners: list[asyncio.Server] = []
        self._grpc: list[Any] = []
        self._started = False

    async def start(self) -> AsyncServer:
        """Load the models; with ``exit_on_error`` (the default) a failure to load shuts the
        server down again and raises ServerError (UNAVAILABLE) naming the failures."""
        if self._started:
            return self
        self._started = True
        failures = await self.core.start()
        if failures and self.core.options.exit_on_error:
            await self.core.shutdown(self.exit_timeout)
            raise unavailable(
                f"{len(failures)} model(s) failed to load (exit_on_error=False serves the "
                f"rest): {'; '.join(failures)}"
            )
        return self

    async def __aenter__(self) -> AsyncServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- models ----------------------------------------------------------------------------

    def model(self, name: str, version: Version = None) -> AsyncModel:
        """A handle on one model (its latest ready version, or ``version``); nothing is
        checked until it is used."""
        return AsyncModel(self, name, version)

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, object],
        outputs: Sequence[str] | None = None,
        parameters: Mapping[str, Any] | None = None,
        version: Version = None,
        request_id: str = "",
    ) -> dict[str, Any]:
        return await self.model(model, version).infer(inputs, outputs, parameters, request_id)

    @property
    def live(self) -> bool:
        return self.core.live

    @property
    def ready(self) -> bool:
        return self.core.ready

    def metadata(self) -> dict[str, Any]:
        return self.core.metadata()

    def model_ready(self, name: str, version: Version = None) -> bool:
        return self.core.model_ready(name, _version(version))

    def model_metadata(self, name: str, version: Version = None) -> dict[str, Any]:
        return self.core.model_metadata(name, _version(version))

    def model_config(self, name: str, version: Version = None) -> dict[str, Any]:
        return self.core.model_config(name, _version(version))

    def statistics(self, name: str = "", version: Version = None) -> dict[str, Any]:
        return self.core.statistics(name, _version(version))

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self.core.repository_index(ready_only)

    async def load_model(
        self,
        name: str,
        config: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """Load or reload (``model_control_mode="explicit"``), optionally with a config (JSON
        text or a dict, as the repository API's ``config`` parameter) and the model's files."""
        text = config if config is None or isinstance(config, str) else orjson.dumps(config)
        await self.core.load_model(
            name, text.decode() if isinstance(text, bytes) else text, dict(files or {})
        )

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        await self.core.unload_model(name, unload_dependents)

    # --- listeners -------------------------------------------------------------------------

    async def serve_http(
        self, port: int = 8000, address: str = "127.0.0.1", **settings: Any
    ) -> int:
        """Open the HTTP frontend on this server, as ``ptserve --http-port`` does; ``settings``
        are ``HttpSettings`` fields. Returns the port (the system's choice for 0)."""
        listener = await start_http(
            self.core, HttpSettings(address=address, port=port, **settings), self.metrics
        )
        self._listeners.append(listener)
        bound = bound_port(listener, port)
        log.info("Started HTTPService at %s:%d", address, bound)
        return bound

    async def serve_grpc(
        self, port: int = 8001, address: str = "127.0.0.1", **settings: Any
    ) -> int:
        """Open the gRPC frontend, as ``ptserve --grpc-port`` does; ``settings`` are
        ``GrpcSettings`` fields. Returns the port (the system's choice for 0 with the native
        transport)."""
        listener = await start_grpc(self.core, GrpcSettings(address=address, port=port, **settings))
        self._grpc.append(listener)
        bound = bound_port(listener, port)
        log.info("Started GRPCInferenceService at %s:%d", address, bound)
        return bound

    async def serve_metrics(self, port: int = 8002, address: str = "127.0.0.1") -> int:
        """Open the metrics port (``GET /metrics``). Returns the port."""
        listener = await start_metrics_server(self.metrics, address, port)
        self._listeners.append(listener)
        return bound_port(listener, port)

    async def close(self) -> None:
        """Refuse new requests, let those in flight finish (up to ``exit_timeout``), unload
        every model and close the listeners, as the command does on SIGTERM."""
        if self._started and self.core.live:
            await self.core.shutdown(self.exit_timeout)
        for listener in self._listeners:
            listener.close()
        for grpc_server in self._grpc:
            await grpc_server.stop(1.0)
        self._listeners.clear()
        self._grpc.clear()
