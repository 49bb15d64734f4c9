"""The caller's arrays as the core's tensors and back: datatypes, sharing, what is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptserve.backends.pytorch.convert import TorchArray
from ptserve.common.datatypes import BY_NAME
from ptserve.common.errors import ServerError, Status
from ptserve.common.requests import InferResponse, Tensor
from ptserve.embedded.arrays import capture, from_response, output_device, to_tensor


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        (np.bool_, "BOOL"),
        (np.uint8, "UINT8"),
        (np.uint16, "UINT16"),
        (np.int32, "INT32"),
        (np.int64, "INT64"),
        (np.float16, "FP16"),
        (np.float32, "FP32"),
        (np.float64, "FP64"),
    ],
)
def test_numpy_arrays_keep_their_memory(dtype: type, name: str) -> None:
    array = np.zeros((2, 3), dtype=dtype)
    tensor = to_tensor("x", array)
    assert tensor.datatype is BY_NAME[name]
    assert tensor.data is array


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        (torch.bool, "BOOL"),
        (torch.int8, "INT8"),
        (torch.int64, "INT64"),
        (torch.float16, "FP16"),
        (torch.float32, "FP32"),
        (torch.bfloat16, "BF16"),
    ],
)
def test_cpu_tensors_are_viewed_not_copied(dtype: torch.dtype, name: str) -> None:
    value = torch.zeros(2, 3, dtype=dtype, requires_grad=dtype.is_floating_point)
    tensor = to_tensor("x", value)
    assert tensor.datatype is BY_NAME[name]
    assert tensor.data.ctypes.data == value.data_ptr()
    assert tensor.data.shape == (2, 3)


def test_text_becomes_bytes_elements() -> None:
    tensor = to_tensor("x", np.array(["a", "é"]))
    assert tensor.datatype.is_bytes
    assert list(tensor.data) == [b"a", "é".encode()]
    assert list(to_tensor("x", np.array([b"a", b"b"])).data) == [b"a", b"b"]


def test_big_endian_arrays_are_converted() -> None:
    tensor = to_tensor("x", np.arange(3, dtype=">i4"))
    assert tensor.datatype is BY_NAME["INT32"]
    assert tensor.data.dtype.isnative
    assert list(tensor.data) == [0, 1, 2]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ([1.0, 2.0], "must be a numpy array or a torch tensor, got list"),
        (np.zeros(2, dtype=np.complex64), "numpy dtype complex64"),
        (torch.zeros(2, dtype=torch.complex64), "torch dtype torch.complex64"),
    ],
)
def test_what_no_datatype_stores_is_refused(value: object, says: str) -> None:
    with pytest.raises(ServerError) as caught:
        to_tensor("x", value)
    assert caught.value.status is Status.INVALID_ARGUMENT
    assert says in caught.value.message


def test_outputs_come_back_in_the_inputs_kind() -> None:
    data = np.arange(4, dtype=np.float32)
    response = InferResponse(
        "m",
        "1",
        "",
        [
            Tensor("OUT", BY_NAME["FP32"], data),
            Tensor("TEXT", BY_NAME["BYTES"], np.array([b"a"], dtype=object)),
        ],
    )
    assert from_response(response, output_device({"x": data}))["OUT"] is data
    as_torch = from_response(response, output_device({"x": torch.from_numpy(data)}))
    assert isinstance(as_torch["OUT"], torch.Tensor)
    assert as_torch["OUT"].data_ptr() == data.ctypes.data  # no copy on the way back either
    assert isinstance(as_torch["TEXT"], np.ndarray)  # torch has no string tensors


def test_device_outputs_are_handed_back_as_the_backends_tensor() -> None:
    value = torch.arange(4, dtype=torch.float32)
    response = InferResponse("m", "1", "", [Tensor("y", BY_NAME["FP32"], TorchArray(value))])
    assert from_response(response, torch.device("cpu"))["y"] is value
    np.testing.assert_array_equal(from_response(response, None)["y"], value.numpy())


def test_captured_device_tensors_pass_through_to_the_core() -> None:
    value = torch.zeros(2, 3, device="meta")  # any copy of its data would raise
    captured = capture({"x": value, "n": np.zeros(1, np.float32)})
    assert isinstance(captured["x"], TorchArray) and captured["x"].tensor.device.type == "meta"
    assert output_device(captured) == torch.device("meta")
    tensor = to_tensor("x", captured["x"])
    assert tensor.data is captured["x"] and tensor.datatype is BY_NAME["FP32"]
    assert tensor.shape == (2, 3)
    direct = to_tensor("x", value)
    assert isinstance(direct.data, TorchArray) and direct.data.tensor.device.type == "meta"
