"""The synchronous in-process API: ``ptserve.Server`` owns an event loop on a thread of its own
and runs the asynchronous API there, so a script or a notebook cell calls it plainly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ptserve.core.metrics import MetricsConfig
from ptserve.embedded.aio import AsyncModel, AsyncServer, Repository, Version
from ptserve.embedded.arrays import capture, claim
from ptserve.embedded.loop import LoopThread


class Model:
    """One model (or one version of it) of a ``Server``."""

    def __init__(self, server: Server, name: str, version: Version = None) -> None:
        self._thread = server._thread
        self._model = AsyncModel(server.aio, name, version)

    @property
    def name(self) -> str:
        return self._model.name

    def infer(
        self,
        inputs: Mapping[str, object],
        outputs: Sequence[str] | None = None,
        parameters: Mapping[str, Any] | None = None,
        request_id: str = "",
    ) -> dict[str, Any]:
        """Run one request; see ``AsyncModel.infer``. CUDA streams are per thread, so device
        inputs are captured, and device outputs claimed, here on the caller's thread."""
        captured = capture(inputs)
        result = self._thread.run(self._model.infer(captured, outputs, parameters, request_id))
        claim(result)
        return result

    def ready(self) -> bool:
        return self._thread.call(self._model.ready)

    def metadata(self) -> dict[str, Any]:
        return self._thread.call(self._model.metadata)

    def config(self) -> dict[str, Any]:
        return self._thread.call(self._model.config)

    def statistics(self) -> dict[str, Any]:
        return self._thread.call(self._model.statistics)


class Server:
    """The core without listeners, loaded and ready when the constructor returns; ``close()``
    (or leaving a ``with`` block) unloads everything and stops its thread. The arguments are
    ``AsyncServer``'s."""

    def __init__(
        self,
        model_repository: Repository,
        *,
        exit_timeout: float = 30.0,
        metrics_config: MetricsConfig | None = None,
        **options: Any,
    ) -> None:
        self._thread = LoopThread()
        try:
            self.aio: AsyncServer = self._thread.run(
                _started(model_repository, exit_timeout, metrics_config, options)
            )
        except BaseException:
            self._thread.stop()
            raise

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return not self._thread.running

    def model(self, name: str, version: Version = None) -> Model:
        return Model(self, name, version)

    def infer(
        self,
        model: str,
        inputs: Mapping[str, object],
        outputs: Sequence[str] | None = None,
        parameters: Mapping[str, Any] | None = None,
        version: Version = None,
        request_id: str = "",
    ) -> dict[str, Any]:
        return self.model(model, version).infer(inputs, outputs, parameters, request_id)

    @property
    def live(self) -> bool:
        return not self.closed and self.aio.live

    @property
    def ready(self) -> bool:
        return not self.closed and self._thread.call(lambda: self.aio.ready)

    def metadata(self) -> dict[str, Any]:
        return self._thread.call(self.aio.metadata)

    def model_ready(self, name: str, version: Version = None) -> bool:
        return self._thread.call(self.aio.model_ready, name, version)

    def model_metadata(self, name: str, version: Version = None) -> dict[str, Any]:
        return self._thread.call(self.aio.model_metadata, name, version)

    def model_config(self, name: str, version: Version = None) -> dict[str, Any]:
        return self._thread.call(self.aio.model_config, name, version)

    def statistics(self, name: str = "", version: Version = None) -> dict[str, Any]:
        return self._thread.call(self.aio.statistics, name, version)

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return self._thread.call(self.aio.repository_index, ready_only)

    def load_model(
        self,
        name: str,
        config: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        self._thread.run(self.aio.load_model(name, config, files))

    def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self._thread.run(self.aio.unload_model(name, unload_dependents))

    def serve_http(self, port: int = 8000, address: str = "127.0.0.1", **settings: Any) -> int:
        """Open the HTTP frontend; see ``AsyncServer.serve_http``. Returns the port."""
        return self._thread.run(self.aio.serve_http(port, address, **settings))

    def serve_grpc(self, port: int = 8001, address: str = "127.0.0.1", **settings: Any) -> int:
        """Open the gRPC frontend; see ``AsyncServer.serve_grpc``. Returns the port."""
        return self._thread.run(self.aio.serve_grpc(port, address, **settings))

    def serve_metrics(self, port: int = 8002, address: str = "127.0.0.1") -> int:
        return self._thread.run(self.aio.serve_metrics(port, address))

    def close(self) -> None:
        """Shut down as ``AsyncServer.close`` does, then stop the loop's thread; idempotent."""
        if self.closed:
            return
        try:
            self._thread.run(self.aio.close())
        finally:
            self._thread.stop()


async def _started(
    model_repository: Repository,
    exit_timeout: float,
    metrics_config: MetricsConfig | None,
    options: dict[str, Any],
) -> AsyncServer:
    """Made on the loop's thread, where the core's state will live."""
    server = AsyncServer(
        model_repository, exit_timeout=exit_timeout, metrics_config=metrics_config, **options
    )
    return await server.start()
