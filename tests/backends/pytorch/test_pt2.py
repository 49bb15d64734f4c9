"""``.pt2`` models (``platform: "torch_aoti"``): torch.export programs and AOTInductor packages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim, export

from tests.backends.pytorch.helpers import infer, write_config_only
from tests.serverproc import ServerProcess


class AddSub(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, a - b


CONFIG = """
    name: "{name}"
    platform: "torch_aoti"
    max_batch_size: 8
    input [ {{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] }},
            {{ name: "B" data_type: TYPE_FP32 dims: [ 4 ] }} ]
    output [ {{ name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }},
             {{ name: "DIFF" data_type: TYPE_FP32 dims: [ 4 ] }} ]
"""


def _program() -> torch.export.ExportedProgram:
    batch = Dim("batch", min=1, max=8)
    example = (torch.ones(2, 4), torch.ones(2, 4))
    return export(AddSub(), example, dynamic_shapes={"a": {0: batch}, "b": {0: batch}})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("pt2")
    program = _program()
    exported = write_config_only(repo, "exported", CONFIG.format(name="exported"))
    torch.export.save(program, str(exported / "1" / "model.pt2"))
    packaged = write_config_only(repo, "aoti", CONFIG.format(name="aoti"))
    # Compiles C++ with the local gcc: about half a minute on two cores.
    torch._inductor.aoti_compile_and_package(
        program, package_path=str(packaged / "1" / "model.pt2")
    )
    process = ServerProcess([repo]).start()
    yield process
    process.stop()


@pytest.mark.parametrize("model", ["exported", "aoti"])
def test_pt2_with_batching(server: ServerProcess, model: str) -> None:
    for rows in (1, 3):
        a = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
        b = np.ones((rows, 4), dtype=np.float32)
        result = infer(server.http_url, model, {"A": a, "B": b})
        np.testing.assert_array_equal(result.as_numpy("SUM"), a + b)
        np.testing.assert_array_equal(result.as_numpy("DIFF"), a - b)
    kind = "an AOTInductor package" if model == "aoti" else "a torch.export program"
    assert f"model '{model}': 'model.pt2' is {kind}" in server.log()
