"""The PyTorch backend: TorchScript (``pytorch_libtorch``), the Python runtime (``model.py``)
and ``.pt2`` programs (``torch_aoti``)."""

from __future__ import annotations

from pathlib import Path

import torch

from ptserve.backends.base import Backend, BackendModel, LoadContext
from ptserve.backends.pytorch import aoti, python_runtime
from ptserve.backends.pytorch.torchscript import TorchScriptModel
from ptserve.config.parse import ModelConfig

PLATFORM = "pytorch_libtorch"
PLATFORM_ALIASES = {"pytorch_libtorch", "libtorch"}
BACKEND = "pytorch"
DEFAULT_FILENAME = "model.pt"


class PyTorchBackend(Backend):
    """Serves TorchScript files, model.py modules and .pt2 packages."""

    name = BACKEND

    def claims(self, config: ModelConfig, model_dir: Path) -> bool:
        if config.platform in PLATFORM_ALIASES or config.platform == aoti.PLATFORM:
            return True
        if config.backend == BACKEND and not config.platform:
            return True
        if config.platform or config.backend:
            return False
        # Neither set: a model.pt (or model.pt2) in a version folder makes it a PyTorch model.
        names = {config.default_model_filename or DEFAULT_FILENAME, aoti.DEFAULT_FILENAME}
        return any(
            child.is_dir() and child.name.isdigit() and (child / name).is_file()
            for child in model_dir.iterdir()
            for name in names
        )

    def complete_config(self, config: ModelConfig, model_dir: Path) -> None:
        config.backend = BACKEND
        if not config.platform and not config.runtime and _only_pt2(config, model_dir):
            config.platform = aoti.PLATFORM
        if not config.platform or config.platform in PLATFORM_ALIASES:
            config.platform = PLATFORM
        if not config.default_model_filename:
            config.default_model_filename = _default_filename(config)

    def gpu_count(self) -> int:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def load(self, context: LoadContext) -> BackendModel:
        config = context.config
        filename = config.default_model_filename or _default_filename(config)
        if config.runtime == python_runtime.RUNTIME:
            path = python_runtime.select_file(context.version_dir, config.default_model_filename)
            return python_runtime.load(context, path)
        if config.platform == aoti.PLATFORM:
            return aoti.Pt2Model(context, context.version_dir / filename)
        return TorchScriptModel(context, context.version_dir / filename)


def _default_filename(config: ModelConfig) -> str:
    if config.runtime == python_runtime.RUNTIME:
        return "model.py"
    if config.platform == aoti.PLATFORM:
        return aoti.DEFAULT_FILENAME
    return DEFAULT_FILENAME


def _only_pt2(config: ModelConfig, model_dir: Path) -> bool:
    """A folder with ``model.pt2`` files but no ``model.pt`` is a ``.pt2`` model."""
    if config.default_model_filename:
        return bool(config.default_model_filename.endswith(".pt2"))
    versions = [c for c in model_dir.iterdir() if c.is_dir() and c.name.isdigit()]
    return any((v / aoti.DEFAULT_FILENAME).is_file() for v in versions) and not any(
        (v / DEFAULT_FILENAME).is_file() for v in versions
    )
