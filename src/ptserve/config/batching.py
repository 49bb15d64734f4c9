"""Checks of ``dynamic_batching`` and ``sequence_batching``, as the reference makes at load."""

from __future__ import annotations

from typing import Any

from ptserve.config.parse import ModelConfig
from ptserve.core import datatypes
from ptserve.core.errors import invalid_arg

_CORRID_TYPES = {"TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING"}
_FLAG_FORMS = ("int32_false_true", "fp32_false_true", "bool_false_true")


def check_batchers(config: ModelConfig, prefix: str) -> None:
    """Raise invalid-argument for the first batching setting the model cannot run with."""
    # The two are one protobuf oneof, so at most one is set.
    if config.HasField("dynamic_batching"):
        _check_dynamic(config, prefix)
    if config.HasField("sequence_batching"):
        _check_sequence(config, prefix)


def _check_dynamic(config: ModelConfig, prefix: str) -> None:
    dynamic = config.dynamic_batching
    levels = dynamic.priority_levels
    if levels == 0:
        if dynamic.priority_queue_policy:
            raise invalid_arg(
                f"{prefix}: dynamic_batching.priority_queue_policy needs priority_levels > 0"
            )
        if dynamic.default_priority_level != 0:
            raise invalid_arg(
                f"{prefix}: dynamic_batching.default_priority_level "
                f"{dynamic.default_priority_level} needs priority_levels > 0"
            )
        return
    if not 1 <= dynamic.default_priority_level <= levels:
        raise invalid_arg(
            f"{prefix}: dynamic_batching.default_priority_level must be in range [1, {levels}], "
            f"got {dynamic.default_priority_level}"
        )
    for level in dynamic.priority_queue_policy:
        if not 1 <= level <= levels:
            raise invalid_arg(
                f"{prefix}: dynamic_batching.priority_queue_policy has priority level {level}; "
                f"levels must be in range [1, {levels}]"
            )


def _check_sequence(config: ModelConfig, prefix: str) -> None:
    batching = config.sequence_batching
    width = max(config.max_batch_size, 1)
    if batching.WhichOneof("strategy_choice") == "oldest":
        for size in batching.oldest.preferred_batch_size:
            if not 1 <= size <= width:
                raise invalid_arg(
                    f"{prefix}: sequence_batching.oldest.preferred_batch_size {size} must be "
                    f"between 1 and max_batch_size {width}"
                )
    else:
        utilization = batching.direct.minimum_slot_utilization
        if not 0.0 <= utilization <= 1.0:
            raise invalid_arg(
                f"{prefix}: sequence_batching.direct.minimum_slot_utilization must be between "
                f"0 and 1, got {utilization}"
            )
    taken = {io.name for io in config.input} | {io.name for io in config.output}
    kinds: set[int] = set()
    for control_input in batching.control_input:
        where = f"{prefix}: sequence_batching control input '{control_input.name}'"
        if not control_input.name:
            raise invalid_arg(f"{prefix}: every sequence_batching control input needs a name")
        if control_input.name in taken:
            raise invalid_arg(f"{where}: the name is already used by another input or output")
        taken.add(control_input.name)
        if len(control_input.control) != 1:
            raise invalid_arg(
                f"{where}: must have exactly one control, got {len(control_input.control)}"
            )
        for control in control_input.control:
            _check_control(where, control)
            if control.kind in kinds:
                raise invalid_arg(f"{where}: control kind {_kind(control.kind)} appears twice")
            kinds.add(control.kind)
    for state in batching.state:
        _check_state(prefix, state, taken)


def _check_control(where: str, control: Any) -> None:
    kind = _kind(control.kind)
    forms = [form for form in _FLAG_FORMS if len(getattr(control, form))]
    if kind == "CONTROL_SEQUENCE_CORRID":
        type_name = _type_name(control.data_type)
        if forms or type_name not in _CORRID_TYPES:
            raise invalid_arg(
                f"{where}: {kind} takes only data_type, one of {sorted(_CORRID_TYPES)}; got "
                f"data_type {type_name}" + (f" and {forms[0]}" if forms else "")
            )
        return
    if len(forms) != 1:
        raise invalid_arg(
            f"{where}: {kind} must set exactly one of {', '.join(_FLAG_FORMS)}, got {len(forms)}"
        )
    values = getattr(control, forms[0])
    if len(values) != 2:
        raise invalid_arg(
            f"{where}: {kind} {forms[0]} must list 2 values (false, true), got {len(values)}"
        )


def _check_state(prefix: str, state: Any, taken: set[str]) -> None:
    where = f"{prefix}: sequence_batching state '{state.input_name}'"
    if not state.input_name or not state.output_name:
        raise invalid_arg(
            f"{prefix}: every sequence_batching state needs input_name and output_name"
        )
    for name in (state.input_name, state.output_name):
        if name in taken:
            raise invalid_arg(f"{where}: '{name}' is already used by another input or output")
        taken.add(name)
    if _type_name(state.data_type) not in datatypes.BY_CONFIG_NAME:
        raise invalid_arg(f"{where}: 'data_type' must be set to a valid type")
    if not state.dims or any(d < -1 or d == 0 for d in state.dims):
        raise invalid_arg(f"{where}: 'dims' {list(state.dims)} must list positive sizes or -1")
    if len(state.initial_state) > 1:
        raise invalid_arg(f"{where}: at most one initial_state is supported")
    if state.initial_state:
        initial = state.initial_state[0]
        if initial.WhichOneof("state_data") == "data_file":
            raise invalid_arg(f"{where}: initial_state.data_file is not supported; use zero_data")
        shape = list(initial.dims) or list(state.dims)
        if len(shape) != len(state.dims) or any(
            d < 1 or (s != -1 and s != d) for s, d in zip(state.dims, shape, strict=True)
        ):
            raise invalid_arg(
                f"{where}: initial_state dims {shape} must be concrete and match dims "
                f"{list(state.dims)}"
            )
    elif -1 in state.dims:
        raise invalid_arg(
            f"{where}: dims {list(state.dims)} are variable, so an initial_state with concrete "
            "dims is needed"
        )


def _kind(value: int) -> str:
    from tritonclient.grpc import model_config_pb2

    return str(model_config_pb2.ModelSequenceBatching.Control.Kind.Name(value))


def _type_name(value: int) -> str:
    from tritonclient.grpc import model_config_pb2

    try:
        return str(model_config_pb2.DataType.Name(value))
    except ValueError:
        return str(value)
