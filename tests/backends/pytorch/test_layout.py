"""Channels-last inputs (``INPUT_MEMORY_FORMAT``): the load-time probe, the forced and the
refused layouts, the fallback when a batch fails only channels-last, and that results match."""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from tritonclient.utils import InferenceServerException

from ptserve.backends.base import InstanceSpec
from ptserve.backends.pytorch.convert import TorchArray
from ptserve.backends.pytorch.devices import placement_for
from ptserve.backends.pytorch.layout import (
    channels_last_candidates,
    faster,
    probe_obstacle,
    same_results,
)
from ptserve.backends.pytorch.runner import TorchInstance
from ptserve.config.io import model_io
from ptserve.config.parse import parse_config
from ptserve.examples import cnn, write_model
from tests.backends.pytorch.helpers import (
    infer,
    load_instances,
    prepared,
    script,
    serve_leniently,
    string_params,
    write_config_only,
    write_python_model,
)
from tests.serverproc import ServerProcess


class ViewFlatten(nn.Module):
    """The example CNN with its flattening done by ``view``, which needs NCHW-contiguous
    memory: such a model cannot take channels-last inputs."""

    def __init__(self, cnn: nn.Sequential) -> None:
        super().__init__()
        self.features = nn.Sequential(*list(cnn)[:6])
        self.head = cnn[7]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.features(x)
        return self.head(y.view(y.size(0), -1))


class LayoutSeen(nn.Module):
    """Reports [input is channels-last, input is NCHW-contiguous] per row."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = int(x.is_contiguous(memory_format=torch.channels_last))
        plain = int(x.is_contiguous())
        return torch.tensor([[last, plain]]).repeat(x.size(0), 1)


class CountingConv(nn.Module):
    """Stateful: counts its calls in a buffer; the probe must not touch the served copy."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.conv(x).sum(dim=(1, 2, 3)).unsqueeze(1) * 0 + self.calls


def _config(
    name: str, out_dims: str = "[ 10 ]", out_type: str = "TYPE_FP32", extra: str = ""
) -> str:
    return f"""
        name: "{name}"
        platform: "pytorch_libtorch"
        max_batch_size: 8
        input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 3, 32, 32 ] }} ]
        output [ {{ name: "y" data_type: {out_type} dims: {out_dims} }} ]
        {extra}
    """


def _format(value: str) -> str:
    return string_params(INPUT_MEMORY_FORMAT=value)


def _python_config(name: str, compile_options: str, extra: str = "", seen: bool = False) -> str:
    """A model.py model's config: the Python runtime, ``compile_options`` for torch.compile."""
    platform = 'platform: "pytorch_libtorch"'
    runtime = 'backend: "pytorch" runtime: "model.py"'
    options = string_params(TORCH_COMPILE_OPTIONAL_PARAMETERS=compile_options)
    return _config(name, *(SEEN if seen else ()), extra=f"{options} {extra}").replace(
        platform, runtime
    )


def _pt2_config(name: str, extra: str = "") -> str:
    return _config(name, extra=extra).replace(
        'platform: "pytorch_libtorch"', 'platform: "torch_aoti"'
    )


def _exported(module: nn.Module) -> torch.export.ExportedProgram:
    """``module`` as a torch.export program taking 1 to 8 images."""
    batch = torch.export.Dim("batch", min=1, max=8)
    example = (torch.zeros(2, 3, 32, 32),)
    return torch.export.export(module, example, dynamic_shapes={"input": {0: batch}})


# The example CNN as a model.py class (its layers in the same order: the state_dict fits).
PYTHON_CNN = """
    from torch import nn

    class Cnn(nn.Sequential):
        def __init__(self):
            super().__init__(
                nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
            )
"""

PYTHON_SEEN = """
    import torch
    from torch import nn

    class LayoutSeen(nn.Module):
        def forward(self, x):
            last = int(x.is_contiguous(memory_format=torch.channels_last))
            plain = int(x.is_contiguous())
            return torch.tensor([[last, plain]]).repeat(x.size(0), 1)
"""
NOT_COMPILED = '{\\"disable\\": true}'
COMPILED = '{\\"backend\\": \\"eager\\"}'  # compiled by dynamo, run by eager kernels


CNN = cnn()  # convolutions and max pooling: much faster on channels-last CPU tensors
assert isinstance(CNN, nn.Sequential)
CNN_VIEW = ViewFlatten(CNN).eval()
SEEN = "[ 2 ]", "TYPE_INT64"


def build(repo: Path) -> None:
    write_model(repo, "cnn_auto", _config("cnn_auto"), {1: script(CNN)})
    write_model(repo, "cnn_view", _config("cnn_view"), {1: script(CNN_VIEW)})
    write_model(
        repo, "cnn_view_forced", _config("cnn_view_forced", extra=_format("channels_last")),
        {1: script(CNN_VIEW)},
    )  # fmt: skip
    write_model(
        repo, "seen_forced", _config("seen_forced", *SEEN, extra=_format("Channels_Last")),
        {1: script(LayoutSeen())},
    )  # fmt: skip
    write_model(
        repo, "seen_contiguous", _config("seen_contiguous", *SEEN, extra=_format("contiguous")),
        {1: script(LayoutSeen())},
    )  # fmt: skip
    write_model(repo, "counting", _config("counting", "[ 1 ]"), {1: script(CountingConv())})
    write_python_model(
        repo, "py_cnn", _python_config("py_cnn", NOT_COMPILED), PYTHON_CNN, CNN.state_dict()
    )
    write_python_model(
        repo, "py_seen_compiled", _python_config("py_seen_compiled", COMPILED, seen=True),
        PYTHON_SEEN,
    )  # fmt: skip
    exported = write_config_only(repo, "pt2_cnn", _pt2_config("pt2_cnn"))
    torch.export.save(_exported(CNN), str(exported / "1" / "model.pt2"))
    # An AOTInductor package as far as the load can tell before it opens the code.
    aoti = write_config_only(
        repo, "aoti_forced", _pt2_config("aoti_forced", _format("channels_last"))
    )
    with zipfile.ZipFile(aoti / "1" / "model.pt2", "w") as archive:
        archive.writestr("model/data/aotinductor/model/model.wrapper.so", b"")
    forced = _format("channels_last")
    write_python_model(
        repo, "py_seen_forced", _python_config("py_seen_forced", COMPILED, forced, seen=True),
        PYTHON_SEEN,
    )  # fmt: skip
    write_model(
        repo,
        "bad_format",
        _config("bad_format", extra=_format("nhwc")),
        {1: script(CNN)},
    )


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layout")
    build(path)
    return path


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    # One model at a time: the probes' timings are the decisions under test, and a model
    # compiling beside a probe slows its rounds (the probe copes with some of that, not all).
    yield from serve_leniently(repo, "--model-load-thread-count", "1")


def _decision(server: ServerProcess, model: str) -> str:
    """The load's log line about the layout of ``model``'s inputs ("" when there is none)."""
    prefix = f"model '{model}': inputs x "
    lines = [line for line in server.log().splitlines() if prefix in line]
    return lines[0][lines[0].index(prefix) :] if lines else ""


def _images(rows: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 3, 32, 32), dtype=np.float32)


def _expected(module: nn.Module, images: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        result: np.ndarray = module(torch.from_numpy(images)).numpy()
    return result


# The same CNN as TorchScript, as a model.py module run eagerly, and as a torch.export program.
@pytest.mark.parametrize("model", ["cnn_auto", "py_cnn", "pt2_cnn"])
def test_auto_takes_channels_last_for_a_cnn_and_the_results_match(
    server: ServerProcess, repo: Path, model: str
) -> None:
    assert _decision(server, model).startswith(
        f"model '{model}': inputs x reach the model channels-last (a batch of 4"
    )
    for rows in (1, 3, 8):
        images = _images(rows, rows)
        got = infer(server.http_url, model, {"x": images}).as_numpy("y")
        np.testing.assert_allclose(got, _expected(CNN, images), rtol=1e-4, atol=1e-5)
    (instance,) = load_instances(repo / model)
    assert isinstance(instance, TorchInstance) and instance.channels_last == frozenset({"x"})


def test_auto_keeps_contiguous_inputs_for_a_model_that_cannot_take_channels_last(
    server: ServerProcess, repo: Path
) -> None:
    assert "model 'cnn_view': inputs x stay contiguous (channels-last inputs fail:" in server.log()
    images = _images(4)
    got = infer(server.http_url, "cnn_view", {"x": images}).as_numpy("y")
    np.testing.assert_allclose(got, _expected(CNN_VIEW, images), rtol=1e-4, atol=1e-5)
    (instance,) = load_instances(repo / "cnn_view")
    assert isinstance(instance, TorchInstance) and instance.channels_last == frozenset()


def test_forced_and_refused_layouts_reach_the_model_as_set(server: ServerProcess) -> None:
    forced = infer(server.http_url, "seen_forced", {"x": _images(2)}).as_numpy("y")
    assert forced.tolist() == [[1, 0], [1, 0]]
    plain = infer(server.http_url, "seen_contiguous", {"x": _images(2)}).as_numpy("y")
    assert plain.tolist() == [[0, 1], [0, 1]]
    log = server.log()
    assert "model 'seen_forced': inputs x reach the model channels-last\n" in log
    assert "model 'seen_contiguous': inputs x" not in log  # no probe, no decision to report


def test_tensors_from_in_process_callers_are_converted_too(repo: Path) -> None:
    """Inputs that come as torch tensors (the embedded API) take the other gathering path."""
    (forced,) = load_instances(repo / "seen_forced")
    (plain,) = load_instances(repo / "seen_contiguous")
    images = TorchArray(torch.from_numpy(_images(2)))
    request = prepared({"x": images}, ("y",), batch=2)
    for instance, expected in ((forced, [[1, 0], [1, 0]]), (plain, [[0, 1], [0, 1]])):
        result = instance.execute([request]).results[0]
        assert isinstance(result, dict)
        assert np.asarray(result["y"]).tolist() == expected


def test_a_batch_failing_only_channels_last_runs_again_contiguous(server: ServerProcess) -> None:
    images = _images(2)
    for _ in range(2):  # the first falls back, the second runs contiguous at once
        got = infer(server.http_url, "cnn_view_forced", {"x": images}).as_numpy("y")
        np.testing.assert_allclose(got, _expected(CNN_VIEW, images), rtol=1e-4, atol=1e-5)
    log = server.log()
    warning = "model instance 'cnn_view_forced_0': a batch failed with channels-last inputs"
    assert log.count(warning) == 1


def test_the_probe_leaves_the_served_module_untouched(server: ServerProcess) -> None:
    first = infer(server.http_url, "counting", {"x": _images(1)}).as_numpy("y")
    assert first.tolist() == [[1.0]]
    assert "model 'counting': inputs x " in server.log()  # it was probed


def test_aoti_packages_refuse_a_forced_layout(server: ServerProcess) -> None:
    """Compiled code given other strides than it was exported with computes wrong results."""
    message = (
        "model 'aoti_forced': INPUT_MEMORY_FORMAT channels_last cannot apply to an AOTInductor "
        "package (inputs x): its compiled code reads its inputs with the strides they were "
        "exported with, and other strides give wrong results, not an error; use auto or contiguous"
    )
    assert message in server.log()
    with pytest.raises(InferenceServerException, match=r"unknown model|not ready|available"):
        infer(server.http_url, "aoti_forced", {"x": _images(1)})


def test_compiled_python_runtime_models_are_not_probed_unless_forced(
    server: ServerProcess,
) -> None:
    log = server.log()
    assert (
        "model 'py_seen_compiled': inputs stay contiguous, the layout was not probed: "
        "torch.compile chooses the memory formats inside what it compiles"
    ) in log
    plain = infer(server.http_url, "py_seen_compiled", {"x": _images(2)}).as_numpy("y")
    assert plain.tolist() == [[0, 1], [0, 1]]
    assert "model 'py_seen_forced': inputs x reach the model channels-last\n" in log
    forced = infer(server.http_url, "py_seen_forced", {"x": _images(2)}).as_numpy("y")
    assert forced.tolist() == [[1, 0], [1, 0]]


def test_a_bad_format_fails_the_load_with_the_allowed_values(server: ServerProcess) -> None:
    message = (
        "model 'bad_format': parameter INPUT_MEMORY_FORMAT must be one of auto, contiguous, "
        "channels_last, got 'nhwc'"
    )
    assert message in server.log()
    with pytest.raises(InferenceServerException, match=r"unknown model|not ready|available"):
        infer(server.http_url, "bad_format", {"x": _images(1)})


# --- the decision's parts --------------------------------------------------------------------


def _io(text: str):  # type: ignore[no-untyped-def]
    return model_io(parse_config(text, "test"))


def test_candidates_are_four_dimensional_float_inputs() -> None:
    io = _io(
        """
        name: "m" platform: "pytorch_libtorch" max_batch_size: 4
        input [
          { name: "image" data_type: TYPE_FP16 dims: [ 3, 8, 8 ] },
          { name: "mask" data_type: TYPE_INT64 dims: [ 1, 8, 8 ] },
          { name: "flat" data_type: TYPE_FP32 dims: [ 192 ] },
          { name: "shaped" data_type: TYPE_FP32 dims: [ 192 ] reshape: { shape: [ 3, 8, 8 ] } }
        ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """
    )
    assert channels_last_candidates(io) == frozenset({"image", "shaped"})
    unbatched = _io(
        """
        name: "m" platform: "pytorch_libtorch"
        input [ { name: "a" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] },
                { name: "b" data_type: TYPE_BF16 dims: [ 1, 3, 8, 8 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """
    )
    assert channels_last_candidates(unbatched) == frozenset({"b"})


def test_the_probe_is_skipped_where_it_could_mislead() -> None:
    cpu = placement_for(InstanceSpec("m_0", "KIND_CPU"))
    small = nn.Conv2d(3, 4, 3)
    variable = _io(
        """
        name: "m" platform: "pytorch_libtorch" max_batch_size: 4
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """
    )
    assert probe_obstacle(variable, cpu, small) == "input 'x' has a variable dimension"
    fixed = _io(_config("m"))
    assert probe_obstacle(fixed, cpu, small) is None
    big = nn.Linear(1, 1)
    big.weight = nn.Parameter(torch.empty(0))
    big.register_buffer("huge", torch.empty((1 << 27) + 1))  # just over 512 MiB of float32
    assert "too many to copy" in str(probe_obstacle(fixed, cpu, big))


def test_faster_needs_a_clear_win() -> None:
    assert faster([100, 101, 99], [80, 84, 86])
    assert not faster([100, 101, 99], [90, 88, 86])
    # Rounds slowed by other work do not count: the fastest of each layout decides.
    assert not faster([100, 300, 300], [90, 90, 90])
    assert faster([300, 300, 100], [300, 80, 300])


def test_same_results_compares_floats_to_rounding_and_the_rest_exactly() -> None:
    a = np.array([[1.0, 2.0]], dtype=np.float32)
    assert same_results({"y": a}, {"y": a + 1e-6})
    assert not same_results({"y": a}, {"y": a + 1e-2})
    assert not same_results({"y": a}, {"y": a.astype(np.float64)})
    assert not same_results({"y": a}, {"z": a})
    ints = np.array([1, 2], dtype=np.int64)
    assert same_results({"y": ints}, {"y": ints.copy()})
    assert not same_results({"y": ints}, {"y": ints + 1})
