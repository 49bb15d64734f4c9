"""Sequence rows with device inputs: client data passes through, control values and state stay
on the host (kept state is copied there), fillers are host zeros of the template's shape."""

from __future__ import annotations

from typing import Any

import numpy as np

from ptserve.common.prepared import PreparedRequest
from ptserve.config.io import model_io
from ptserve.config.parse import parse_config
from ptserve.scheduling.sequence.rows import RowBuilder
from ptserve.scheduling.sequence.slots import Sequence
from tests.device_data import Remote

CONFIG = """
    name: "s"
    max_batch_size: 4
    input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    sequence_batching {
      control_input [
        { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
      ]
      state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32
                dims: [ 1 ] } ]
    }
"""


def _rows() -> RowBuilder:
    return RowBuilder(model_io(parse_config(CONFIG, "s")), "s")


def test_fillers_are_host_zeros_shaped_like_a_device_template() -> None:
    template = PreparedRequest("t", {"INPUT": Remote(np.ones((1, 1), np.float32))}, 1, ())
    filler = _rows().filler(template)
    value = filler.inputs["INPUT"]
    assert isinstance(value, np.ndarray)
    assert value.shape == (1, 1) and value.dtype == np.float32 and not value.any()


def test_state_returned_on_a_device_is_kept_on_the_host() -> None:
    sequence = Sequence(id=1, last_ns=0)
    outputs: dict[str, Any] = {"STATE_OUT": Remote(np.full((1, 1), 3.0, np.float32))}
    _rows().keep_state(sequence, outputs)
    kept = sequence.state["STATE_IN"]
    assert isinstance(kept, np.ndarray) and kept.tolist() == [[3.0]]
    assert "STATE_OUT" not in outputs
