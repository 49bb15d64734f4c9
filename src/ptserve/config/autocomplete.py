"""Filling in what a config may leave out, as the reference server does before serving it."""

from __future__ import annotations

from ptserve.common.errors import invalid_arg
from ptserve.config.parse import ModelConfig

_pb = ModelConfig.DESCRIPTOR.file.pool
KIND_AUTO = 0
KIND_GPU = 1
KIND_CPU = 2
KIND_MODEL = 3
# A sequence with no request for this long is released (the reference's default: 1 s).
DEFAULT_SEQUENCE_IDLE_US = 1_000_000


def auto_complete(config: ModelConfig, model_name: str, gpu_count: int) -> None:
    """Complete the backend-independent parts of ``config`` in place.

    The backend has already set platform, backend and ``default_model_filename``.
    """
    if not config.name:
        config.name = model_name
    elif config.name != model_name:
        raise invalid_arg(
            f"model '{model_name}': the config names the model '{config.name}', "
            "but the model folder is called "
            f"'{model_name}'; they must match"
        )
    if not config.HasField("version_policy") or (
        config.version_policy.WhichOneof("policy_choice") == "latest"
        and config.version_policy.latest.num_versions == 0
    ):
        config.version_policy.latest.num_versions = 1

    if not config.instance_group:
        config.instance_group.add()
    for index, group in enumerate(config.instance_group):
        if not group.name:
            single = len(config.instance_group) == 1
            group.name = config.name if single else f"{config.name}_{index}"
        if group.count == 0:
            group.count = 1
        if group.kind == KIND_AUTO:
            # As the reference: KIND_CPU when there is no GPU or a listed GPU is absent.
            present = all(0 <= gpu < gpu_count for gpu in group.gpus)
            on_gpu = gpu_count > 0 and present and not _model_kind(config)
            group.kind = KIND_GPU if on_gpu else KIND_CPU
        if group.kind == KIND_GPU and not group.gpus:
            group.gpus.extend(range(gpu_count))

    if config.HasField("dynamic_batching") and not config.dynamic_batching.preferred_batch_size:
        config.dynamic_batching.preferred_batch_size.append(max(config.max_batch_size, 1))

    if config.HasField("sequence_batching"):
        sequence = config.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = DEFAULT_SEQUENCE_IDLE_US
        if sequence.WhichOneof("strategy_choice") is None:
            sequence.direct.SetInParent()

    if not config.HasField("optimization"):
        config.optimization.input_pinned_memory.enable = True
        config.optimization.output_pinned_memory.enable = True


def _model_kind(config: ModelConfig) -> bool:
    return any(group.kind == KIND_MODEL for group in config.instance_group)
