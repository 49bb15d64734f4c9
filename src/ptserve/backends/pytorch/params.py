"""Reading the backend's ``parameters`` from config.pbtxt, parsed as the original backend does."""

from __future__ import annotations

from ptserve.config.parse import ModelConfig
from ptserve.core.errors import invalid_arg

_TRUE = {"true", "on", "1"}
_FALSE = {"false", "off", "0"}


def parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise invalid_arg(f"failed to convert '{value}' to boolean")


def parse_int(value: str) -> int:
    text = value.strip()
    try:
        return int(text, 10)
    except ValueError:
        raise invalid_arg(f"failed to convert '{value}' to integral number") from None


def string_param(config: ModelConfig, key: str) -> str | None:
    """The ``string_value`` of a parameter, or None when the config does not set it."""
    if key in config.parameters:
        return str(config.parameters[key].string_value)
    return None


def bool_param(config: ModelConfig, key: str, default: bool) -> bool:
    value = string_param(config, key)
    if value is None:
        return default
    try:
        return parse_bool(value)
    except Exception as exc:
        raise invalid_arg(f"model '{config.name}': parameter {key}: {exc}") from None


def optional_bool_param(config: ModelConfig, key: str) -> bool | None:
    value = string_param(config, key)
    if value is None:
        return None
    return bool_param(config, key, False)


def int_param(config: ModelConfig, key: str) -> int | None:
    value = string_param(config, key)
    if value is None:
        return None
    try:
        return parse_int(value)
    except Exception as exc:
        raise invalid_arg(f"model '{config.name}': parameter {key}: {exc}") from None
