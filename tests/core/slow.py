"""A TorchScript model that takes a while per request, for tests of reloads and shutdown."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ptserve.examples import write_model


class Slow(nn.Module):
    """OUTPUT0 = INPUT0 * factor, after ``iterations`` small matrix products (busy work)."""

    def __init__(self, factor: float, iterations: int) -> None:
        super().__init__()
        self.factor = factor
        self.iterations = iterations

    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        x = torch.full((256, 256), 0.001)
        for _ in range(self.iterations):
            x = torch.tanh(x @ x)
        return INPUT0 * self.factor + x.sum() * 0.0


def slow_config(name: str, extra: str = "") -> str:
    return f"""
        name: "{name}"
        platform: "pytorch_libtorch"
        max_batch_size: 8
        input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
        {extra}
    """


def write_slow(
    repository: Path, name: str, versions: dict[int, float], iterations: int = 200, extra: str = ""
) -> Path:
    modules = {v: torch.jit.script(Slow(f, iterations)) for v, f in versions.items()}
    return write_model(repository, name, slow_config(name, extra), modules)
