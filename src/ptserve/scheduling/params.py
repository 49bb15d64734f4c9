"""The request parameters the scheduler acts on, checked once as the request arrives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ptserve.common.errors import invalid_arg

_UINT64_MAX = 2**64 - 1


@dataclass(frozen=True, slots=True)
class RequestOptions:
    """``priority``, ``timeout`` and the sequence parameters of one request."""

    priority: int = 0  # 0: the model's default level
    timeout_ns: int = 0  # 0: the queue policy's default
    sequence_id: int | str = 0  # 0 or "": not part of a sequence
    start: bool = False
    end: bool = False

    @property
    def in_sequence(self) -> bool:
        return self.sequence_id not in (0, "")


NO_OPTIONS = RequestOptions()
_NAMES = frozenset(("priority", "timeout", "sequence_id", "sequence_start", "sequence_end"))


def request_options(parameters: dict[str, Any]) -> RequestOptions:
    """Read and check the scheduling parameters; a bad one is a 400 that names it."""
    if not parameters or _NAMES.isdisjoint(parameters):
        return NO_OPTIONS
    priority = _uint(parameters, "priority")
    timeout_us = _uint(parameters, "timeout")
    sequence_id = parameters.get("sequence_id", 0)
    if isinstance(sequence_id, bool) or not isinstance(sequence_id, int | str):
        raise invalid_arg(
            f"parameter 'sequence_id' must be an unsigned integer or a string, got {sequence_id!r}"
        )
    if isinstance(sequence_id, int) and not 0 <= sequence_id <= _UINT64_MAX:
        raise invalid_arg(
            f"parameter 'sequence_id' must be between 0 and {_UINT64_MAX}, got {sequence_id}"
        )
    start = _bool(parameters, "sequence_start")
    end = _bool(parameters, "sequence_end")
    if (start or end) and sequence_id in (0, ""):
        raise invalid_arg(
            "parameters 'sequence_start' and 'sequence_end' need a non-zero or non-empty "
            "'sequence_id'"
        )
    return RequestOptions(priority, timeout_us * 1000, sequence_id, start, end)


def _uint(parameters: dict[str, Any], name: str) -> int:
    value = parameters.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _UINT64_MAX:
        raise invalid_arg(f"parameter '{name}' must be an unsigned integer, got {value!r}")
    return value


def _bool(parameters: dict[str, Any], name: str) -> bool:
    value = parameters.get(name, False)
    if not isinstance(value, bool):
        raise invalid_arg(f"parameter '{name}' must be true or false, got {value!r}")
    return value
