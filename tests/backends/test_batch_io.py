"""Ragged batching without a server: batch input tensors, batch output scatter, the IO plan."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch

from ptserve.backends.batch_io import (
    batch_input_array,
    scatter_with_input_shape,
    source_shapes,
)
from ptserve.backends.pytorch.outputs import OutputPlan
from ptserve.common import datatypes
from ptserve.common.errors import ServerError
from ptserve.common.iospec import BatchInputSpec
from ptserve.common.prepared import PreparedRequest
from ptserve.common.requests import InferRequest, Tensor
from ptserve.config.io import model_io
from ptserve.config.parse import parse_config
from ptserve.core.inference import prepare

FP32 = datatypes.BY_NAME["FP32"]
INT32 = datatypes.BY_NAME["INT32"]

# Three requests of the ragged source input, as the model sees them (batch dimension first):
# 2 x 3 = 6 elements, 1 x 5 = 5 elements, 3 x 1 = 3 elements.
SHAPES = [(2, 3), (1, 5), (3, 1)]


def spec(kind: str, datatype: datatypes.DataType = FP32) -> BatchInputSpec:
    return BatchInputSpec(kind, ("T",), datatype, ("RAGGED",))


@pytest.mark.parametrize("datatype", [FP32, INT32])
@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("BATCH_ELEMENT_COUNT", [6, 5, 3]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT", [6, 11, 14]),
        ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", [0, 6, 11, 14]),
    ],
)
def test_element_counts_one_value_per_request(
    kind: str, expected: list[int], datatype: datatypes.DataType
) -> None:
    array = batch_input_array(spec(kind, datatype), SHAPES)
    assert array.dtype == datatype.numpy
    assert array.shape == (len(expected),)
    assert array.tolist() == expected


def test_element_counts_of_the_reference_test_batch() -> None:
    shapes = [(1, 2), (1, 4), (1, 1), (1, 3)]
    counts = batch_input_array(spec("BATCH_ELEMENT_COUNT"), shapes)
    assert counts.tolist() == [2, 4, 1, 3]
    with_zero = batch_input_array(spec("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO"), shapes)
    assert with_zero.tolist() == [0, 2, 6, 7, 10]


def test_a_single_request_batch() -> None:
    assert batch_input_array(spec("BATCH_ACCUMULATED_ELEMENT_COUNT"), [(1, 7)]).tolist() == [7]
    with_zero = batch_input_array(spec("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO"), [(1, 7)])
    assert with_zero.tolist() == [0, 7]


@pytest.mark.parametrize("datatype", [FP32, INT32])
def test_max_element_count_is_the_shape(datatype: datatypes.DataType) -> None:
    array = batch_input_array(spec("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", datatype), SHAPES)
    assert array.shape == (6,)
    assert array.dtype == datatype.numpy


def test_item_shape_has_one_row_per_batch_item() -> None:
    # The model_config.proto example: a batch-2 input [3, 1] and a batch-1 input [2, 2].
    shapes = [(2, 3, 1), (1, 2, 2)]
    array = batch_input_array(spec("BATCH_ITEM_SHAPE"), shapes)
    assert array.shape == (3, 2)
    assert array.tolist() == [[3, 1], [3, 1], [2, 2]]
    flat = batch_input_array(spec("BATCH_ITEM_SHAPE_FLATTEN", INT32), shapes)
    assert flat.dtype == np.int32
    assert flat.shape == (6,)
    assert flat.tolist() == [3, 1, 3, 1, 2, 2]


def test_item_shape_of_the_reference_test_batches() -> None:
    item = batch_input_array(spec("BATCH_ITEM_SHAPE"), [(2, 1, 2), (1, 1, 2), (1, 2, 2)])
    assert item.tolist() == [[1, 2], [1, 2], [1, 2], [2, 2]]
    flat = batch_input_array(
        spec("BATCH_ITEM_SHAPE_FLATTEN"), [(1, 4, 1), (1, 1, 2), (1, 1, 2), (1, 2, 2)]
    )
    assert flat.tolist() == [4, 1, 1, 2, 1, 2, 2, 2]


def test_item_shape_of_a_rank_one_source_is_empty_rows() -> None:
    array = batch_input_array(spec("BATCH_ITEM_SHAPE"), [(2,), (1,)])
    assert array.shape == (3, 0)


def test_item_shape_refuses_sources_of_different_rank() -> None:
    with pytest.raises(ServerError, match="same rank"):
        batch_input_array(spec("BATCH_ITEM_SHAPE"), [(1, 2), (1, 2, 2)])


def _prepared(shapes: Sequence[tuple[int, ...]], name: str = "RAGGED") -> list[PreparedRequest]:
    return [
        PreparedRequest(f"r{i}", {name: np.zeros(shape, np.float32)}, shape[0], ("OUT",))
        for i, shape in enumerate(shapes)
    ]


def test_source_shapes_are_read_from_the_requests() -> None:
    assert source_shapes("RAGGED", _prepared(SHAPES), "batch input 'T'") == SHAPES
    with pytest.raises(ServerError, match="does not carry"):
        source_shapes("OTHER", _prepared(SHAPES), "batch input 'T'")


def test_scatter_takes_each_requests_shape_in_order() -> None:
    flat = np.arange(14, dtype=np.float32)
    parts = scatter_with_input_shape("m", "OUT", flat, (-1, -1), [(2, 3), (1, 5), (3, 1)])
    assert [p.shape for p in parts] == [(2, 3), (1, 5), (3, 1)]
    assert parts[0].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert parts[1].tolist() == [[6, 7, 8, 9, 10]]
    assert parts[2].tolist() == [[11], [12], [13]]


def test_scatter_keeps_fixed_dimensions() -> None:
    flat = np.arange(16, dtype=np.int32)
    parts = scatter_with_input_shape("m", "OUT", flat, (-1, -1, 2), [(1, 3), (1, 5)])
    assert [p.shape for p in parts] == [(1, 3, 2), (1, 5, 2)]
    assert parts[1].reshape(-1).tolist() == list(range(6, 16))


def test_scatter_refuses_a_result_too_small() -> None:
    with pytest.raises(ServerError, match="fewer than"):
        scatter_with_input_shape("m", "OUT", np.zeros(5), (-1, -1), [(1, 3), (1, 3)])


def test_scatter_refuses_a_variable_dimension_the_source_lacks() -> None:
    with pytest.raises(ServerError, match="variable dimension"):
        scatter_with_input_shape("m", "OUT", np.zeros(6), (-1, -1, -1), [(1, 3)])


RAGGED_CONFIG = """
    name: "m"
    platform: "pytorch_libtorch"
    max_batch_size: 4
    input [ { name: "RAGGED" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
    output [ { name: "SUMS" data_type: TYPE_FP32 dims: [ 1 ] },
             { name: "SCATTERED" data_type: TYPE_FP32 dims: [ -1 ] } ]
    batch_input [
      { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "OFFSETS"
        data_type: TYPE_INT32 source_input: "RAGGED" },
      { kind: BATCH_ELEMENT_COUNT target_name: [ "COUNTS", "COUNTS_AGAIN" ]
        data_type: TYPE_FP32 source_input: "RAGGED" } ]
    batch_output [
      { kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "SCATTERED" source_input: "RAGGED" } ]
"""


def test_model_io_knows_the_batch_inputs_and_outputs() -> None:
    io = model_io(parse_config(RAGGED_CONFIG, "m"))
    assert [(b.kind, b.targets, b.datatype.name, b.source) for b in io.batch_inputs] == [
        ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", ("OFFSETS",), "INT32", "RAGGED"),
        ("BATCH_ELEMENT_COUNT", ("COUNTS", "COUNTS_AGAIN"), "FP32", "RAGGED"),
    ]
    # forward takes the config inputs, then every batch input target in config order.
    assert [s.name for s in io.model_inputs] == ["RAGGED", "OFFSETS", "COUNTS", "COUNTS_AGAIN"]
    assert [s.name for s in io.inputs] == ["RAGGED"]  # what clients send
    scattered = io.batch_output("SCATTERED")
    assert scattered is not None and scattered.source == "RAGGED"
    assert io.batch_output("SUMS") is None


def _send(*tensors: Tensor) -> InferRequest:
    return InferRequest("m", inputs=list(tensors))


def test_clients_do_not_send_batch_inputs() -> None:
    io = model_io(parse_config(RAGGED_CONFIG, "m"))
    ragged = Tensor("RAGGED", FP32, np.ones((1, 3), np.float32))
    prepared, _ = prepare(_send(ragged), io)
    assert list(prepared.inputs) == ["RAGGED"]
    offsets = Tensor("OFFSETS", INT32, np.zeros((1, 2), np.int32))
    with pytest.raises(ServerError, match=r"'OFFSETS'.*batch input") as raised:
        prepare(_send(ragged, offsets), io)
    assert raised.value.message.startswith("unexpected inference input 'OFFSETS'")


def test_output_plan_scatters_batch_outputs_and_splits_the_rest() -> None:
    io = model_io(parse_config(RAGGED_CONFIG, "m"))
    plan = OutputPlan("m", io)
    requests = [
        PreparedRequest(f"r{i}", {"RAGGED": np.zeros((1, n), np.float32)}, 1, ("SUMS", "SCATTERED"))
        for i, n in enumerate([2, 4, 1])
    ]
    sums = torch.tensor([[2.0], [4.0], [1.0]])
    scattered = torch.arange(7, dtype=torch.float32)  # one-dimensional, as the ragged input
    split = plan.split((sums, scattered), requests)
    assert [s["SUMS"].tolist() for s in split] == [[[2.0]], [[4.0]], [[1.0]]]
    assert [s["SCATTERED"].tolist() for s in split] == [[[0, 1]], [[2, 3, 4, 5]], [[6]]]
