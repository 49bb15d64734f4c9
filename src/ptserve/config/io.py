"""Reading a validated config into the per-model IO plan: inputs, outputs, sequence controls
and state, ragged batch inputs and outputs. Decided once at load."""

from __future__ import annotations

from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2

from ptserve.common import datatypes
from ptserve.common.iospec import BatchInputSpec, BatchOutputSpec, IOSpec, ModelIO
from ptserve.common.sequence_io import CORRID, END, READY, START, Control, SequenceIO, StateSpec
from ptserve.config.parse import ModelConfig, data_type_name, enum_name

# ModelSequenceBatching.Control.Kind numbers, by the names the batcher uses.
_KINDS = {0: START, 1: READY, 2: END, 3: CORRID}


def model_io(config: ModelConfig) -> ModelIO:
    """The IO plan of a validated config."""
    inputs = tuple(
        IOSpec(
            name=io.name,
            datatype=datatypes.from_config_name(data_type_name(io.data_type)),
            dims=tuple(io.dims),
            reshape=tuple(io.reshape.shape) if io.HasField("reshape") else None,
            optional=io.optional,
            allow_ragged_batch=io.allow_ragged_batch,
        )
        for io in config.input
    )
    outputs = tuple(
        IOSpec(
            name=io.name,
            datatype=datatypes.from_config_name(data_type_name(io.data_type)),
            dims=tuple(io.dims),
            reshape=tuple(io.reshape.shape) if io.HasField("reshape") else None,
            label_filename=io.label_filename,
        )
        for io in config.output
    )
    sequence = sequence_io(config)
    extra_inputs: tuple[IOSpec, ...] = ()
    extra_outputs: tuple[IOSpec, ...] = ()
    if sequence is not None:
        extra_inputs = tuple(
            IOSpec(name=c.name, datatype=c.datatype, dims=(1,), reshape=None)
            for c in sequence.controls
        ) + tuple(
            IOSpec(name=s.input_name, datatype=s.datatype, dims=s.dims, reshape=None)
            for s in sequence.states
        )
        listed = {spec.name for spec in outputs}  # (a state may also be a config output)
        extra_outputs = tuple(
            IOSpec(name=s.output_name, datatype=s.datatype, dims=s.dims, reshape=None)
            for s in sequence.states
            if s.output_name not in listed
        )
    return ModelIO(
        config.max_batch_size,
        inputs,
        outputs,
        extra_inputs,
        extra_outputs,
        sequence,
        _batch_inputs(config),
        _batch_outputs(config),
    )


def _batch_inputs(config: ModelConfig) -> tuple[BatchInputSpec, ...]:
    return tuple(
        BatchInputSpec(
            kind=enum_name(model_config_pb2.BatchInput.Kind, b.kind),
            targets=tuple(b.target_name),
            datatype=datatypes.from_config_name(data_type_name(b.data_type)),
            sources=tuple(b.source_input),
        )
        for b in config.batch_input
    )


def _batch_outputs(config: ModelConfig) -> tuple[BatchOutputSpec, ...]:
    return tuple(
        BatchOutputSpec(
            kind=enum_name(model_config_pb2.BatchOutput.Kind, b.kind),
            targets=tuple(b.target_name),
            sources=tuple(b.source_input),
        )
        for b in config.batch_output
    )


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
                dt = datatypes.from_config_name(data_type_name(control.data_type))
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
    dt = datatypes.from_config_name(data_type_name(state.data_type))
    dims = tuple(int(d) for d in state.dims)
    shape = dims
    if state.initial_state:
        shape = tuple(int(d) for d in state.initial_state[0].dims) or dims
    initial = np.full(shape, b"", dtype=object) if dt.is_bytes else np.zeros(shape, dtype=dt.numpy)
    return StateSpec(state.input_name, state.output_name, dt, dims, initial)
