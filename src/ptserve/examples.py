"""The example model repository, generated from code: ``python -m ptserve.examples DIR``.

Every model is a small ``nn.Module`` turned into TorchScript here, so nothing is downloaded.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import torch
from torch import nn


def write_model(
    repository: Path,
    name: str,
    config: str,
    modules: dict[int, torch.jit.ScriptModule],
    filename: str = "model.pt",
) -> Path:
    """Save ``config`` and one TorchScript file per version under ``repository/name``."""
    model_dir = repository / name
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(config).strip() + "\n")
    for version, module in modules.items():
        version_dir = model_dir / str(version)
        version_dir.mkdir(exist_ok=True)
        torch.jit.save(module, str(version_dir / filename))
    return model_dir


class AddSub(nn.Module):
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""

    def forward(
        self, INPUT0: torch.Tensor, INPUT1: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return INPUT0 + INPUT1, INPUT0 - INPUT1


class StringAddSub(nn.Module):
    """Like AddSub, for integers written as strings."""

    def forward(self, INPUT0: list[str], INPUT1: list[str]) -> tuple[list[str], list[str]]:
        sums: list[str] = []
        differences: list[str] = []
        for a, b in zip(INPUT0, INPUT1, strict=False):
            sums.append(str(int(a) + int(b)))
            differences.append(str(int(a) - int(b)))
        return sums, differences


class Scale(nn.Module):
    """Multiplies by a constant: lets each version of a model answer differently."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        return INPUT0 * self.factor


def trace(module: nn.Module, example: torch.Tensor) -> torch.jit.ScriptModule:
    traced: torch.jit.ScriptModule = torch.jit.trace(module, example)  # type: ignore[no-untyped-call]
    return traced


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
    ).eval()


def cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 10),
    ).eval()


SIMPLE_CONFIG = """
    name: "simple"
    platform: "pytorch_libtorch"
    max_batch_size: 8
    input [
      { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
      { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
    ]
    output [
      { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
      { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
    ]
"""

STRING_CONFIG = """
    name: "simple_string"
    backend: "pytorch"
    max_batch_size: 0
    input [
      { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
      { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] }
    ]
    output [
      { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] },
      { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] }
    ]
"""

MLP_CONFIG = """
    name: "mlp"
    platform: "pytorch_libtorch"
    max_batch_size: 32
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 64 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
"""

CNN_CONFIG = """
    name: "cnn"
    platform: "pytorch_libtorch"
    max_batch_size: 32
    input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] } ]
    output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
"""

VERSIONED_CONFIG = """
    name: "versioned"
    platform: "pytorch_libtorch"
    max_batch_size: 8
    version_policy: { all: {} }
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def build_example_repository(repository: Path) -> list[str]:
    """Write every example model; returns their names."""
    repository.mkdir(parents=True, exist_ok=True)
    write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    write_model(repository, "simple_string", STRING_CONFIG, {1: torch.jit.script(StringAddSub())})
    write_model(repository, "mlp", MLP_CONFIG, {1: trace(mlp(), torch.zeros(1, 64))})
    write_model(repository, "cnn", CNN_CONFIG, {1: trace(cnn(), torch.zeros(1, 3, 32, 32))})
    write_model(
        repository,
        "versioned",
        VERSIONED_CONFIG,
        {v: torch.jit.script(Scale(float(v))) for v in (1, 2, 3)},
    )
    return ["simple", "simple_string", "mlp", "cnn", "versioned"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the example model repository.")
    parser.add_argument("repository", type=Path)
    args = parser.parse_args(argv)
    names = build_example_repository(args.repository)
    print(f"wrote {', '.join(names)} to {args.repository}")


if __name__ == "__main__":
    main()
