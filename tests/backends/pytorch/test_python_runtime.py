"""The Python runtime (model.py + torch.compile) end to end, and the settings seen inside it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from tritonclient.utils import InferenceServerException

from tests.backends.pytorch.helpers import infer, load_instances, write_python_model
from tests.serverproc import ServerProcess

EAGER = '{\\"backend\\": \\"eager\\"}'
NO_COMPILE = '{\\"disable\\": true}'

PROBE = """
    import torch
    from torch import nn

    class Probe(nn.Module):
        def forward(self, x):
            old_executor = torch._C._jit_set_profiling_executor(True)
            torch._C._jit_set_profiling_executor(old_executor)
            old_profiling = torch._C._jit_set_profiling_mode(True)
            torch._C._jit_set_profiling_mode(old_profiling)
            seen = [
                torch.is_inference_mode_enabled(),
                torch.is_grad_enabled(),
                torch.get_num_threads(),
                torch.backends.cudnn.enabled,
                old_executor,
                old_profiling,
                torch._C._jit_texpr_fuser_enabled(),
                torch._C._get_graph_executor_optimize(),
            ]
            return torch.tensor([int(v) for v in seen], dtype=torch.int64)
"""

LINEAR = """
    import torch
    from torch import nn

    class Helper(nn.Module):
        pass

    class Affine(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 2)

        def forward(self, x):
            return self.linear(x)

        def predict(self, x):
            return {"OUT": self.linear(x) * 10}
"""

RAISES = """
    import torch
    from torch import nn

    class Raises(nn.Module):
        def forward(self, x):
            if bool((x < 0).any()):
                raise ValueError("negative values are not allowed")
            return x + 1
"""

NO_PARAMS = """
    from torch import nn

    class Empty(nn.Module):
        def forward(self, x):
            return x
"""

NO_MODULE = """
    def forward(x):
        return x
"""

SIMPLE = """
    from torch import nn

    class TimesTwoPlusOne(nn.Module):
        def forward(self, x):
            return x * 2 + 1
"""


def _config(
    name: str, batch: int = 0, extra: str = "", out: str = "TYPE_FP32", dims: str = "4"
) -> str:
    out_dims = "8" if out == "TYPE_INT64" else "2" if dims == "4" else dims
    return f"""
        name: "{name}"
        backend: "pytorch"
        runtime: "model.py"
        max_batch_size: {batch}
        input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
        output [ {{ name: "OUT" data_type: {out} dims: [ {out_dims} ] }} ]
        {extra}
    """


def _param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'


def _weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {"linear.weight": torch.randn(2, 4), "linear.bias": torch.randn(2)}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("python_runtime")
    probe_params = _param("TORCH_COMPILE_OPTIONAL_PARAMETERS", NO_COMPILE)
    write_python_model(path, "probe", _config("probe", out="TYPE_INT64", extra=probe_params), PROBE)
    switched = probe_params + " ".join(
        _param(k, v)
        for k, v in {
            "INFERENCE_MODE": "off",
            "DISABLE_CUDNN": "true",
            "ENABLE_JIT_EXECUTOR": "false",
            "ENABLE_JIT_PROFILING": "false",
            "ENABLE_TENSOR_FUSER": "false",
            "DISABLE_OPTIMIZED_EXECUTION": "true",
        }.items()
    )
    write_python_model(
        path, "probe_switched", _config("probe_switched", out="TYPE_INT64", extra=switched), PROBE
    )
    eager = _param("TORCH_COMPILE_OPTIONAL_PARAMETERS", EAGER)
    write_python_model(path, "affine", _config("affine", 8, eager), LINEAR, _weights())
    write_python_model(
        path,
        "affine_method",
        _config("affine_method", 8, eager + _param("MODEL_METHOD", "predict")),
        LINEAR,
        _weights(),
    )
    write_python_model(
        path,
        "affine_kind_model",
        _config("affine_kind_model", 8, eager + "instance_group [ { kind: KIND_MODEL } ]"),
        LINEAR,
        _weights(),
    )
    write_python_model(path, "raises", _config("raises", dims="2", extra=probe_params), RAISES)
    write_python_model(path, "inductor", _config("inductor", 4, dims="3"), SIMPLE)
    write_python_model(
        path,
        "no_params_kind_model",
        _config("no_params_kind_model", extra="instance_group [ { kind: KIND_MODEL } ]"),
        NO_PARAMS,
    )
    write_python_model(path, "no_module", _config("no_module"), NO_MODULE)
    write_python_model(
        path,
        "model_key",
        _config("model_key", extra=_param("TORCH_COMPILE_OPTIONAL_PARAMETERS", '{\\"model\\": 1}')),
        SIMPLE,
    )
    write_python_model(
        path,
        "bad_json",
        _config("bad_json", extra=_param("TORCH_COMPILE_OPTIONAL_PARAMETERS", "{fullgraph}")),
        SIMPLE,
    )
    write_python_model(
        path, "wrong_weights", _config("wrong_weights", 8, eager), LINEAR, {"x": torch.ones(1)}
    )
    return path


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(
        [repo], ["--exit-on-error=false", "--strict-readiness=false"], env={"OMP_NUM_THREADS": "2"}
    ).start(timeout=400)
    yield process
    process.stop()


X = np.arange(4, dtype=np.float32)


def _probe(server: ServerProcess, model: str) -> list[int]:
    return [int(v) for v in infer(server.http_url, model, {"INPUT__0": X}).as_numpy("OUT")]


def test_default_settings_inside_the_model(server: ServerProcess) -> None:
    inference, grad, threads, cudnn, *_, optimize = _probe(server, "probe")
    assert (inference, grad) == (1, 0)
    assert threads == 1  # the Python runtime's NUM_THREADS default, on its own worker thread
    assert cudnn == 1 and optimize == 1


def test_switched_settings_inside_the_model(server: ServerProcess) -> None:
    inference, grad, _, cudnn, executor, profiling, fuser, optimize = _probe(
        server, "probe_switched"
    )
    assert (inference, grad) == (0, 0)  # no_grad instead of inference mode
    assert (cudnn, executor, profiling, fuser, optimize) == (0, 0, 0, 0, 0)
    log = server.log()
    for line in (
        "Inference Mode is disabled for model instance 'probe_switched'",
        "cuDNN is disabled for model instance 'probe_switched'",
        "Jit Executor is disabled for model instance 'probe_switched'",
        "Jit Profiling is disabled for model instance 'probe_switched'",
        "Tensor fuser is disabled for model instance 'probe_switched'",
        "Optimized execution is disabled for model instance 'probe_switched'",
    ):
        assert line in log
    # Process-wide flags are restored after the execution: the other probe still sees defaults.
    assert _probe(server, "probe")[3] == 1


def test_state_dict_batching_and_warm_up(server: ServerProcess) -> None:
    weights = _weights()
    x = np.stack([X, X + 1, X * 2]).astype(np.float32)
    expected = x @ weights["linear.weight"].numpy().T + weights["linear.bias"].numpy()
    out = infer(server.http_url, "affine", {"INPUT__0": x}).as_numpy("OUT")
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    assert (
        "model.py defines several nn.Module classes (Affine, Helper); serving 'Affine'"
        in server.log()
    )
    assert "model instance 'affine_0': warmed up (compiled)" in server.log()


def test_other_method_with_dict_output(server: ServerProcess) -> None:
    weights = _weights()
    x = X.reshape(1, 4)
    expected = (x @ weights["linear.weight"].numpy().T + weights["linear.bias"].numpy()) * 10
    out = infer(server.http_url, "affine_method", {"INPUT__0": x}).as_numpy("OUT")
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_kind_model_uses_the_parameters_device(server: ServerProcess) -> None:
    out = infer(server.http_url, "affine_kind_model", {"INPUT__0": X.reshape(1, 4)}).as_numpy("OUT")
    assert out.shape == (1, 2)
    assert "'affine_kind_model_0' of 'affine_kind_model': KIND_MODEL" in server.log()


def test_default_inductor_compile_happens_before_ready(server: ServerProcess) -> None:
    assert "model instance 'inductor_0': warmed up (compiled)" in server.log()
    for rows in (1, 3):
        x = np.ones((rows, 3), dtype=np.float32)
        np.testing.assert_array_equal(
            infer(server.http_url, "inductor", {"INPUT__0": x}).as_numpy("OUT"), x * 2 + 1
        )


def test_exception_in_forward(server: ServerProcess) -> None:
    with pytest.raises(InferenceServerException, match="PyTorch execute failure: negative values"):
        infer(server.http_url, "raises", {"INPUT__0": np.array([-1, 1], np.float32)})
    out = infer(server.http_url, "raises", {"INPUT__0": np.array([1, 2], np.float32)}).as_numpy(
        "OUT"
    )
    np.testing.assert_array_equal(out, [2, 3])


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("no_params_kind_model", "KIND_MODEL, but the module has no parameters or buffers"),
        ("no_module", "defines no torch.nn.Module subclass"),
        ("model_key", "must not contain 'model'"),
        ("bad_json", "TORCH_COMPILE_OPTIONAL_PARAMETERS is not valid JSON"),
        ("wrong_weights", "does not fit Affine"),
    ],
)
def test_load_errors(server: ServerProcess, model: str, message: str) -> None:
    assert message in server.log()
    with pytest.raises(InferenceServerException):
        infer(server.http_url, model, {"INPUT__0": X})


def test_the_compiling_warm_up_waits_for_the_worker_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Making an instance compiles nothing: its warm-up runs in ``prepare``, which the
    instance's worker thread calls (torch.compile's CUDA graphs belong to the thread that
    records them); with compilation off there is nothing to warm up."""
    eager = _param("TORCH_COMPILE_OPTIONAL_PARAMETERS", EAGER)
    off = _param("TORCH_COMPILE_OPTIONAL_PARAMETERS", NO_COMPILE)
    compiled = write_python_model(tmp_path, "compiled", _config("compiled", 4, eager), SIMPLE)
    plain = write_python_model(tmp_path, "plain", _config("plain", 4, off), SIMPLE)
    caplog.set_level(logging.INFO, logger="ptserve")
    [instance] = load_instances(compiled)
    assert "warmed up" not in caplog.text
    instance.prepare()
    assert "model instance 'compiled_0': warmed up (compiled)" in caplog.text
    caplog.clear()
    [instance] = load_instances(plain)
    instance.prepare()
    assert "warmed up" not in caplog.text
