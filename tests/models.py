"""Small TorchScript models that tests write into temporary repositories."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import torch
from torch import nn

from ptserve.examples import write_model

# v2 datatype → config type for the dtypes an identity model can carry as a Tensor.
TENSOR_TYPES = {
    "BOOL": "TYPE_BOOL",
    "UINT8": "TYPE_UINT8",
    "INT8": "TYPE_INT8",
    "INT16": "TYPE_INT16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "FP16": "TYPE_FP16",
    "FP32": "TYPE_FP32",
    "FP64": "TYPE_FP64",
}


class Identity(nn.Module):
    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        return INPUT0.clone()


class StringIdentity(nn.Module):
    def forward(self, INPUT0: list[str]) -> list[str]:
        return INPUT0


class Fails(nn.Module):
    """Raises for negative input, so one model can both succeed and fail."""

    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        if bool((INPUT0 < 0).any()):
            raise RuntimeError("negative input is not allowed")
        return INPUT0 * 2


class RowSums(nn.Module):
    """Sums the last dimension: with reshape [2, 2] it sees pairs that the client sent flat."""

    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        return INPUT0.sum(-1)


RESHAPE_CONFIG = """
    name: "reshaped"
    platform: "pytorch_libtorch"
    max_batch_size: 4
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2, 1 ] reshape: { shape: [ 2 ] } } ]
"""


def identity_config(name: str, config_type: str, max_batch_size: int, dims: str) -> str:
    return f"""
        name: "{name}"
        platform: "pytorch_libtorch"
        max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT0" data_type: {config_type} dims: [ {dims} ] }} ]
        output [ {{ name: "OUTPUT0" data_type: {config_type} dims: [ {dims} ] }} ]
    """


def write_identity_models(repository: Path) -> list[str]:
    """identity_<dtype> (batching, dims [-1]) and identity_<dtype>_nobatch (dims [-1, -1])."""
    names = []
    for datatype, config_type in TENSOR_TYPES.items():
        lower = datatype.lower()
        write_model(
            repository,
            f"identity_{lower}",
            identity_config(f"identity_{lower}", config_type, 8, "-1"),
            {1: torch.jit.script(Identity())},
        )
        write_model(
            repository,
            f"identity_{lower}_nobatch",
            identity_config(f"identity_{lower}_nobatch", config_type, 0, "-1, -1"),
            {1: torch.jit.script(Identity())},
        )
        names += [f"identity_{lower}", f"identity_{lower}_nobatch"]
    write_model(
        repository,
        "identity_bytes",
        identity_config("identity_bytes", "TYPE_STRING", 0, "-1"),
        {1: torch.jit.script(StringIdentity())},
    )
    write_model(
        repository,
        "fails",
        identity_config("fails", "TYPE_FP32", 8, "4"),
        {1: torch.jit.script(Fails())},
    )
    write_model(repository, "reshaped", RESHAPE_CONFIG, {1: torch.jit.script(RowSums())})
    return [*names, "identity_bytes", "fails", "reshaped"]


def simple_config(dims: int) -> str:
    """The example ``simple`` model's configuration as JSON (for the load API), with ``dims``
    elements per input and output instead of 16."""
    return json.dumps(
        {
            "name": "simple",
            "platform": "pytorch_libtorch",
            "max_batch_size": 8,
            "input": [
                {"name": f"INPUT{i}", "data_type": "TYPE_INT32", "dims": [dims]} for i in range(2)
            ],
            "output": [
                {"name": f"OUTPUT{i}", "data_type": "TYPE_INT32", "dims": [dims]} for i in range(2)
            ],
        }
    )


# Sleeps INPUT0[0, 0] seconds, then doubles: outlives a deadline, holds a call open.
SLEEPY = """
    import time
    from torch import nn

    class Sleepy(nn.Module):
        def forward(self, x):
            time.sleep(float(x[0, 0]))
            return x * 2
"""
SLEEPY_CONFIG = """
    name: "{name}"
    backend: "pytorch"
    runtime: "model.py"
    max_batch_size: 8
    input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
    output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
    instance_group [ {{ count: 2 kind: KIND_CPU }} ]
    parameters {{
        key: "TORCH_COMPILE_OPTIONAL_PARAMETERS"
        value: {{ string_value: "{{\\"disable\\": true}}" }}
    }}
"""


def write_sleepy(repository: Path, name: str) -> None:
    """A Python-runtime model that sleeps INPUT0[0, 0] seconds, then doubles its input."""
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True)
    config = textwrap.dedent(SLEEPY_CONFIG.format(name=name)).strip()
    (model_dir / "config.pbtxt").write_text(config + "\n")
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(SLEEPY).strip() + "\n")
