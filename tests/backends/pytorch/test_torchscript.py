"""TorchScript models end to end: parameters, kinds, sharing, beyond-the-original I/O, errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import torch
from torch import nn
from tritonclient.utils import InferenceServerException

from ptserve.examples import write_model
from tests.backends.pytorch.helpers import (
    infer,
    load_instances,
    prepared,
    script,
    serve_leniently,
    string_params,
    write_config_only,
)
from tests.serverproc import ServerProcess


class GradState(nn.Module):
    """Reports [inference mode seen by its tensors, grad enabled]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        return torch.tensor([int(y.is_inference()), int(torch.is_grad_enabled())])


class Fails(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() < 0):
            raise ValueError("negative input")
        return x * 2


class Counter(nn.Module):
    """Stateful: counts its calls, so shared weights show up as one counter."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * 0 + self.calls


class DictOut(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"SUM": a + b, "DIFF": a - b}


class ListIO(nn.Module):
    def forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return [total, xs[0] * 2]


class TupleIO(nn.Module):
    def forward(
        self, pair: tuple[torch.Tensor, torch.Tensor], scale: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return pair[0] * scale, [pair[1] * scale]


class OptionalBias(nn.Module):
    def forward(self, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:  # noqa: UP045
        if bias is None:
            return x
        return x + bias


class TwoMethods(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @torch.jit.export
    def triple(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3


class Exclaim(nn.Module):
    def forward(self, s: list[str]) -> list[str]:
        return [item + "!" for item in s]


class Halve(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 0.5).to(x.dtype)


def _one_in_out(
    name: str, dtype: str = "TYPE_FP32", out: str = "TYPE_FP32", batch: int = 0, extra: str = ""
) -> str:
    dims = "[ 2 ]"
    return f"""
        name: "{name}"
        platform: "pytorch_libtorch"
        max_batch_size: {batch}
        input [ {{ name: "x" data_type: {dtype} dims: {dims} }} ]
        output [ {{ name: "OUT__0" data_type: {out} dims: {dims} }} ]
        {extra}
    """


GRAD_MODELS = {
    "grad_default": "",
    "grad_on": string_params(INFERENCE_MODE="On"),
    "grad_off": string_params(INFERENCE_MODE="FALSE"),
    "grad_zero": string_params(INFERENCE_MODE="0"),
}


def build(repo: Path) -> None:
    for name, extra in GRAD_MODELS.items():
        write_model(
            repo, name, _one_in_out(name, out="TYPE_INT64", extra=extra), {1: script(GradState())}
        )
    write_model(repo, "fails", _one_in_out("fails"), {1: script(Fails())})
    write_model(
        repo,
        "shared",
        _one_in_out(
            "shared",
            extra="instance_group [ { count: 2 kind: KIND_CPU } ] "
            + string_params(ENABLE_WEIGHT_SHARING="true", ENABLE_CACHE_CLEANING="true"),
        ),
        {1: script(Counter())},
    )
    write_model(
        repo,
        "auto_kind",
        _one_in_out("auto_kind", extra="instance_group [ { kind: KIND_AUTO } ]"),
        {1: script(Halve())},
    )
    write_model(
        repo,
        "model_kind",
        _one_in_out("model_kind", extra="instance_group [ { kind: KIND_MODEL } ]"),
        {1: script(Halve())},
    )
    write_model(
        repo,
        "dict_out",
        """
        name: "dict_out"
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "a" data_type: TYPE_FP32 dims: [ 2 ] },
                { name: "b" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "DIFF" data_type: TYPE_FP32 dims: [ 2 ] },
                 { name: "SUM" data_type: TYPE_FP32 dims: [ 2 ] } ]
        """,
        {1: script(DictOut())},
    )
    write_model(
        repo,
        "list_io",
        """
        name: "list_io"
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "xs__2" data_type: TYPE_FP32 dims: [ 2 ] },
                { name: "xs__0" data_type: TYPE_FP32 dims: [ 2 ] },
                { name: "xs__1" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "TOTAL__0" data_type: TYPE_FP32 dims: [ 2 ] },
                 { name: "DOUBLE__1" data_type: TYPE_FP32 dims: [ 2 ] } ]
        """,
        {1: script(ListIO())},
    )
    write_model(
        repo,
        "tuple_io",
        """
        name: "tuple_io"
        platform: "pytorch_libtorch"
        max_batch_size: 0
        input [ { name: "scale" data_type: TYPE_FP32 dims: [ 1 ] },
                { name: "pair__0" data_type: TYPE_FP32 dims: [ 2 ] },
                { name: "pair__1" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "FIRST" data_type: TYPE_FP32 dims: [ 2 ] },
                 { name: "SECOND" data_type: TYPE_FP32 dims: [ 2 ] } ]
        """,
        {1: script(TupleIO())},
    )
    write_model(
        repo,
        "optional_bias",
        """
        name: "optional_bias"
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] },
                { name: "bias" data_type: TYPE_FP32 dims: [ 2 ] optional: true } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
        """,
        {1: script(OptionalBias())},
    )
    write_model(
        repo,
        "optional_not_declared",
        """
        name: "optional_not_declared"
        platform: "pytorch_libtorch"
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] },
                { name: "y" data_type: TYPE_FP32 dims: [ 2 ] optional: true } ]
        output [ { name: "OUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
        """,
        {1: script(DictOut())},
    )
    write_model(
        repo,
        "method",
        _one_in_out("method", extra=string_params(MODEL_METHOD="triple")),
        {1: script(TwoMethods())},
    )
    write_model(
        repo,
        "method_missing",
        _one_in_out("method_missing", extra=string_params(MODEL_METHOD="quadruple")),
        {1: script(TwoMethods())},
    )
    write_model(
        repo,
        "strings",
        """
        name: "strings"
        platform: "pytorch_libtorch"
        max_batch_size: 8
        input [ { name: "s" data_type: TYPE_STRING dims: [ 1 ] reshape: { shape: [] } } ]
        output [ { name: "OUT__0" data_type: TYPE_STRING dims: [ 1 ] reshape: { shape: [] } } ]
        """,
        {1: script(Exclaim())},
    )
    for dtype in ("BF16", "UINT16", "UINT32", "UINT64"):
        name = f"halve_{dtype.lower()}"
        write_model(
            repo,
            name,
            _one_in_out(name, f"TYPE_{dtype}", f"TYPE_{dtype}", batch=4),
            {1: script(Halve())},
        )
    write_model(
        repo, "bad_bool", _one_in_out("bad_bool", extra=string_params(INFERENCE_MODE="yes")),
        {1: script(Halve())},
    )  # fmt: skip
    write_model(
        repo,
        "bad_int",
        _one_in_out("bad_int", extra=string_params(INTRA_OP_THREAD_COUNT="two")),
        {1: script(Halve())},
    )
    write_model(repo, "wrong_count", _one_in_out("wrong_count"), {1: script(DictOut())})
    # No inputs at all is a valid config (as in the reference); the model takes two.
    no_inputs = _one_in_out("no_inputs").replace(
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]', ""
    )
    write_model(repo, "no_inputs", no_inputs, {1: script(DictOut())})
    write_config_only(repo, "missing_file", _one_in_out("missing_file"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("torchscript")
    build(path)
    return path


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    yield from serve_leniently(repo)


X = np.array([1.0, 2.0], dtype=np.float32)


@pytest.mark.parametrize(
    ("model", "expected"),
    [("grad_default", [1, 0]), ("grad_on", [1, 0]), ("grad_off", [0, 0]), ("grad_zero", [0, 0])],
)
def test_inference_mode_is_seen_inside_the_model(
    server: ServerProcess, model: str, expected: list[int]
) -> None:
    result = infer(server.http_url, model, {"x": X})
    assert result.as_numpy("OUT__0").tolist() == expected
    state = "enabled" if expected[0] else "disabled"
    assert f"Inference Mode is {state} for model instance '{model}'" in server.log()


def test_forward_exception_fails_the_request_and_the_model_keeps_serving(
    server: ServerProcess,
) -> None:
    with pytest.raises(InferenceServerException, match=r"PyTorch execute failure: .*negative"):
        infer(server.http_url, "fails", {"x": -X})
    np.testing.assert_array_equal(
        infer(server.http_url, "fails", {"x": X}).as_numpy("OUT__0"), X * 2
    )


def test_weight_sharing_and_cache_cleaning_logs(server: ServerProcess) -> None:
    log = server.log()
    assert "Weight sharing is enabled for model instance 'shared'" in log
    assert "Reusing TorchScript model for instance 'shared_1'" in log
    assert "Cache Cleaning is enabled for model instance 'shared'" in log
    # One module for both instances: the counter goes up by one per request, whoever runs it.
    seen = [int(infer(server.http_url, "shared", {"x": X}).as_numpy("OUT__0")[0]) for _ in range(4)]
    assert seen == sorted(seen) and seen[-1] - seen[0] == 3


def test_weight_sharing_in_process(repo: Path) -> None:
    a, b = load_instances(repo / "shared", ["KIND_CPU", "KIND_CPU"])
    request = prepared({"x": X}, ("OUT__0",))
    first = a.execute([request]).results[0]
    second = b.execute([request]).results[0]
    assert isinstance(first, dict) and isinstance(second, dict)
    assert first["OUT__0"][0] == 1.0 and second["OUT__0"][0] == 2.0


def test_kinds(server: ServerProcess) -> None:
    log = server.log()
    assert "model instance 'auto_kind_0' of 'auto_kind': KIND_CPU: model on cpu" in log
    assert (
        "'model_kind_0' of 'model_kind': KIND_MODEL: model on its own devices, inputs on cpu" in log
    )
    for model in ("auto_kind", "model_kind"):
        out = infer(server.http_url, model, {"x": X}).as_numpy("OUT__0")
        np.testing.assert_array_equal(out, X * 0.5)


def test_dict_outputs_by_name(server: ServerProcess) -> None:
    a = np.array([[1, 2], [3, 4]], dtype=np.float32)
    b = np.ones((2, 2), dtype=np.float32)
    result = infer(server.http_url, "dict_out", {"a": a, "b": b})
    np.testing.assert_array_equal(result.as_numpy("SUM"), a + b)
    np.testing.assert_array_equal(result.as_numpy("DIFF"), a - b)
    only = infer(server.http_url, "dict_out", {"a": a, "b": b}, outputs=["SUM"])
    assert only.as_numpy("DIFF") is None


def test_list_and_tuple_inputs_and_outputs(server: ServerProcess) -> None:
    xs = {f"xs__{i}": np.full((1, 2), i + 1, dtype=np.float32) for i in range(3)}
    result = infer(server.http_url, "list_io", xs)
    np.testing.assert_array_equal(result.as_numpy("TOTAL__0"), np.full((1, 2), 6, np.float32))
    np.testing.assert_array_equal(result.as_numpy("DOUBLE__1"), np.full((1, 2), 2, np.float32))
    inputs = {"scale": np.array([3], np.float32), "pair__0": X, "pair__1": X + 1}
    result = infer(server.http_url, "tuple_io", inputs)
    np.testing.assert_array_equal(result.as_numpy("FIRST"), X * 3)
    np.testing.assert_array_equal(result.as_numpy("SECOND"), (X + 1) * 3)


def test_optional_inputs(server: ServerProcess, repo: Path) -> None:
    x = X.reshape(1, 2)
    without = infer(server.http_url, "optional_bias", {"x": x}).as_numpy("OUT")
    np.testing.assert_array_equal(without, x)
    with_bias = infer(server.http_url, "optional_bias", {"x": x, "bias": x}).as_numpy("OUT")
    np.testing.assert_array_equal(with_bias, x * 2)
    # In one batch, requests with and without the optional input run as separate calls.
    (instance,) = load_instances(repo / "optional_bias")
    results = instance.execute(
        [prepared({"x": x}, ("OUT",)), prepared({"x": x, "bias": x + 1}, ("OUT",))]
    ).results
    assert isinstance(results[0], dict) and isinstance(results[1], dict)
    np.testing.assert_array_equal(results[0]["OUT"], x)
    np.testing.assert_array_equal(results[1]["OUT"], x * 2 + 1)
    assert "declare it Optional[Tensor]" in server.log()


def test_calling_another_method(server: ServerProcess) -> None:
    np.testing.assert_array_equal(
        infer(server.http_url, "method", {"x": X}).as_numpy("OUT__0"), X * 3
    )
    assert "no method 'quadruple' (it has forward, triple" in server.log()


def test_batched_strings_and_bad_strings(server: ServerProcess, repo: Path) -> None:
    s = np.array([[b"a"], [b"bc"]], dtype=object)
    out = infer(server.http_url, "strings", {"s": s}).as_numpy("OUT__0")
    assert out.tolist() == [[b"a!"], [b"bc!"]]
    with pytest.raises(InferenceServerException, match="not valid UTF-8"):
        infer(server.http_url, "strings", {"s": np.array([[b"\xff"]], dtype=object)})
    (instance,) = load_instances(repo / "strings")
    results = instance.execute(
        [
            prepared({"s": np.array([b"x"], dtype=object)}, ("OUT__0",)),
            prepared({"s": np.array([b"\xfe"], dtype=object)}, ("OUT__0",)),
            prepared({"s": np.array([b"y", b"z"], dtype=object)}, ("OUT__0",), batch=2),
        ]
    ).results
    assert isinstance(results[0], dict) and results[0]["OUT__0"].tolist() == [b"x!"]
    assert not isinstance(results[1], dict) and "UTF-8" in results[1].message
    assert isinstance(results[2], dict) and results[2]["OUT__0"].tolist() == [b"y!", b"z!"]


def test_bf16_and_unsigned(server: ServerProcess) -> None:
    import ml_dtypes

    values = np.array([[2.0, -6.5]], dtype=ml_dtypes.bfloat16)
    out = infer(server.http_url, "halve_bf16", {"x": values}, {"x": "BF16"}).as_numpy("OUT__0")
    expected = np.array([[1.0, -3.25]], dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(out, dtype=np.float32), expected)
    for dtype in (np.uint16, np.uint32, np.uint64):
        # Powers of two stay exact through the float halving, even at the top of the range.
        big = np.array([[2 ** (np.iinfo(dtype).bits - 1), 8]], dtype=dtype)
        name = f"halve_{np.dtype(dtype).name}"
        out = infer(server.http_url, name, {"x": big}).as_numpy("OUT__0")
        assert out.dtype == dtype and out.tolist() == (big // 2).tolist()


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("bad_bool", "parameter INFERENCE_MODE: failed to convert 'yes' to boolean"),
        ("bad_int", "parameter INTRA_OP_THREAD_COUNT: failed to convert 'two' to integral number"),
        (
            "wrong_count",
            "configuration expects 1 inputs, model provides 2; the config has inputs (x)",
        ),
        (
            "no_inputs",
            "unable to load model 'no_inputs', configuration expects 0 inputs, model provides 2",
        ),
        ("missing_file", "unable to find model file"),
        ("optional_not_declared", "input 'y' is optional in the configuration"),
    ],
)
def test_load_failures_are_clear(server: ServerProcess, model: str, message: str) -> None:
    assert message in server.log()
    with pytest.raises(InferenceServerException, match=r"unknown model|not ready|available"):
        infer(server.http_url, model, {"x": X})
