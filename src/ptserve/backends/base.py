"""The backend interface: what the core needs from a framework to serve its models."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ptserve.common.errors import ServerError, invalid_arg
from ptserve.common.iospec import ModelIO
from ptserve.common.prepared import BatchResult, PreparedRequest
from ptserve.config.parse import ModelConfig


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """One instance to create: its name, its kind and the device index (GPU id or -1)."""

    name: str
    kind: str  # "KIND_CPU", "KIND_GPU" or "KIND_MODEL"
    device_id: int = -1


@dataclass(slots=True)
class LoadContext:
    """What a backend gets to load one version of a model."""

    name: str
    version: int
    model_dir: Path
    config: ModelConfig
    io: ModelIO
    backend_config: Mapping[str, str] = field(default_factory=dict)

    @property
    def version_dir(self) -> Path:
        return self.model_dir / str(self.version)


class BackendInstance(abc.ABC):
    """A model instance: runs one batch at a time on its own worker thread."""

    @abc.abstractmethod
    def execute(self, batch: Sequence[PreparedRequest]) -> BatchResult:
        """Run the batch; errors are returned per request, never raised."""

    def prepare(self) -> None:  # noqa: B027 - optional hook
        """Get ready to serve, on the worker thread that will run every execution (a warm-up
        that compiles: torch.compile's CUDA graphs belong to the thread that records them).
        Raises ServerError to fail the load."""

    def unload(self) -> None:  # noqa: B027 - optional hook
        """Release what the instance holds."""


class BackendModel(abc.ABC):
    """One loaded version of a model, from which instances are made."""

    @abc.abstractmethod
    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        """Make an instance; raises ServerError when it cannot."""

    def unload(self) -> None:  # noqa: B027 - optional hook
        """Release what the model holds beyond its instances."""


class Backend(abc.ABC):
    """A framework's entry point."""

    name: str

    @abc.abstractmethod
    def claims(self, config: ModelConfig, model_dir: Path) -> bool:
        """Whether this backend serves the model (by platform, backend or files)."""

    @abc.abstractmethod
    def complete_config(self, config: ModelConfig, model_dir: Path) -> None:
        """Fill in platform, backend and default file name."""

    @abc.abstractmethod
    def gpu_count(self) -> int:
        """How many GPUs this backend can use."""

    @abc.abstractmethod
    def load(self, context: LoadContext) -> BackendModel:
        """Load one version; raises ServerError naming the model and the reason."""


def unsupported_model(config: ModelConfig, model_name: str) -> ServerError:
    what = config.platform or config.backend or "none"
    return invalid_arg(
        f"model '{model_name}': unsupported platform/backend '{what}'; ptserve serves PyTorch "
        "models (platform 'pytorch_libtorch' or 'torch_aoti', or backend 'pytorch')"
    )
