"""Reading ``config.pbtxt`` with protobuf's text format into the real ``ModelConfig`` message."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ptserve.common.errors import invalid_arg

__all__ = [
    "ModelConfig",
    "config_path",
    "data_type_name",
    "enum_name",
    "load_config",
    "parse_config",
]

CONFIG_FILENAME = "config.pbtxt"


def parse_config(text: str, where: str) -> ModelConfig:
    """Parse config text; ``where`` names the model or file in the error."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise invalid_arg(f"failed to parse the model configuration of {where}: {exc}") from None
    return config


def config_path(model_dir: Path, config_name: str = "") -> Path | None:
    """The configuration file of a model folder: ``configs/<name>.pbtxt`` when a custom config
    name is chosen and present, else ``config.pbtxt``; None when there is none."""
    if config_name:
        custom = model_dir / "configs" / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    default = model_dir / CONFIG_FILENAME
    return default if default.is_file() else None


def load_config(model_dir: Path, config_name: str = "", *, required: bool = False) -> ModelConfig:
    """The model's configuration file, parsed; an empty config when there is none."""
    path = config_path(model_dir, config_name)
    if path is None:
        if required:
            raise invalid_arg(
                f"model '{model_dir.name}': no configuration file {model_dir / CONFIG_FILENAME} "
                "(required by --strict-model-config / --disable-auto-complete-config)"
            )
        return ModelConfig()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise invalid_arg(f"model '{model_dir.name}': cannot read {path}: {exc}") from None
    config: ModelConfig = parse_config(text, f"model '{model_dir.name}' ({path})")
    return config


def enum_name(enum: EnumTypeWrapper, value: int) -> str:
    """The name of a value of one of the schema's enums (``model_config_pb2.BatchInput.Kind``,
    ...); the number itself for a value the schema does not define."""
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


def data_type_name(value: int) -> str:
    """A ``data_type`` field's name, e.g. ``TYPE_FP32``."""
    return enum_name(model_config_pb2.DataType, value)
