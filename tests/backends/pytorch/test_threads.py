"""Process-wide thread pools: the first model's size wins, a later different one is warned."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.backends.pytorch.helpers import infer, write_python_model
from tests.serverproc import ServerProcess

POOLS = """
    import torch
    from torch import nn

    class Pools(nn.Module):
        def forward(self, x):
            return torch.tensor([torch.get_num_threads(), torch.get_num_interop_threads()])
"""


def _config(name: str, intra: tuple[str, str], inter: tuple[str, str]) -> str:
    params = " ".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in (intra, inter)
    )
    return f"""
        name: "{name}"
        backend: "pytorch"
        runtime: "model.py"
        input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        output [ {{ name: "y" data_type: TYPE_INT64 dims: [ 2 ] }} ]
        parameters {{ key: "TORCH_COMPILE_OPTIONAL_PARAMETERS" value: {{ string_value: "{{\\"disable\\": true}}" }} }}
        {params}
    """  # noqa: E501


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo: Path = tmp_path_factory.mktemp("threads")
    write_python_model(
        repo, "pools_a", _config("pools_a", ("INTRA_OP_THREAD_COUNT", "3"),
                                 ("INTER_OP_THREAD_COUNT", "3")), POOLS
    )  # fmt: skip
    write_python_model(
        repo, "pools_b", _config("pools_b", ("NUM_THREADS", "2"), ("NUM_INTEROP_THREADS", "2")),
        POOLS,
    )  # fmt: skip
    process = ServerProcess([repo]).start()
    yield process
    process.stop()


def test_first_model_sizes_the_pools_and_the_other_is_warned(server: ServerProcess) -> None:
    x = np.zeros(1, np.float32)
    a = infer(server.http_url, "pools_a", {"x": x}).as_numpy("y").tolist()
    b = infer(server.http_url, "pools_b", {"x": x}).as_numpy("y").tolist()
    assert a == b and a[0] in (2, 3) and a[1] in (2, 3)
    log = server.log()
    assert re.search(r"Intra op thread count is set to 3 for model instance 'pools_a'", log)
    assert re.search(r"Inter op thread count is set to 2 for model instance 'pools_b'", log)
    winner, loser = ("pools_a", "pools_b") if a[0] == 3 else ("pools_b", "pools_a")
    assert (
        f"model '{loser}' asks for intra-op thread count {5 - a[0]}, but the intra-op pool is "
        f"process-wide and was already set to {a[0]} by model '{winner}'"
    ) in log
    assert f"model '{loser}' asks for inter-op thread count" in log
