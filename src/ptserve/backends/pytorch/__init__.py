"""The PyTorch backend: TorchScript models (``pytorch_libtorch``)."""

from __future__ import annotations

from pathlib import Path

import torch

from ptserve.backends.base import Backend, BackendModel, LoadContext
from ptserve.backends.pytorch.torchscript import TorchScriptModel
from ptserve.config.parse import ModelConfig

PLATFORM = "pytorch_libtorch"
PLATFORM_ALIASES = {"pytorch_libtorch", "libtorch"}
BACKEND = "pytorch"
DEFAULT_FILENAME = "model.pt"


class PyTorchBackend(Backend):
    """Serves TorchScript files."""

    name = BACKEND

    def claims(self, config: ModelConfig, model_dir: Path) -> bool:
        if config.platform in PLATFORM_ALIASES or config.backend == BACKEND:
            return True
        if config.platform or config.backend:
            return False
        # Neither set: a model.pt in a version folder makes it a PyTorch model.
        filename = config.default_model_filename or DEFAULT_FILENAME
        return any(
            child.is_dir() and child.name.isdigit() and (child / filename).is_file()
            for child in model_dir.iterdir()
        )

    def complete_config(self, config: ModelConfig, model_dir: Path) -> None:
        config.backend = BACKEND
        if not config.platform or config.platform in PLATFORM_ALIASES:
            config.platform = PLATFORM
        if not config.default_model_filename:
            config.default_model_filename = DEFAULT_FILENAME

    def gpu_count(self) -> int:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def load(self, context: LoadContext) -> BackendModel:
        return TorchScriptModel(context, context.config.default_model_filename)
