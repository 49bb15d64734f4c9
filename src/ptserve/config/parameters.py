"""A config's ``parameters``, read as the original PyTorch backend parses them (booleans as
true/on/1 or false/off/0, integers in base 10), and the parameters ptserve itself reads beside the
backend's: the execution timeout and inline execution."""

from __future__ import annotations

from ptserve.common.errors import invalid_arg
from ptserve.config.parse import ModelConfig

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


EXECUTION_TIMEOUT_PARAMETER = "EXECUTION_TIMEOUT_MS"
INLINE_PARAMETER = "MAX_INLINE_EXECUTION_US"
DEFAULT_MAX_INLINE_US = 500


def _non_negative(config: ModelConfig, key: str, default: int, unit: str, zero: str) -> int:
    text = string_param(config, key)
    if text is None:
        return default
    try:
        value = int(text.strip(), 10)
    except ValueError:
        value = -1
    if value < 0:
        raise invalid_arg(
            f"model '{config.name}': parameter {key} must be a whole number of {unit} "
            f"(0: {zero}), got {text!r}"
        )
    return value


def execution_timeout_ms(config: ModelConfig) -> int:
    """``EXECUTION_TIMEOUT_MS``: how long one execution may run before its requests fail and the
    instance is set aside; 0 (the default) means no timeout."""
    return _non_negative(config, EXECUTION_TIMEOUT_PARAMETER, 0, "milliseconds", "no timeout")


def max_inline_execution_us(config: ModelConfig) -> int:
    """``MAX_INLINE_EXECUTION_US``: executions whose recent average is shorter than this may run
    on the thread that received the request (see ``scheduling.worker``); 0 turns that off."""
    return _non_negative(
        config, INLINE_PARAMETER, DEFAULT_MAX_INLINE_US, "microseconds", "never inline"
    )
