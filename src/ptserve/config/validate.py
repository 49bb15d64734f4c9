"""Checks of a completed model configuration.

Each error starts with the reference server's own sentence for the problem (clients and tools
match on it), then adds what exactly is wrong. The checks run in the reference's order: the
model-level fields, the batchers, the instance groups, then the inputs and outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

from ptserve.common import datatypes
from ptserve.common.errors import invalid_arg
from ptserve.config.batching import check_batch_io, check_batchers, fail
from ptserve.config.parse import ModelConfig, data_type_name

_KINDS = {0: "KIND_AUTO", 1: "KIND_GPU", 2: "KIND_CPU", 3: "KIND_MODEL"}
# The CUDA compute capability the reference requires of a GPU by default, as it prints it.
_MIN_COMPUTE_CAPABILITY = "6.000000"
# Which framework a platform or backend name belongs to; other names are custom backends.
_PLATFORM_TYPES = {
    "tensorrt_plan": "tensorrt",
    "tensorflow_graphdef": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "libtorch": "pytorch",
    "torch_aoti": "pytorch",
}
_BACKEND_TYPES = {"tensorrt", "tensorflow", "onnxruntime", "pytorch"}
# The ``runtime`` values a config may name: the Python runtime and the backend's own library.
RUNTIMES = ("model.py", "libtriton_pytorch.so")
# The backend a model file's extension implies when a config names no backend.
_FILE_BACKENDS = {
    ".plan": "tensorrt",
    ".graphdef": "tensorflow",
    ".savedmodel": "tensorflow",
    ".onnx": "onnxruntime",
    ".pt": "pytorch",
}


def instance_group_labels(config: ModelConfig, model_name: str) -> list[str]:
    """The names the reference gives the instance groups of a config not yet completed: the
    group's own name, else ``<model>_<index>`` (the single default group is ``<model>``)."""
    name = config.name or model_name
    if not config.instance_group:
        return [name]
    return [group.name or f"{name}_{index}" for index, group in enumerate(config.instance_group)]


def check_backend_fields(
    config: ModelConfig, model_name: str, runtimes: Sequence[str] = RUNTIMES
) -> None:
    """Refuse a platform/backend pair of two different frameworks, and a ``runtime`` that is
    not one of ``runtimes`` (or leaves the backend directory), before a backend is chosen."""
    platform = config.platform
    backend = config.backend or _implied_backend(config)
    if platform and backend and _PLATFORM_TYPES.get(platform, "") != _backend_type(backend):
        raise fail(
            f"unexpected 'platform' and 'backend' pair, got:{platform}, {backend}",
            f"platform '{platform}' is not a platform of the '{backend}' backend",
        )
    runtime = config.runtime
    if not runtime or runtime in runtimes:
        return
    path = PurePosixPath(runtime)
    if path.is_absolute() or ".." in path.parts:
        raise fail(
            f"backend library name '{runtime}' escapes backend directory",
            "a runtime is a file name inside the backend's directory",
        )
    known = ", ".join(f"'{r}'" for r in runtimes)
    raise fail(
        f"unable to find backend library '{runtime}' for model '{config.name or model_name}'",
        f"the runtimes served here are {known}",
    )


def validate_config(
    config: ModelConfig,
    *,
    gpu_count: int | None = None,
    group_labels: Sequence[str] | None = None,
) -> None:
    """Raise an invalid-argument error for the first problem found in ``config``.

    ``gpu_count`` (when known) checks the GPU ids of KIND_GPU groups; ``group_labels`` are the
    instance group names to report, from :func:`instance_group_labels` before completion.
    """
    model = config.name
    prefix = f"model '{model}'"
    if config.max_batch_size < 0:
        raise fail(
            f"'max_batch_size' must be non-negative value for {model}",
            f"got {config.max_batch_size}",
        )

    versions = config.version_policy
    if versions.WhichOneof("policy_choice") == "specific":
        bad = [v for v in versions.specific.versions if v < 0]
        if bad:
            raise invalid_arg(f"{prefix}: version_policy.specific.versions must be >= 0, got {bad}")
    if versions.WhichOneof("policy_choice") == "latest" and versions.latest.num_versions < 1:
        raise invalid_arg(f"{prefix}: version_policy.latest.num_versions must be >= 1")

    if config.HasField("dynamic_batching") and config.max_batch_size == 0:
        raise invalid_arg(
            f"{prefix}: dynamic_batching requires max_batch_size > 0, got max_batch_size 0"
        )
    check_batchers(config, prefix)

    if config.HasField("ensemble_scheduling"):
        raise fail(
            f"ensemble scheduling cannot be set for model '{model}' whose platform is not ensemble",
            f"platform is '{config.platform}'",
        )
    _check_instance_groups(config, gpu_count, group_labels)

    for kind, ios in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for io in ios:
            _check_io(config, kind, io)
            if io.name in seen:
                raise invalid_arg(f"{prefix}: {kind} name '{io.name}' appears more than once")
            seen.add(io.name)
    check_batch_io(config)
    # No inputs is allowed, as in the reference (the backend then checks what the model takes).
    if not config.output:
        raise fail("model configuration must contain at least one output, none were specified")


def _check_instance_groups(
    config: ModelConfig, gpu_count: int | None, labels: Sequence[str] | None
) -> None:
    model = config.name
    for index, group in enumerate(config.instance_group):
        label = labels[index] if labels is not None and index < len(labels) else group.name
        where = f"instance group {label} of model {model}"
        if group.count < 1:
            raise invalid_arg(
                f"model '{model}': instance_group '{group.name}' count must be >= 1, "
                f"got {group.count}"
            )
        kind = _KINDS.get(group.kind)
        if kind is None:
            raise invalid_arg(f"model '{model}': instance_group '{group.name}' has an unknown kind")
        gpus = list(group.gpus)
        if kind in ("KIND_CPU", "KIND_MODEL") and gpus:
            raise fail(
                f"{where} has kind {kind} but specifies one or more GPUs",
                f"gpus {gpus} are only for KIND_GPU",
            )
        if kind == "KIND_GPU" and gpu_count is not None:
            if not gpus and gpu_count == 0:
                raise fail(f"{where} has kind KIND_GPU but no GPUs are available")
            for gpu in gpus:
                if not 0 <= gpu < gpu_count:
                    visible = ", ".join(str(i) for i in range(gpu_count))
                    raise fail(
                        f"{where} specifies invalid or unsupported gpu id {gpu}. GPUs with at "
                        "least the minimum required CUDA compute compatibility of "
                        f"{_MIN_COMPUTE_CAPABILITY} are: {visible}",
                        f"{gpu_count} GPU(s) visible",
                    )


def _check_io(config: ModelConfig, kind: str, io: Any) -> None:
    """The reference's checks of one input or output, each naming the model at the end."""
    model = config.name
    if not io.name:
        raise fail(f"model {kind} must specify 'name' for {model}")
    what = f"model {kind} '{io.name}'"
    type_name = data_type_name(io.data_type)
    if io.data_type == 0:
        raise fail(f"{what} must specify 'data_type' for {model}", "data_type is TYPE_INVALID")
    if type_name not in datatypes.BY_CONFIG_NAME:
        raise invalid_arg(
            f"model '{model}': {kind} '{io.name}': 'data_type' must be set to a valid type, "
            f"got {type_name}"
        )
    dims = list(io.dims)
    if not dims and config.max_batch_size == 0:
        raise fail(
            f"{what} must specify 'dims' for {model}",
            "max_batch_size is 0, so there is no batch dimension",
        )
    has_reshape = io.HasField("reshape")
    shape = list(io.reshape.shape)
    if has_reshape and not shape and config.max_batch_size == 0:
        raise fail(
            f"{what} cannot have empty reshape for non-batching model as scalar tensors are "
            f"not supported for {model}"
        )
    for dim in dims:
        if dim < 1 and dim != -1:
            raise fail(
                f"{what} dimension must be integer >= 1, or -1 to indicate a variable-size "
                f"dimension for {model}",
                f"dims {dims} has {dim}",
            )
    if not has_reshape:
        return
    for dim in shape:
        if dim < 1 and dim != -1:
            raise fail(
                f"{what} reshape dimensions must be integer >= 1, or -1 to indicate a "
                f"variable-size dimension for {model}",
                f"reshape {shape} has {dim}",
            )
    _check_reshape(what, model, dims, shape)


def _element_count(dims: Sequence[int]) -> int:
    """As the reference counts: -1 when any dimension is variable, 0 for no dimensions."""
    if -1 in dims:
        return -1
    return datatypes.element_count(list(dims)) if dims else 0


def _check_reshape(what: str, model: str, dims: list[int], shape: list[int]) -> None:
    dims_size = _element_count(dims)
    shape_size = _element_count(shape)
    different = f"{what} has different size for dims and reshape for {model}"
    # An empty reshape (a scalar) fits dims of one element.
    if dims_size != shape_size and (shape_size != 0 or dims_size != 1):
        if dims_size == -1 or shape_size == -1:
            raise fail(
                different,
                f"dims {dims} and reshape {shape} must both be fixed-size or both variable",
            )
        raise fail(
            different,
            f"reshape {shape} has {shape_size} elements, but dims {dims} has {dims_size}",
        )
    if dims_size != -1:
        return
    # Variable sizes: the fixed runs between the -1 dimensions must hold the same counts.
    dims_runs, shape_runs = _runs(dims), _runs(shape)
    if len(dims_runs) != len(shape_runs):
        raise fail(
            f"{what} has different number of variable-size dimensions for dims and reshape "
            f"for {model}",
            f"dims {dims} has {dims.count(-1)}, reshape {shape} has {shape.count(-1)}",
        )
    for index, (left, right) in enumerate(zip(dims_runs, shape_runs, strict=True)):
        if left != right:
            raise fail(
                different,
                f"the fixed dimensions of run {index} (between the -1 dimensions) hold {left} "
                f"elements in dims {dims} but {right} in reshape {shape}",
            )


def _runs(dims: Sequence[int]) -> list[int]:
    runs: list[int] = []
    count = 1
    for dim in dims:
        if dim == -1:
            runs.append(count)
            count = 1
        else:
            count *= dim
    runs.append(count)
    return runs


def _implied_backend(config: ModelConfig) -> str:
    """The backend the reference fills in when a config names only a platform."""
    if config.platform in _PLATFORM_TYPES:
        return _PLATFORM_TYPES[config.platform]
    if config.platform and config.default_model_filename:
        return _FILE_BACKENDS.get(PurePosixPath(config.default_model_filename).suffix, "")
    return ""


def _backend_type(backend: str) -> str:
    return backend if backend in _BACKEND_TYPES else ""
