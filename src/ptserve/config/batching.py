"""Checks of ``dynamic_batching`` and ``sequence_batching``, as the reference makes at load."""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import model_config_pb2

from ptserve.common import datatypes
from ptserve.common.errors import ServerError, invalid_arg
from ptserve.config.parse import ModelConfig, data_type_name, enum_name

_CORRID_TYPES = {"TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING"}
_FLAG_FORMS = ("int32_false_true", "fp32_false_true", "bool_false_true")
# The order in which the reference checks the control kinds: START, END, READY, then CORRID.
_CONTROL_ORDER = (0, 2, 1, 3)
_DELAY = 1  # ModelQueuePolicy.TimeoutAction.DELAY
_BATCH_INPUT_KINDS = {
    "BATCH_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
    "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
    "BATCH_ITEM_SHAPE",
    "BATCH_ITEM_SHAPE_FLATTEN",
}


def fail(reference: str, detail: str = "") -> ServerError:
    """An invalid-argument error: the reference's sentence, then the specifics."""
    return invalid_arg(f"{reference}: {detail}" if detail else reference)


def check_batchers(config: ModelConfig, prefix: str) -> None:
    """Raise invalid-argument for the first batching setting the model cannot run with."""
    # The two are one protobuf oneof, so at most one is set.
    if config.HasField("dynamic_batching"):
        _check_dynamic(config, prefix)
    if config.HasField("sequence_batching"):
        _check_sequence(config, prefix)


def _check_dynamic(config: ModelConfig, prefix: str) -> None:
    model = config.name
    dynamic = config.dynamic_batching
    for size in dynamic.preferred_batch_size:
        if size < 1:
            raise fail(
                f"dynamic batching preferred size must be positive for {model}",
                f"dynamic_batching.preferred_batch_size {size}",
            )
        if size > config.max_batch_size:
            raise fail(
                f"dynamic batching preferred size must be <= max batch size for {model}",
                f"dynamic_batching.preferred_batch_size {size} must be between 1 and "
                f"max_batch_size {config.max_batch_size}",
            )
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
    else:
        if not 1 <= dynamic.default_priority_level <= levels:
            raise fail(
                f"default priority level must be in range [1, {levels}] for {model}",
                f"dynamic_batching.default_priority_level is {dynamic.default_priority_level}",
            )
        for level in dynamic.priority_queue_policy:
            if not 1 <= level <= levels:
                raise fail(
                    f"priority queue policy must have priority level in range [1, {levels}] "
                    f"for {model}",
                    f"dynamic_batching.priority_queue_policy has priority level {level}",
                )
    if dynamic.preserve_ordering:
        if levels > 1:
            raise fail(
                f"Only one priority level is allowed when 'preserve_ordering' is true for {model}",
                f"dynamic_batching.priority_levels is {levels}",
            )
        delaying = "Queue policy can not have DELAY as timeout action when 'preserve_ordering' "
        policies = [("default_queue_policy", dynamic.default_queue_policy)] + [
            (f"priority_queue_policy {level}", dynamic.priority_queue_policy[level])
            for level in sorted(dynamic.priority_queue_policy)
        ]
        for where, policy in policies:
            if policy.default_timeout_microseconds != 0 and policy.timeout_action == _DELAY:
                raise fail(
                    f"{delaying}is true for {model}",
                    f"dynamic_batching.{where} has timeout_action DELAY",
                )


def _check_sequence(config: ModelConfig, prefix: str) -> None:
    model = config.name
    batching = config.sequence_batching
    _check_controls(batching, model)
    if batching.WhichOneof("strategy_choice") == "oldest":
        width = max(config.max_batch_size, 1)
        for size in batching.oldest.preferred_batch_size:
            if size < 1:
                raise fail(
                    f"sequence batching preferred batch size must be positive for {model}",
                    f"sequence_batching.oldest.preferred_batch_size {size}",
                )
            if size > width:
                raise fail(
                    f"sequence batching preferred batch size must be <= max batch size for {model}",
                    f"sequence_batching.oldest.preferred_batch_size {size} must be between 1 "
                    f"and max_batch_size {width}",
                )
    else:
        utilization = batching.direct.minimum_slot_utilization
        if not 0.0 <= utilization <= 1.0:
            raise fail(
                f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for "
                f"{model}",
                f"sequence_batching.direct.minimum_slot_utilization is {utilization}",
            )
    taken = {io.name for io in config.input} | {io.name for io in config.output}
    state_outputs = {io.name for io in config.output}  # (config outputs a state may return)
    for control_input in batching.control_input:
        where = f"{prefix}: sequence_batching control input '{control_input.name}'"
        if control_input.name in taken:
            raise invalid_arg(f"{where}: the name is already used by another input or output")
        taken.add(control_input.name)
        if len(control_input.control) != 1:
            raise invalid_arg(
                f"{where}: must have exactly one control, got {len(control_input.control)}"
            )
    for state in batching.state:
        _check_state(prefix, state, taken, state_outputs)


def _check_controls(batching: Any, model: str) -> None:
    """The reference's control checks, one pass per control kind as it makes them."""
    for kind_value in _CONTROL_ORDER:
        kind = enum_name(model_config_pb2.ModelSequenceBatching.Control.Kind, kind_value)
        seen_names: set[str] = set()
        seen_kind = ""
        for control_input in batching.control_input:
            name = control_input.name
            if not name:
                raise fail(f"sequence batching control tensor must have a name for {model}")
            if name in seen_names:
                raise fail(
                    f"sequence batching control tensor '{name}' is specified for multiple "
                    f"control kinds for {model}",
                    "each control input is one tensor with one control kind",
                )
            seen_names.add(name)
            for control in control_input.control:
                if control.kind != kind_value:
                    continue
                if seen_kind:
                    raise fail(
                        f"sequence batching specifies multiple {kind} tensors for {model}",
                        f"control inputs '{seen_kind}' and '{name}' are both {kind}",
                    )
                seen_kind = name
                _check_control(control, kind, model, name)


def _check_control(control: Any, kind: str, model: str, name: str) -> None:
    forms = [form for form in _FLAG_FORMS if len(getattr(control, form))]
    where = f"control input '{name}'"
    if kind == "CONTROL_SEQUENCE_CORRID":
        if forms:
            raise fail(
                "sequence batching must not specify either 'int32_false_true', "
                f"'fp32_false_true' or 'bool_false_true' for {kind} for {model}",
                f"{where} sets {forms[0]}; {kind} takes only data_type",
            )
        type_name = data_type_name(control.data_type)
        if type_name not in _CORRID_TYPES:
            raise fail(
                f"unexpected data type for control {kind} for {model}. Allowed data types are "
                "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
                f"{where} has data_type {type_name}",
            )
        return
    if not forms:
        raise fail(
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            f"'bool_false_true' for {kind} for {model}",
            f"{where} sets none of them",
        )
    if len(forms) > 1:
        raise fail(
            "sequence batching specifies more than one from 'int32_false_true', "
            f"'fp32_false_true' and 'bool_false_true' for {kind} for {model}",
            f"{where} sets {' and '.join(forms)}",
        )
    values = getattr(control, forms[0])
    if len(values) != 2:
        raise fail(
            f"sequence batching control '{forms[0]}' must have exactly 2 entries for {kind} "
            f"for {model}",
            f"{where} {forms[0]} must list 2 values (false, true), got {len(values)}",
        )


def check_batch_io(config: ModelConfig) -> None:
    """The reference's checks of ``batch_input`` and ``batch_output``."""
    model = config.name
    inputs = {io.name for io in config.input}
    outputs = {io.name for io in config.output}
    for batch_input in config.batch_input:
        kind = enum_name(model_config_pb2.BatchInput.Kind, batch_input.kind)
        sources = list(batch_input.source_input)
        if kind not in _BATCH_INPUT_KINDS:
            raise fail(f"unknown batch input kind '{kind}' for {model}")
        if len(sources) != 1:
            raise fail(
                f"batch input kind '{kind}' expects 1 source input, got {len(sources)} for {model}",
                f"batch input '{batch_input.target_name}' lists source_input {sources}",
            )
        type_name = data_type_name(batch_input.data_type)
        if type_name not in ("TYPE_INT32", "TYPE_FP32"):
            raise fail(
                f"batch input data type must be TYPE_INT32 or TYPE_FP32 for {model}",
                f"batch input '{batch_input.target_name}' has data_type {type_name}",
            )
        for source in sources:
            if source not in inputs:
                raise fail(
                    f"unknown source input name '{source}' for {model}",
                    f"batch input '{batch_input.target_name}' names it, but the inputs are "
                    f"{sorted(inputs)}",
                )
    for batch_output in config.batch_output:
        kind = enum_name(model_config_pb2.BatchOutput.Kind, batch_output.kind)
        sources = list(batch_output.source_input)
        if kind != "BATCH_SCATTER_WITH_INPUT_SHAPE":
            raise fail(f"unknown batch output kind '{kind}' for {model}")
        if len(sources) != 1:
            raise fail(
                f"batch output kind '{kind}' expects 1 source input, got {len(sources)} "
                f"for {model}",
                f"batch output {list(batch_output.target_name)} lists source_input {sources}",
            )
        for source in sources:
            if source not in inputs:
                raise fail(
                    f"unknown source input name '{source}' for {model}",
                    f"batch output {list(batch_output.target_name)} names it, but the inputs "
                    f"are {sorted(inputs)}",
                )
        targets: set[str] = set()
        for target in batch_output.target_name:
            if target not in outputs:
                raise fail(
                    f"unknown target output name '{target}' for {model}",
                    f"the outputs are {sorted(outputs)}",
                )
            if target in targets:
                raise fail(
                    f"target output name '{target}' can only be specified once for {model}",
                    f"batch output target_name {list(batch_output.target_name)} repeats it",
                )
            targets.add(target)


def _check_state(prefix: str, state: Any, taken: set[str], outputs: set[str]) -> None:
    """A state's output may also be a config output (the client then gets it too)."""
    where = f"{prefix}: sequence_batching state '{state.input_name}'"
    if not state.input_name or not state.output_name:
        raise invalid_arg(
            f"{prefix}: every sequence_batching state needs input_name and output_name"
        )
    for name in (state.input_name, state.output_name):
        if name in taken and not (name == state.output_name and name in outputs):
            raise invalid_arg(f"{where}: '{name}' is already used by another input or output")
        taken.add(name)
    outputs.discard(state.output_name)  # (one state per output)
    if data_type_name(state.data_type) not in datatypes.BY_CONFIG_NAME:
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
