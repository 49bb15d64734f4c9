"""The reference project's kinds of models, generated here and checked end to end over HTTP.

add/sub over every supported type (three versions, the third swapped), identity models with
1-4 inputs, string models, and every input naming convention.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from torch import nn

from ptserve.examples import StringAddSub, write_model
from tests.backends.pytorch.helpers import infer
from tests.serverproc import ServerProcess

ADD_SUB_TYPES = ["INT8", "INT16", "INT32", "INT64", "UINT8", "FP16", "FP32", "FP64", "BF16"]
IDENTITY_TYPES = ["BOOL", "UINT16", "UINT32", "UINT64", "FP32", "INT8", "BF16"]
NUMPY = {
    "BOOL": np.bool_, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "BF16": ml_dtypes.bfloat16,
}  # fmt: skip


class AddSub(nn.Module):
    def forward(
        self, INPUT0: torch.Tensor, INPUT1: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return INPUT0 + INPUT1, INPUT0 - INPUT1


class SubAdd(nn.Module):
    """The swapped version: OUTPUT0 is the difference."""

    def forward(
        self, INPUT0: torch.Tensor, INPUT1: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return INPUT0 - INPUT1, INPUT0 + INPUT1


class AnyNames(nn.Module):
    def forward(
        self, first: torch.Tensor, second: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return first + second, first - second


class Identity1(nn.Module):
    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return a.clone()


class Identity2(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a.clone(), b.clone()


class Identity3(nn.Module):
    def forward(
        self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return a.clone(), b.clone(), c.clone()


class Identity4(nn.Module):
    def forward(
        self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return a.clone(), b.clone(), c.clone(), d.clone()


class StringIdentity(nn.Module):
    def forward(self, INPUT0: list[str]) -> list[str]:
        return INPUT0


IDENTITIES = {1: Identity1, 2: Identity2, 3: Identity3, 4: Identity4}


def _io(kind: str, names: list[str], dtype: str, dims: str = "[ 16 ]") -> str:
    items = ", ".join(f'{{ name: "{n}" data_type: TYPE_{dtype} dims: {dims} }}' for n in names)
    return f"{kind} [ {items} ]"


def _config(name: str, batch: int, inputs: list[str], outputs: list[str], dtype: str) -> str:
    return f"""
        name: "{name}"
        platform: "pytorch_libtorch"
        max_batch_size: {batch}
        version_policy: {{ all: {{}} }}
        {_io("input", inputs, dtype)}
        {_io("output", outputs, dtype)}
    """


# name → (config input names, config output names, module, what OUTPUT0 is)
NAMING = {
    "naming_index": (["INPUT__0", "INPUT__1"], ["OUTPUT__0", "OUTPUT__1"], AnyNames, "sum"),
    "naming_index_swapped": (["INPUT__1", "INPUT__0"], ["OUTPUT__1", "OUTPUT__0"], AnyNames, "sum"),
    "naming_args": (["first", "second"], ["OUTPUT0", "OUTPUT1"], AnyNames, "sum"),
    "naming_args_swapped": (["second", "first"], ["OUTPUT0", "OUTPUT1"], AnyNames, "sum"),
    "naming_plain": (["X", "Y"], ["OUT_A", "OUT_B"], AnyNames, "sum"),
    "naming_plain_swapped": (["Y", "X"], ["OUT_A", "OUT_B"], AnyNames, "sum"),
    "naming_mixed": (["INPUT__0", "other"], ["OUTPUT__0", "OUTPUT1"], AnyNames, "sum"),
}


def build(repo: Path) -> None:
    add_sub = torch.jit.script(AddSub())
    sub_add = torch.jit.script(SubAdd())
    for dtype in ADD_SUB_TYPES:
        for batch, prefix in ((8, "libtorch"), (0, "libtorch_nobatch")):
            name = f"{prefix}_{dtype.lower()}"
            config = _config(name, batch, ["INPUT0", "INPUT1"], ["OUTPUT0", "OUTPUT1"], dtype)
            write_model(repo, name, config, {1: add_sub, 2: add_sub, 3: sub_add})
    for count, cls in IDENTITIES.items():
        module = torch.jit.script(cls())
        for dtype in IDENTITY_TYPES:
            name = f"libtorch_zero_{count}_{dtype.lower()}"
            names = [f"INPUT__{i}" for i in range(count)]
            outs = [f"OUTPUT__{i}" for i in range(count)]
            write_model(repo, name, _config(name, 8, names, outs, dtype), {1: module})
    any_names = torch.jit.script(AnyNames())
    for name, (inputs, outputs, _, _) in NAMING.items():
        write_model(repo, name, _config(name, 8, inputs, outputs, "INT32"), {1: any_names})
    write_model(
        repo,
        "string_add_sub",
        _config("string_add_sub", 0, ["INPUT0", "INPUT1"], ["OUTPUT0", "OUTPUT1"], "STRING"),
        {1: torch.jit.script(StringAddSub())},
    )
    write_model(
        repo,
        "string_identity",
        f"""
        name: "string_identity"
        platform: "pytorch_libtorch"
        max_batch_size: 8
        {_io("input", ["INPUT0"], "STRING", "[ 1 ] reshape: { shape: [] }")}
        {_io("output", ["OUTPUT0"], "STRING", "[ 1 ] reshape: { shape: [] }")}
        """,
        {1: torch.jit.script(StringIdentity())},
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("conformance")
    build(repo)
    process = ServerProcess([repo]).start(timeout=300)
    yield process
    process.stop()


def _values(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "BOOL":
        return rng.integers(0, 2, shape).astype(bool)
    high = 20 if dtype.startswith(("INT", "FP", "BF")) else 100
    low = 0 if dtype.startswith("UINT") or dtype == "BF16" else -20
    return rng.integers(low, high, shape).astype(NUMPY[dtype])


@pytest.mark.parametrize("dtype", ADD_SUB_TYPES)
@pytest.mark.parametrize("prefix", ["libtorch", "libtorch_nobatch"])
@pytest.mark.parametrize("version", ["1", "2", "3"])
def test_add_sub(server: ServerProcess, dtype: str, prefix: str, version: str) -> None:
    shape = (2, 16) if prefix == "libtorch" else (16,)
    a = _values(dtype, shape, 1)
    b = _values(dtype, shape, 2)
    if dtype == "UINT8":
        a = a + b  # keep a - b non-negative
    total = (a.astype(np.float64) + b.astype(np.float64)).astype(NUMPY[dtype])
    difference = (a.astype(np.float64) - b.astype(np.float64)).astype(NUMPY[dtype])
    result = infer(
        server.http_url, f"{prefix}_{dtype.lower()}", {"INPUT0": a, "INPUT1": b},
        {"INPUT0": dtype, "INPUT1": dtype}, version=version,
    )  # fmt: skip
    first, second = (total, difference) if version != "3" else (difference, total)
    np.testing.assert_array_equal(
        result.as_numpy("OUTPUT0").astype(np.float64), first.astype(np.float64)
    )
    np.testing.assert_array_equal(
        result.as_numpy("OUTPUT1").astype(np.float64), second.astype(np.float64)
    )


@pytest.mark.parametrize("dtype", IDENTITY_TYPES)
@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_identity(server: ServerProcess, dtype: str, count: int) -> None:
    inputs = {f"INPUT__{i}": _values(dtype, (3, 16), i) for i in range(count)}
    if dtype.startswith("UINT") and dtype != "UINT8":
        inputs["INPUT__0"][0, 0] = np.iinfo(NUMPY[dtype]).max
    types = dict.fromkeys(inputs, dtype)
    result = infer(server.http_url, f"libtorch_zero_{count}_{dtype.lower()}", inputs, types)
    for i in range(count):
        out = result.as_numpy(f"OUTPUT__{i}")
        np.testing.assert_array_equal(
            out.astype(np.float64), inputs[f"INPUT__{i}"].astype(np.float64)
        )


@pytest.mark.parametrize("model", list(NAMING))
def test_naming_conventions(server: ServerProcess, model: str) -> None:
    inputs, outputs, _, _ = NAMING[model]
    # Whatever the convention, the model's first argument must get the right input.
    first_arg = {
        "naming_index": "INPUT__0", "naming_index_swapped": "INPUT__0",
        "naming_args": "first", "naming_args_swapped": "first",
        "naming_plain": "X", "naming_plain_swapped": "Y", "naming_mixed": "INPUT__0",
    }[model]  # fmt: skip
    second_arg = next(n for n in inputs if n != first_arg)
    a = np.arange(16, dtype=np.int32).reshape(1, 16) * 3
    b = np.ones((1, 16), dtype=np.int32)
    result = infer(server.http_url, model, {first_arg: a, second_arg: b})
    by_position = {0: a + b, 1: a - b}
    positions = {name: (int(name[-1]) if "__" in name else i) for i, name in enumerate(outputs)}
    if model in ("naming_mixed", "naming_plain", "naming_plain_swapped", "naming_args"):
        positions = {name: i for i, name in enumerate(outputs)}
    for name, position in positions.items():
        np.testing.assert_array_equal(result.as_numpy(name), by_position[position])
    if model.startswith(("naming_plain", "naming_mixed")):
        assert f"model '{model}': input names" in server.log()


def test_strings(server: ServerProcess) -> None:
    a = np.array([str(i).encode() for i in range(16)], dtype=object)
    b = np.array([b"1"] * 16, dtype=object)
    result = infer(server.http_url, "string_add_sub", {"INPUT0": a, "INPUT1": b})
    assert result.as_numpy("OUTPUT0").tolist() == [str(i + 1).encode() for i in range(16)]
    assert result.as_numpy("OUTPUT1").tolist() == [str(i - 1).encode() for i in range(16)]
    batch = np.array([[b"x"], [b"yy"], [b"zzz"]], dtype=object)
    out = infer(server.http_url, "string_identity", {"INPUT0": batch}).as_numpy("OUTPUT0")
    assert out.tolist() == batch.tolist()
