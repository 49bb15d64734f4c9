"""Decoding JSON and raw tensor data: values must fit the declared type and shape."""

from __future__ import annotations

import numpy as np
import pytest

from ptserve.common import datatypes
from ptserve.common.errors import ServerError
from ptserve.frontends import tensors
from tests.device_data import Remote


def dt(name: str) -> datatypes.DataType:
    return datatypes.from_name(name)


def test_nested_and_flat_json() -> None:
    flat = tensors.from_json("x", [1, 2, 3, 4], dt("INT32"), (2, 2))
    nested = tensors.from_json("x", [[1, 2], [3, 4]], dt("INT32"), (2, 2))
    np.testing.assert_array_equal(flat, nested)
    assert flat.dtype == np.int32


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        ([256], "UINT8", "value 256 is out of range for UINT8"),
        ([-1], "UINT64", "value -1 is out of range for UINT64"),
        ([2**64], "UINT64", "out of range for UINT64"),
        ([1.5], "INT64", "INT64 data must be integers"),
        ([True], "INT32", "INT32 data must be integers"),
        ([1], "BOOL", "BOOL data must be true/false"),
        (["a"], "FP32", "FP32 data must be numbers"),
        ([[1, 2], [3]], "FP32", "not a regular array"),
        ([1], "BF16", "BF16 data cannot be sent as JSON"),
        ([1], "BYTES", "BYTES element 0 must be a JSON string"),
    ],
)
def test_json_values_must_fit(data: list[object], name: str, message: str) -> None:
    with pytest.raises(ServerError, match=message):
        tensors.from_json("x", data, dt(name), (len(data),))


def test_uint64_full_range() -> None:
    got = tensors.from_json("x", [0, 2**64 - 1], dt("UINT64"), (2,))
    assert got.tolist() == [0, 2**64 - 1]


def test_raw_size_must_match() -> None:
    with pytest.raises(ServerError, match=r"Expected 16, got 12 \(shape \[4\] of FP32"):
        tensors.from_raw("x", b"\0" * 12, dt("FP32"), (4,))
    got = tensors.from_raw("x", np.arange(4, dtype="<f4").tobytes(), dt("FP32"), (2, 2))
    assert got.tolist() == [[0, 1], [2, 3]]


@pytest.mark.parametrize("shape", [[-1], [1.5], "3", [True]])
def test_shape_checks(shape: object) -> None:
    with pytest.raises(ServerError, match="'shape'"):
        tensors.check_shape("x", shape)


def test_json_out_of_bf16() -> None:
    bits = datatypes.float32_to_bf16(np.array([1.5, -2.0], np.float32))
    assert tensors.to_json_values(bits, dt("BF16")) == [1.5, -2.0]


def test_wire_bytes_of_device_data_are_copied_home_once() -> None:
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    before = Remote.copies
    raw = tensors.to_raw(Remote(values), datatypes.from_name("FP32"))
    assert bytes(raw) == values.tobytes() and Remote.copies == before + 1
    strings = np.array([b"a", b"bc"], dtype=object)
    raw = tensors.to_raw(Remote(strings), datatypes.BYTES)
    assert bytes(raw) == b"\x01\x00\x00\x00a\x02\x00\x00\x00bc"


NUMERIC = ["FP32", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16"]


@pytest.mark.parametrize("name", [*NUMERIC, "UINT32", "UINT64"])
def test_flat_numbers_decode_as_numpy_converts_them(name: str) -> None:
    """Flat lists are packed without numpy's per-element discovery: same values, same type."""
    values: list[object] = [0, 1, 2, 3, 100, 7] if name[0] == "U" else [-3, 0, 1, 2, 100, -7]
    if name.startswith("FP"):
        values = [0.1, -2.5, 3, 1e-3, 65504.0, 7]
    got = tensors.from_json("x", values, dt(name), (2, 3))
    expected = np.array(values).astype(dt(name).numpy).reshape(2, 3)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    packed = tensors._packed(values, dt(name), 6)  # the list took the packing path
    assert packed is not None
    np.testing.assert_array_equal(packed, expected.reshape(-1))


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        ([1.0, "a"], "FP32", "FP32 data must be numbers"),
        ([1.0, None], "FP32", "FP32 data must be numbers"),
        ([1, 2**40], "INT32", "value 1099511627776 is out of range for INT32"),
        ([1, 1.5], "INT32", "INT32 data must be integers"),
        ([0, -1], "UINT8", "value -1 is out of range for UINT8"),
        ([1.0, [2.0]], "FP32", "not a regular array"),
        ([True, False], "FP32", "FP32 data must be numbers"),
    ],
)
def test_values_that_do_not_pack_get_the_full_check(
    data: list[object], name: str, message: str
) -> None:
    assert tensors._packed(data, dt(name), len(data)) is None
    with pytest.raises(ServerError, match=message):
        tensors.from_json("x", data, dt(name), (len(data),))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_packed_values_beyond_fp32_are_infinite_as_before() -> None:
    got = tensors.from_json("x", [1.0, 1e39], dt("FP32"), (2,))
    assert got[0] == 1.0 and np.isinf(got[1])
