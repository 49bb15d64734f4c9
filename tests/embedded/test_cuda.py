"""CUDA tensors through the in-process API: read in place by an instance on their device,
answered on their device, with no copy through the host.

Skipped without CUDA: the device path cannot be faked on a CPU-only machine.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from ptserve import Server
from ptserve.backends.pytorch import outputs as outputs_module
from ptserve.backends.pytorch import runner as runner_module
from ptserve.embedded import arrays as arrays_module
from tests.embedded.conftest import build_repository

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available())"
    ),
]


def test_cuda_tensors_come_back_on_their_device(server: Server) -> None:
    x = torch.rand(4, 64)
    mlp = server.model("mlp")
    on_cpu = mlp.infer({"INPUT__0": x})["OUTPUT__0"]
    on_gpu = mlp.infer({"INPUT__0": x.cuda()})["OUTPUT__0"]
    assert isinstance(on_gpu, torch.Tensor) and on_gpu.is_cuda
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-4, atol=1e-5)
    a = torch.arange(16, dtype=torch.int32).reshape(1, 16).cuda()
    outputs = server.model("simple").infer({"INPUT0": a, "INPUT1": a})
    np.testing.assert_array_equal(outputs["OUTPUT0"].cpu().numpy(), (a * 2).cpu().numpy())


POINTER = """
    import torch
    from torch import nn

    class Pointer(nn.Module):
        '''Adds one to its input in place; returns it doubled and where its memory was.'''

        def forward(self, x):
            x.add_(1.0)
            where = torch.full([x.size(0), 1], x.data_ptr(), dtype=torch.int64, device=x.device)
            return x * 2, where
"""


def _pointer_config(name: str, kind: str, batching: str = "") -> str:
    return f"""
        name: "{name}"
        backend: "pytorch"
        runtime: "model.py"
        max_batch_size: 8
        input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3 ] }} ]
        output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 3 ] }},
                 {{ name: "ptr" data_type: TYPE_INT64 dims: [ 1 ] }} ]
        instance_group [ {kind} ]
        {batching}
        parameters {{ key: "TORCH_COMPILE_OPTIONAL_PARAMETERS"
                     value: {{ string_value: "{{\\"disable\\": true}}" }} }}
    """


def write_python_model(repository: Path, name: str, config: str, source: str) -> None:
    """A Python-runtime model (``1/model.py``), as tests/backends/pytorch/helpers.py writes it
    (not imported from there: that module needs the HTTP client)."""
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(textwrap.dedent(config).strip() + "\n")
    (repository / name / "1" / "model.py").write_text(textwrap.dedent(source).strip() + "\n")


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The examples plus pointer models on GPU 0, on the CPU, and on GPU 0 with batching."""
    repository = build_repository(tmp_path_factory.mktemp("cuda") / "repo")
    gpu = "{ kind: KIND_GPU gpus: [ 0 ] }"
    models = {
        "pointer_gpu": _pointer_config("pointer_gpu", gpu),
        "pointer_cpu": _pointer_config("pointer_cpu", "{ kind: KIND_CPU }"),
        "pointer_batched": _pointer_config(
            "pointer_batched", gpu, "dynamic_batching { max_queue_delay_microseconds: 100000 }"
        ),
    }
    for name, config in models.items():
        write_python_model(repository, name, config, POINTER)
    with Server(model_repository=repository) as started:
        yield started


def test_a_cuda_input_is_read_in_place_by_an_instance_on_its_device(gpu_server: Server) -> None:
    x = torch.rand(2, 3, device="cuda:0")
    before = x.clone()
    outputs = gpu_server.model("pointer_gpu").infer({"x": x})
    assert outputs["ptr"].device == x.device and outputs["y"].device == x.device
    assert int(outputs["ptr"][0, 0]) == x.data_ptr()  # the model had the caller's tensor
    torch.testing.assert_close(x, before + 1)  # and wrote into it
    torch.testing.assert_close(outputs["y"], (before + 1) * 2)


def test_gpu_outputs_never_pass_through_numpy(
    gpu_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every host conversion of the path raises: inputs and outputs stay on the device."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a host copy on the device path")

    for module in (outputs_module, arrays_module, runner_module):
        for name in ("to_numpy", "to_torch"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)
    x = torch.full((3, 3), 2.0, device="cuda:0")
    outputs = gpu_server.model("pointer_gpu").infer({"x": x})
    assert isinstance(outputs["y"], torch.Tensor) and outputs["y"].device == x.device
    torch.testing.assert_close(outputs["y"], torch.full((3, 3), 6.0, device="cuda:0"))


def test_the_profiler_sees_no_copy_between_host_and_device(gpu_server: Server) -> None:
    model = gpu_server.model("pointer_gpu")
    x = torch.zeros(4, 3, device="cuda:0")
    model.infer({"x": x})  # first use of the path outside the profile
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profile:
        outputs = model.infer({"x": x})
        torch.cuda.synchronize()
    names = [event.name for event in profile.events()]
    assert not [n for n in names if "HtoD" in n or "DtoH" in n], names
    assert outputs["y"].is_cuda


def test_a_cuda_input_to_a_cpu_instance_comes_back_on_its_device(gpu_server: Server) -> None:
    x = torch.rand(2, 3, device="cuda:0")
    before = x.clone()
    outputs = gpu_server.model("pointer_cpu").infer({"x": x})
    assert outputs["y"].device == x.device and outputs["ptr"].device == x.device
    assert int(outputs["ptr"][0, 0]) != x.data_ptr()  # moved once, to the host
    torch.testing.assert_close(x, before)  # so the caller's tensor is untouched
    torch.testing.assert_close(outputs["y"], (before + 1) * 2)


def test_cuda_requests_batched_on_the_device_get_their_own_rows(gpu_server: Server) -> None:
    model = gpu_server.model("pointer_batched")
    inputs = [torch.full((n, 3), float(n), device="cuda:0") for n in (1, 2, 3)]
    with ThreadPoolExecutor(len(inputs)) as pool:
        results = list(pool.map(lambda x: model.infer({"x": x.clone()}), inputs))
    for x, outputs in zip(inputs, results, strict=True):
        assert outputs["y"].device == x.device and outputs["y"].shape == x.shape
        torch.testing.assert_close(outputs["y"], (x + 1) * 2)


def test_a_cuda_input_on_a_custom_stream_is_waited_for(gpu_server: Server) -> None:
    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    with torch.cuda.stream(stream):
        x = torch.ones(8, 3, device="cuda:0")
        torch.cuda._sleep(10_000_000)  # keep the stream busy before the last write
        x.mul_(5.0)
        outputs = gpu_server.model("pointer_gpu").infer({"x": x})
        y = outputs["y"].clone()
    stream.synchronize()
    torch.testing.assert_close(y, torch.full((8, 3), 12.0, device="cuda:0"))
