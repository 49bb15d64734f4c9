"""Shared by the backend's tests: writing model.py/.pt2 models, loading in-process, inferring."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient

from ptserve.backends.base import BackendInstance, InstanceSpec, LoadContext
from ptserve.backends.pytorch.backend import PyTorchBackend
from ptserve.common.prepared import PreparedRequest
from ptserve.config.io import model_io
from ptserve.core.manager import LoadOptions, ModelManager
from tests.serverproc import ServerProcess


def write_python_model(
    repository: Path, name: str, config: str, source: str, state_dict: Any = None
) -> Path:
    """A Python-runtime model: config, ``1/model.py`` and an optional ``1/model.pt`` state_dict."""
    import torch

    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(config).strip() + "\n")
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(source).strip() + "\n")
    if state_dict is not None:
        torch.save(state_dict, str(model_dir / "1" / "model.pt"))
    return model_dir


def write_config_only(repository: Path, name: str, config: str) -> Path:
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(config).strip() + "\n")
    return model_dir


def load_instances(model_dir: Path, kinds: list[str] | None = None) -> list[BackendInstance]:
    """Load a model folder in-process and make its instances (no server, no workers)."""
    backend = PyTorchBackend()
    manager = ModelManager([backend], LoadOptions())
    config, _ = manager.read_config(model_dir.name, model_dir)
    context = LoadContext(model_dir.name, 1, model_dir, config, model_io(config))
    model = backend.load(context)
    names = kinds or ["KIND_CPU"]
    return [
        model.create_instance(InstanceSpec(f"{model_dir.name}_{i}", kind))
        for i, kind in enumerate(names)
    ]


def prepared(inputs: dict[str, np.ndarray], outputs: tuple[str, ...], batch: int = 1) -> Any:
    return PreparedRequest("t", inputs, batch, outputs)


def infer(
    url: str,
    model: str,
    inputs: dict[str, np.ndarray],
    datatypes: dict[str, str] | None = None,
    outputs: list[str] | None = None,
    version: str = "",
) -> httpclient.InferResult:
    """One HTTP inference; datatypes default from numpy (object → BYTES)."""
    client = httpclient.InferenceServerClient(url)
    infer_inputs = []
    for name, array in inputs.items():
        datatype = (datatypes or {}).get(name) or _datatype(array)
        item = httpclient.InferInput(name, list(array.shape), datatype)
        item.set_data_from_numpy(array)
        infer_inputs.append(item)
    requested = [httpclient.InferRequestedOutput(n) for n in outputs] if outputs else None
    return client.infer(model, infer_inputs, outputs=requested, model_version=version)


def _datatype(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return str(np_to_triton_dtype(array.dtype))


def serve_leniently(repository: Path, *args: str) -> Iterator[ServerProcess]:
    """A server on ``repository`` that starts although some of its models fail to load (the
    tests check those failures); for a module-scoped fixture to ``yield from``."""
    process = ServerProcess(
        [repository], ["--exit-on-error=false", "--strict-readiness=false", *args]
    ).start()
    yield process
    process.stop()


def string_params(**values: str) -> str:
    """``parameters`` entries of a config, each a ``string_value``."""
    return " ".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in values.items()
    )


def script(module: Any) -> Any:
    """``torch.jit.script`` of a module, typed for the callers' ``write_model``."""
    import torch

    return torch.jit.script(module)
