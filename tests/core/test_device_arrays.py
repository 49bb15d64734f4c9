"""The core carries device data (``DeviceArray``) by reference: it checks shapes and datatypes
exactly as for numpy, reshapes through the array itself, and reads elements only where it must."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ptserve.common import datatypes
from ptserve.common.device import to_host
from ptserve.common.errors import ServerError
from ptserve.common.requests import InferRequest, RequestedOutput, Tensor
from ptserve.config.io import model_io
from ptserve.config.parse import parse_config
from ptserve.core.inference import build_response, prepare
from tests.device_data import Remote

CONFIG = """
    name: "m"
    max_batch_size: 4
    input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] },
            { name: "B" data_type: TYPE_FP32 dims: [ 2 ] reshape: { shape: [ 1, 2 ] } } ]
    output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""
FP32 = datatypes.BY_NAME["FP32"]


def _request(a: Any, b: Any) -> InferRequest:
    return InferRequest("m", inputs=[Tensor("A", FP32, a), Tensor("B", FP32, b)])


def test_device_inputs_are_checked_and_reshaped_without_a_host_copy() -> None:
    io = model_io(parse_config(CONFIG, "m"))
    Remote.copies = 0
    a, b = Remote(np.ones((3, 2), np.float32)), Remote(np.ones((3, 2), np.float32))
    prepared, _ = prepare(_request(a, b), io)
    assert prepared.inputs["A"] is a  # the caller's data itself
    reshaped = prepared.inputs["B"]
    assert isinstance(reshaped, Remote) and reshaped.shape == (3, 1, 2)
    assert prepared.batch_size == 3 and Remote.copies == 0


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (np.ones((1, 3), np.float32), np.ones((1, 2), np.float32)),  # wrong shape
        (np.ones((5, 2), np.float32), np.ones((5, 2), np.float32)),  # batch too large
        (np.ones((1, 2), np.float32), np.ones((2, 2), np.float32)),  # batch sizes disagree
    ],
)
def test_device_inputs_fail_exactly_as_numpy_inputs(a: np.ndarray, b: np.ndarray) -> None:
    io = model_io(parse_config(CONFIG, "m"))
    with pytest.raises(ServerError) as on_host:
        prepare(_request(a, b), io)
    with pytest.raises(ServerError) as on_device:
        prepare(_request(Remote(a), Remote(b)), io)
    assert on_device.value.status is on_host.value.status
    assert on_device.value.message == on_host.value.message


def test_device_outputs_pass_through_and_classification_reads_them_on_the_host() -> None:
    io = model_io(parse_config(CONFIG, "m"))
    request = _request(np.ones((1, 2), np.float32), np.ones((1, 2), np.float32))
    Remote.copies = 0
    output = Remote(np.array([[0.5, 2.0]], np.float32))
    response = build_response(request, "1", io, [RequestedOutput("Y")], {"Y": output})
    assert response.outputs[0].data is output and Remote.copies == 0
    classified = build_response(request, "1", io, [RequestedOutput("Y", 1)], {"Y": output})
    assert Remote.copies == 1
    assert to_host(classified.outputs[0].data).tolist() == [[b"2.000000:1"]]
