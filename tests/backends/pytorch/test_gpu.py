"""KIND_GPU, per-instance CUDA streams, cache cleaning and DISABLE_CUDNN on a real CUDA device.

Skipped without CUDA: these paths cannot be faked on a CPU-only machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from ptserve.examples import write_model
from tests.backends.pytorch.helpers import infer, load_instances, prepared, write_python_model
from tests.serverproc import ServerProcess

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available())"
    ),
]


class DeviceReport(nn.Module):
    """Returns its input doubled and, as a second output, the CUDA index it ran on."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        index = x.get_device()
        return x * 2, torch.full([x.size(0), 1], index, dtype=torch.int64)


PROBE = """
    import torch
    from torch import nn

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(1))

        def forward(self, x):
            stream = torch.cuda.current_stream(x.device)
            on_default = int(stream == torch.cuda.default_stream(x.device))
            return torch.tensor(
                [[int(x.is_cuda), int(torch.backends.cudnn.enabled), on_default]],
                device=x.device,
            ).expand(x.size(0), 3)
"""


def _config(name: str, extra: str, out: str = "TYPE_FP32", runtime: str = "") -> str:
    return f"""
        name: "{name}"
        backend: "pytorch"
        {runtime}
        max_batch_size: 4
        input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3 ] }} ]
        output [ {{ name: "OUT__0" data_type: {out} dims: [ 3 ] }},
                 {{ name: "DEV__1" data_type: TYPE_INT64 dims: [ 1 ] }} ]
        {extra}
    """


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpu")
    last = torch.cuda.device_count() - 1
    scripted = torch.jit.script(DeviceReport())
    write_model(
        path,
        "on_gpu",
        _config(
            "on_gpu",
            f"instance_group [ {{ count: 2 kind: KIND_GPU gpus: [ {last} ] }} ] "
            'parameters { key: "ENABLE_CACHE_CLEANING" value: { string_value: "true" } } '
            'parameters { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }',
        ),
        {1: scripted},
    )
    write_python_model(
        path,
        "probe_gpu",
        f"""
        name: "probe_gpu"
        backend: "pytorch"
        runtime: "model.py"
        max_batch_size: 4
        input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3 ] }} ]
        output [ {{ name: "OUT" data_type: TYPE_INT64 dims: [ 3 ] }} ]
        instance_group [ {{ kind: KIND_GPU gpus: [ {last} ] }} ]
        parameters {{ key: "DISABLE_CUDNN" value: {{ string_value: "true" }} }}
        parameters {{ key: "TORCH_COMPILE_OPTIONAL_PARAMETERS"
                     value: {{ string_value: "{{\\"disable\\": true}}" }} }}
        """,
        PROBE,
    )
    return path


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    process = ServerProcess([repo]).start()
    yield process
    process.stop()


def test_kind_gpu_runs_on_the_listed_gpu(server: ServerProcess) -> None:
    last = torch.cuda.device_count() - 1
    x = np.ones((2, 3), dtype=np.float32)
    result = infer(server.http_url, "on_gpu", {"x": x})
    np.testing.assert_array_equal(result.as_numpy("OUT__0"), x * 2)
    assert result.as_numpy("DEV__1").ravel().tolist() == [last, last]
    log = server.log()
    assert f"KIND_GPU: model on cuda:{last}, inputs on cuda:{last}" in log
    assert f"Reusing TorchScript model for instance 'on_gpu_{last}_1'" in log or (
        "Reusing TorchScript model for instance 'on_gpu_1'" in log
    )


def test_own_stream_and_disabled_cudnn(server: ServerProcess) -> None:
    out = infer(server.http_url, "probe_gpu", {"x": np.ones((1, 3), np.float32)}).as_numpy("OUT")
    is_cuda, cudnn, on_default_stream = out[0].tolist()
    assert (is_cuda, cudnn, on_default_stream) == (1, 0, 0)
    assert "cuDNN is disabled for model instance 'probe_gpu'" in server.log()


def test_cache_cleaning_empties_the_allocator(repo: Path) -> None:
    (instance,) = load_instances(repo / "on_gpu", ["KIND_GPU"])
    big = np.ones((4, 3), dtype=np.float32)
    result = instance.execute([prepared({"x": big}, ("OUT__0", "DEV__1"), batch=4)]).results[0]
    assert isinstance(result, dict)
    torch.cuda.synchronize()
    # Nothing from the execution stays cached: reserved memory is back to what tensors hold.
    assert torch.cuda.memory_reserved(0) == torch.cuda.memory_allocated(0) or (
        torch.cuda.memory_reserved(0) - torch.cuda.memory_allocated(0) < 2 * 1024 * 1024
    )
