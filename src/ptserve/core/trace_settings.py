"""Trace settings of the trace extension: global values plus per-model overrides.

ptserve does not emit traces yet; the settings are kept and validated so clients that read or
set them work, and so tracing can later read them from one place.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from ptserve.common.errors import invalid_arg

TraceValue = str | list[str]

TRACE_LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
TRACE_MODES = ("triton", "opentelemetry")

DEFAULTS: dict[str, TraceValue] = {
    "trace_file": "",
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_mode": "triton",
}


def _single(key: str, value: TraceValue) -> str:
    if isinstance(value, str):
        return value
    if len(value) != 1:
        raise invalid_arg(f"trace setting '{key}' takes one value, got {len(value)}")
    return value[0]


def _integer(key: str, text: str, minimum: int) -> str:
    try:
        number = int(text)
    except ValueError:
        raise invalid_arg(f"trace setting '{key}' must be an integer, got '{text}'") from None
    if number < minimum:
        raise invalid_arg(f"trace setting '{key}' must be >= {minimum}, got {number}")
    return str(number)


def validate(key: str, value: TraceValue) -> TraceValue:
    """The normalised value of one setting; a clear error for unknown keys or bad values."""
    if key not in DEFAULTS:
        raise invalid_arg(f"unknown trace setting '{key}'; known settings: {', '.join(DEFAULTS)}")
    if key == "trace_level":
        levels = [value] if isinstance(value, str) else list(value)
        for level in levels:
            if level not in TRACE_LEVELS:
                raise invalid_arg(f"trace_level '{level}' is not one of {', '.join(TRACE_LEVELS)}")
        if "OFF" in levels and len(levels) > 1:
            raise invalid_arg("trace_level OFF cannot be combined with other levels")
        return levels
    text = _single(key, value)
    if key == "trace_rate":
        return _integer(key, text, 1)
    if key == "trace_count":
        return _integer(key, text, -1)
    if key == "log_frequency":
        return _integer(key, text, 0)
    if key == "trace_mode" and text not in TRACE_MODES:
        raise invalid_arg(f"trace_mode '{text}' is not one of {', '.join(TRACE_MODES)}")
    return text


class TraceSettings:
    """Global settings and the per-model overrides layered on top of them."""

    def __init__(self) -> None:
        self._global: dict[str, TraceValue] = dict(DEFAULTS)
        self._models: dict[str, dict[str, TraceValue]] = {}
        self._lock = threading.Lock()
        # Nothing ever changed: tracing is off everywhere (the defaults), which the per-request
        # check can tell without merging dictionaries under the lock.
        self.untouched = True

    def get(self, model: str = "") -> dict[str, TraceValue]:
        with self._lock:
            merged = dict(self._global)
            merged.update(self._models.get(model, {}) if model else {})
            return merged

    def update(self, changes: Mapping[str, TraceValue | None], model: str = "") -> None:
        """Apply every change or none. ``None`` (or an empty list) clears a setting: a model's
        override falls back to the global value, a global one to its default."""
        checked: dict[str, TraceValue | None] = {}
        for key, value in changes.items():
            if key not in DEFAULTS:
                validate(key, "")
            if value is None or (isinstance(value, list) and not value):
                checked[key] = None
            else:
                checked[key] = validate(key, value)
        with self._lock:
            self.untouched = False
            target = self._models.setdefault(model, {}) if model else self._global
            for key, value in checked.items():
                if value is not None:
                    target[key] = value
                elif model:
                    target.pop(key, None)
                else:
                    target[key] = DEFAULTS[key]
