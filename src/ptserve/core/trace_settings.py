"""Trace settings of the trace extension: global values plus per-model overrides, and where
OpenTelemetry traces are exported (set at start only).

``trace_level``, ``trace_rate``, ``trace_count`` and ``trace_mode`` apply in both modes and can
be changed at run time, globally or per model (``core/tracing.py`` reads them per request);
``trace_file`` and ``log_frequency`` concern the ``triton`` mode's JSON lines. The exporter's
settings (``OtelSettings``: collector URL, resource attributes, batch span processor sizes) come
from ``--trace-config opentelemetry,KEY=VALUE`` and hold for the process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

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


DEFAULT_OTEL_URL = "http://localhost:4318/v1/traces"

# The batch span processor's settings, as ``--trace-config opentelemetry,KEY=N`` names them.
BSP_KEYS = ("bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size")


@dataclass(frozen=True, slots=True)
class OtelSettings:
    """Where and how OpenTelemetry spans are exported (OTLP over HTTP, protobuf).

    ``None`` for a batch span processor setting leaves it to the SDK (its ``OTEL_BSP_*``
    environment variables, else its defaults: 2048 spans queued, 5000 ms between exports, 512
    spans per export)."""

    url: str = DEFAULT_OTEL_URL
    resource: tuple[tuple[str, str], ...] = ()  # added to service.name=ptserve
    bsp_max_queue_size: int | None = None
    bsp_schedule_delay: int | None = None  # milliseconds
    bsp_max_export_batch_size: int | None = None

    def with_setting(self, key: str, value: str) -> OtelSettings:
        """A copy with ``key`` (url, resource or a bsp_* key) set from its text; a clear error
        for an unknown key or a bad value. A ``url`` without a scheme is taken as http://;
        ``resource`` adds one ``<name>=<value>``."""
        if key == "url":
            # As the reference takes it, a URL without a scheme (localhost:4318/v1/traces) is
            # http://.
            url = value if "://" in value else f"http://{value}"
            parts = urlsplit(url)
            try:
                parts.port  # noqa: B018 - raises ValueError for a port that is not one
            except ValueError:
                parts = parts._replace(netloc="")
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise invalid_arg(
                    "opentelemetry setting 'url' must be an http:// or https:// URL with a "
                    "host (and a port number, if any): an OTLP/HTTP traces endpoint, e.g. "
                    f"{DEFAULT_OTEL_URL}; got '{value}'"
                )
            return replace(self, url=url)
        if key == "resource":
            name, eq, item = value.partition("=")
            if not eq or not name.strip():
                raise invalid_arg(
                    "opentelemetry setting 'resource' must be <key>=<value> (e.g. "
                    f"resource=deployment.environment=prod), got '{value}'"
                )
            return replace(self, resource=(*self.resource, (name.strip(), item.strip())))
        if key in BSP_KEYS:
            try:
                number = int(value)
            except ValueError:
                number = 0
            if number < 1:
                raise invalid_arg(
                    f"opentelemetry setting '{key}' must be a positive integer, got '{value}'"
                )
            if key == "bsp_max_queue_size":
                changed = replace(self, bsp_max_queue_size=number)
            elif key == "bsp_schedule_delay":
                changed = replace(self, bsp_schedule_delay=number)
            else:
                changed = replace(self, bsp_max_export_batch_size=number)
            queue, batch = changed.bsp_max_queue_size, changed.bsp_max_export_batch_size
            if queue is not None and batch is not None and batch > queue:
                raise invalid_arg(
                    f"opentelemetry setting 'bsp_max_export_batch_size' ({batch}) must not "
                    f"exceed 'bsp_max_queue_size' ({queue})"
                )
            return changed
        raise invalid_arg(
            f"unknown opentelemetry setting '{key}'; known settings: url, resource, "
            f"{', '.join(BSP_KEYS)}"
        )


# ``--trace-config [<mode>,]<key>=<value>``: the flag's names for the trace settings.
CONFIG_KEYS = {
    "file": "trace_file",
    "level": "trace_level",
    "rate": "trace_rate",
    "count": "trace_count",
    "log-frequency": "log_frequency",
    "log_frequency": "log_frequency",
    "mode": "trace_mode",
}
OTEL_PREFIX = "opentelemetry."  # the parsed name of an exporter setting: opentelemetry.url


def parse_config_item(text: str) -> tuple[str, str]:
    """One ``--trace-config`` value → (setting, value): a trace setting (``trace_rate``), or
    an exporter setting (``opentelemetry.url``) when it is ``opentelemetry,url=...``. The value
    is checked here, so a mistake is reported with the flag."""
    mode, sep, setting = text.partition(",")
    if not sep:
        mode, setting = "", text
    key, eq, value = setting.partition("=")
    key, value = key.strip(), value.strip()
    otel_keys = ("url", "resource", *BSP_KEYS)
    if eq and mode == "opentelemetry" and key in otel_keys:
        OtelSettings().with_setting(key, value)
        return OTEL_PREFIX + key, value
    name = CONFIG_KEYS.get(key)
    if not eq or name is None or mode not in ("", "triton", "opentelemetry"):
        raise invalid_arg(
            f"expected [triton,]<key>=<value> with key one of {', '.join(sorted(CONFIG_KEYS))}, "
            f"or opentelemetry,<key>=<value> with key one of {', '.join(otel_keys)}; got "
            f"'{text}'"
        )
    validate(name, value)
    return name, value


def parse_config(items: Iterable[tuple[str, str]]) -> tuple[dict[str, TraceValue], OtelSettings]:
    """Parsed ``--trace-config`` items → (changes to the global trace settings, exporter
    settings). Repeated ``level`` values add up (``level=TIMESTAMPS level=TENSORS``)."""
    changes: dict[str, TraceValue] = {}
    levels: list[str] = []
    otel = OtelSettings()
    for name, value in items:
        if name.startswith(OTEL_PREFIX):
            otel = otel.with_setting(name[len(OTEL_PREFIX) :], value)
        elif name == "trace_level":
            levels.append(value)
        else:
            changes[name] = value
    if levels:
        changes["trace_level"] = levels
    return changes, otel


class TraceSettings:
    """Global settings and the per-model overrides layered on top of them."""

    def __init__(self) -> None:
        self.otel = OtelSettings()  # the exporter's, for the opentelemetry mode
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

    def modes(self) -> set[str]:
        """The trace modes of the global settings and of every model's."""
        with self._lock:
            found = {_single("trace_mode", self._global["trace_mode"])}
            for values in self._models.values():
                if "trace_mode" in values:
                    found.add(_single("trace_mode", values["trace_mode"]))
            return found

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
