"""Checking requests against a model."""

from __future__ import annotations

import numpy as np
import pytest

from ptserve.common import datatypes
from ptserve.common.errors import ServerError
from ptserve.common.requests import InferRequest, RequestedOutput, Tensor
from ptserve.config.io import model_io
from ptserve.config.parse import parse_config
from ptserve.core.inference import prepare

CONFIG = """
    name: "m"
    max_batch_size: 4
    input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] },
            { name: "B" data_type: TYPE_FP32 dims: [ 2 ] reshape: { shape: [ 1, 2 ] } } ]
    output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


def request(a: np.ndarray, b: np.ndarray) -> InferRequest:
    # Inputs out of config order: each must still meet its own spec.
    return InferRequest(
        "m",
        inputs=[
            Tensor("B", datatypes.BY_NAME["FP32"], b),
            Tensor("A", datatypes.BY_NAME["FP32"], a),
        ],
    )


def test_inputs_are_paired_with_their_specs_and_reshaped_for_the_model() -> None:
    io = model_io(parse_config(CONFIG, "m"))
    a, b = np.full((1, 2), 5, np.float32), np.full((1, 2), 7, np.float32)
    prepared, requested = prepare(request(a, b), io)
    assert list(prepared.inputs) == ["A", "B"]  # config order
    assert prepared.inputs["A"].tolist() == [[5, 5]]
    assert prepared.inputs["B"].shape == (1, 1, 2)
    assert prepared.inputs["B"].tolist() == [[[7, 7]]]
    assert (prepared.batch_size, prepared.outputs) == (1, ("Y",))
    assert [r.name for r in requested] == ["Y"]


def test_every_request_is_checked_whatever_came_before() -> None:
    """No request of a form seen before skips a check: the second one fails like the first."""
    io = model_io(parse_config(CONFIG, "m"))
    ones = np.ones((1, 2), np.float32)
    prepare(request(ones, ones), io)
    wrong = np.ones((1, 3), np.float32)
    for _ in range(2):
        with pytest.raises(ServerError, match="unexpected shape for input 'B'"):
            prepare(request(ones, wrong), io)
    with pytest.raises(ServerError, match="batch-size must be <= 4"):
        prepare(request(np.ones((5, 2), np.float32), np.ones((5, 2), np.float32)), io)


def test_requested_outputs_are_checked_before_the_inputs() -> None:
    io = model_io(parse_config(CONFIG, "m"))
    wrong = np.ones((1, 3), np.float32)
    bad = request(wrong, wrong)
    bad.outputs = [RequestedOutput("Z")]
    with pytest.raises(ServerError, match="unexpected inference output 'Z' for model 'm'"):
        prepare(bad, io)
