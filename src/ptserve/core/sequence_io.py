"""What a sequence model takes beyond its config inputs: control inputs and implicit state.

Read once at load from ``sequence_batching``; the sequence batcher fills these tensors into each
request, and ``iospec`` declares them to the backend as extra inputs and outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ptserve.config.parse import ModelConfig
from ptserve.core import datatypes
from ptserve.core.datatypes import DataType

START = "START"
END = "END"
READY = "READY"
CORRID = "CORRID"
_KINDS = {0: START, 1: READY, 2: END, 3: CORRID}


@dataclass(frozen=True, slots=True)
class Control:
    """One control tensor (shape [1] per request): a flag's false/true values, or the id."""

    kind: str
    name: str
    datatype: DataType
    values: tuple[Any, Any] = (0, 1)  # (false, true); unused for CORRID

    def flag(self, on: bool) -> np.ndarray:
        return np.array([self.values[1] if on else self.values[0]], dtype=self.datatype.numpy)

    def correlation(self, sequence_id: int | str) -> np.ndarray:
        if self.datatype.is_bytes:
            return np.array([str(sequence_id).encode()], dtype=object)
        if isinstance(sequence_id, str):
            raise ValueError(
                f"string correlation ID '{sequence_id}' cannot fill the "
                f"{self.datatype.config_name} control '{self.name}'"
            )
        return np.array([sequence_id], dtype=self.datatype.numpy)


@dataclass(frozen=True, slots=True)
class StateSpec:
    """One implicit state: fed as ``input_name``, read back from ``output_name``."""

    input_name: str
    output_name: str
    datatype: DataType
    dims: tuple[int, ...]
    initial: np.ndarray  # the value at a sequence start, without the batch dimension


@dataclass(frozen=True, slots=True)
class SequenceIO:
    controls: tuple[Control, ...]
    states: tuple[StateSpec, ...]


def sequence_io(config: ModelConfig) -> SequenceIO | None:
    """The control and state plan of a validated config; None without sequence batching."""
    if not config.HasField("sequence_batching"):
        return None
    batching = config.sequence_batching
    controls: list[Control] = []
    for control_input in batching.control_input:
        for control in control_input.control:
            kind = _KINDS[control.kind]
            if kind == CORRID:
                dt = datatypes.from_config_name(_type_name(control.data_type))
                controls.append(Control(kind, control_input.name, dt))
            else:
                name, pair = _flag_form(control)
                controls.append(
                    Control(kind, control_input.name, datatypes.BY_NAME[name], (pair[0], pair[1]))
                )
    states = tuple(_state(state) for state in batching.state)
    return SequenceIO(tuple(controls), states)


def _flag_form(control: Any) -> tuple[str, list[Any]]:
    if control.int32_false_true:
        return "INT32", [int(v) for v in control.int32_false_true]
    if control.fp32_false_true:
        return "FP32", [float(v) for v in control.fp32_false_true]
    return "BOOL", [bool(v) for v in control.bool_false_true]


def _state(state: Any) -> StateSpec:
    dt = datatypes.from_config_name(_type_name(state.data_type))
    dims = tuple(int(d) for d in state.dims)
    shape = dims
    if state.initial_state:
        shape = tuple(int(d) for d in state.initial_state[0].dims) or dims
    initial = np.full(shape, b"", dtype=object) if dt.is_bytes else np.zeros(shape, dtype=dt.numpy)
    return StateSpec(state.input_name, state.output_name, dt, dims, initial)


def _type_name(value: int) -> str:
    from tritonclient.grpc import model_config_pb2

    return str(model_config_pb2.DataType.Name(value))
