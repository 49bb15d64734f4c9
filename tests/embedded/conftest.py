"""A model repository for the in-process API: the example models, plus one that writes into its
input (to show that a caller's host buffer reaches a CPU instance without a copy)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from ptserve import Server
from ptserve.examples import build_example_repository, write_model


class Marks(nn.Module):
    """Adds one to its input in place: the caller sees it when the model had its memory."""

    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        INPUT0.add_(1.0)
        return INPUT0 * 2


MARKS_CONFIG = """
    name: "marks"
    platform: "pytorch_libtorch"
    max_batch_size: 0
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
    instance_group [ { kind: KIND_CPU } ]
"""


def build_repository(repository: Path) -> Path:
    build_example_repository(repository)
    write_model(repository, "marks", MARKS_CONFIG, {1: torch.jit.script(Marks())})
    return repository


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("embedded") / "repo")


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[Server]:
    """One synchronous server for a module's tests (loading the models takes a while)."""
    with Server(model_repository=repository) as started:
        yield started
