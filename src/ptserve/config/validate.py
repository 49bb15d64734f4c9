"""Checks of a completed model configuration, with errors that name the model, field and problem."""

from __future__ import annotations

from collections.abc import Sequence

from ptserve.config.batching import check_batchers
from ptserve.config.parse import ModelConfig
from ptserve.core import datatypes
from ptserve.core.errors import invalid_arg

_KINDS = {0: "KIND_AUTO", 1: "KIND_GPU", 2: "KIND_CPU", 3: "KIND_MODEL"}


def validate_config(config: ModelConfig) -> None:
    """Raise an invalid-argument error for the first problem found in ``config``."""
    model = config.name
    prefix = f"model '{model}'"
    if config.max_batch_size < 0:
        raise invalid_arg(f"{prefix}: max_batch_size must be >= 0, got {config.max_batch_size}")
    if not config.input:
        raise invalid_arg(f"{prefix}: model configuration must contain at least one input")
    if not config.output:
        raise invalid_arg(f"{prefix}: model configuration must contain at least one output")
    for kind, ios in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for io in ios:
            where = f"{prefix}: {kind} '{io.name}'"
            if not io.name:
                raise invalid_arg(f"{prefix}: every {kind} must have a non-empty 'name'")
            if io.name in seen:
                raise invalid_arg(f"{prefix}: {kind} name '{io.name}' appears more than once")
            seen.add(io.name)
            type_name = _type_name(io.data_type)
            if type_name not in datatypes.BY_CONFIG_NAME:
                raise invalid_arg(
                    f"{where}: 'data_type' must be set to a valid type, got {type_name}"
                )
            _check_dims(where, "dims", io.dims, allow_empty=config.max_batch_size > 0)
            if io.HasField("reshape"):
                _check_dims(where, "reshape.shape", io.reshape.shape, allow_empty=True)
                _check_reshape(where, list(io.dims), list(io.reshape.shape))

    versions = config.version_policy
    if versions.WhichOneof("policy_choice") == "specific":
        bad = [v for v in versions.specific.versions if v < 0]
        if bad:
            raise invalid_arg(f"{prefix}: version_policy.specific.versions must be >= 0, got {bad}")
    if versions.WhichOneof("policy_choice") == "latest" and versions.latest.num_versions < 1:
        raise invalid_arg(f"{prefix}: version_policy.latest.num_versions must be >= 1")

    for group in config.instance_group:
        if group.count < 1:
            raise invalid_arg(
                f"{prefix}: instance_group '{group.name}' count must be >= 1, got {group.count}"
            )
        if group.kind not in _KINDS:
            raise invalid_arg(f"{prefix}: instance_group '{group.name}' has an unknown kind")
        if group.kind != 1 and group.gpus:
            raise invalid_arg(
                f"{prefix}: instance_group '{group.name}' lists gpus {list(group.gpus)} "
                f"but its kind is {_KINDS[group.kind]}; gpus are only for KIND_GPU"
            )

    if config.HasField("dynamic_batching"):
        if config.max_batch_size == 0:
            raise invalid_arg(
                f"{prefix}: dynamic_batching requires max_batch_size > 0, got max_batch_size 0"
            )
        for size in config.dynamic_batching.preferred_batch_size:
            if size < 1 or size > config.max_batch_size:
                raise invalid_arg(
                    f"{prefix}: dynamic_batching.preferred_batch_size {size} must be between 1 "
                    f"and max_batch_size {config.max_batch_size}"
                )
    check_batchers(config, prefix)


def _type_name(value: int) -> str:
    enum = ModelConfig.DESCRIPTOR.fields_by_name["input"].message_type.fields_by_name["data_type"]
    found = enum.enum_type.values_by_number.get(value)
    return found.name if found is not None else str(value)


def _check_dims(where: str, field: str, dims: Sequence[int], *, allow_empty: bool) -> None:
    if not dims and not allow_empty:
        raise invalid_arg(
            f"{where}: '{field}' must list at least one dimension (max_batch_size is 0, "
            "so there is no batch dimension)"
        )
    for dim in dims:
        if dim < -1 or dim == 0:
            raise invalid_arg(
                f"{where}: '{field}' {list(dims)} has dimension {dim}; each must be "
                "a positive size or -1 for a variable size"
            )


def _check_reshape(where: str, dims: list[int], shape: list[int]) -> None:
    if -1 in dims or -1 in shape:
        if dims.count(-1) != shape.count(-1):
            raise invalid_arg(
                f"{where}: dims {dims} and reshape {shape} must have the same number of "
                "variable (-1) dimensions"
            )
        return
    if datatypes.element_count(dims) != datatypes.element_count(shape):
        raise invalid_arg(
            f"{where}: reshape {shape} has {datatypes.element_count(shape)} elements, "
            f"but dims {dims} has {datatypes.element_count(dims)}"
        )
