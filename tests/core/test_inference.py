"""Checking requests against a model: a signature's checks are made once, then reused."""

from __future__ import annotations

import numpy as np
import pytest

from ptserve.common import datatypes
from ptserve.common.errors import ServerError
from ptserve.common.requests import InferRequest, RequestedOutput, Tensor
from ptserve.config.io import model_io
from ptserve.config.parse import parse_config
from ptserve.core.inference import PlanCache, prepare

CONFIG = """
    name: "m"
    max_batch_size: 4
    input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] },
            { name: "B" data_type: TYPE_FP32 dims: [ 2 ] reshape: { shape: [ 1, 2 ] } } ]
    output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
"""


def request(a: np.ndarray, b: np.ndarray, signature: object = "sig") -> InferRequest:
    # Inputs out of config order: the plan must still pair each with its spec.
    return InferRequest(
        "m",
        inputs=[
            Tensor("B", datatypes.BY_NAME["FP32"], b),
            Tensor("A", datatypes.BY_NAME["FP32"], a),
        ],
        signature=signature,
    )


def test_a_known_signature_reuses_the_checks_with_the_new_data() -> None:
    io = model_io(parse_config(CONFIG, "m"))
    plans = PlanCache()
    first = np.ones((1, 2), np.float32)
    prepared, requested = prepare(request(first, first * 2), io, plans)
    assert plans.get("sig") is not None
    a, b = np.full((1, 2), 5, np.float32), np.full((1, 2), 7, np.float32)
    again, requested_again = prepare(request(a, b), io, plans)
    assert again.inputs["A"].tolist() == [[5, 5]]
    assert again.inputs["B"].shape == (1, 1, 2)  # reshaped for the model as the first was
    assert again.inputs["B"].tolist() == [[[7, 7]]]
    assert (again.batch_size, again.outputs) == (prepared.batch_size, prepared.outputs)
    assert [r.name for r in requested_again] == [r.name for r in requested] == ["Y"]


def test_requests_without_a_signature_or_that_fail_leave_no_plan() -> None:
    io = model_io(parse_config(CONFIG, "m"))
    plans = PlanCache()
    ones = np.ones((1, 2), np.float32)
    prepare(request(ones, ones, signature=None), io, plans)
    wrong = np.ones((1, 3), np.float32)
    with pytest.raises(ServerError, match="unexpected shape for input 'B'"):
        prepare(request(ones, wrong, signature="bad"), io, plans)
    assert plans.get("bad") is None
    with pytest.raises(ServerError, match="unexpected shape for input 'B'"):
        prepare(request(ones, wrong, signature="bad"), io, plans)


def test_requested_outputs_are_checked_before_the_inputs() -> None:
    io = model_io(parse_config(CONFIG, "m"))
    wrong = np.ones((1, 3), np.float32)
    bad = request(wrong, wrong, signature=None)
    bad.outputs = [RequestedOutput("Z")]
    with pytest.raises(ServerError, match="unexpected inference output 'Z' for model 'm'"):
        prepare(bad, io)
