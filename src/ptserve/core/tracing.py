"""Request traces: the time each stage of a sampled request began, written as JSON lines.

Which requests are traced follows the trace settings of their model: ``trace_level`` (OFF
disables), ``trace_rate`` (one of every N requests), ``trace_count`` (how many more traces;
-1 = no limit) and ``trace_file``. ``log_frequency`` N > 0 writes the traces in groups of N;
0 writes each as soon as its request ends. Timestamps are monotonic nanoseconds.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field

import orjson

from ptserve.core.trace_settings import TraceSettings, TraceValue

log = logging.getLogger("ptserve.trace")


@dataclass(slots=True)
class Trace:
    """One traced request: its identity and the stages seen so far."""

    id: int
    model_name: str
    request_id: str
    file: str
    frequency: int
    model_version: int = 0
    timestamps: list[tuple[str, int]] = field(default_factory=list)

    def mark(self, stage: str, ns: int | None = None) -> None:
        self.timestamps.append((stage, time.perf_counter_ns() if ns is None else ns))


@dataclass(slots=True)
class _Scope:
    """Sampling state of one settings scope (the global settings, or one model's)."""

    seen: int = 0
    remaining: int = -1


def _text(value: TraceValue) -> str:
    return value if isinstance(value, str) else (value[0] if value else "")


class Tracer:
    """Samples requests by the trace settings and writes the traces."""

    def __init__(self, settings: TraceSettings) -> None:
        self.settings = settings
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._scopes: dict[str, _Scope] = {}
        self._buffers: dict[str, list[bytes]] = {}

    def _scope_of(self, model: str) -> str:
        """Models without their own settings share the global scope (and its count)."""
        return model if self.settings.get(model) != self.settings.get("") else ""

    def begin(self, model: str, request_id: str) -> Trace | None:
        """A new trace when this request is sampled, else None (the common, cheap case)."""
        if self.settings.untouched:
            return None
        values = self.settings.get(model)
        levels = values["trace_level"]
        if levels == ["OFF"] or levels == "OFF" or not _text(values["trace_file"]):
            return None
        scope_name = self._scope_of(model)
        with self._lock:
            scope = self._scopes.get(scope_name)
            if scope is None:
                remaining = int(_text(values["trace_count"]))
                scope = self._scopes[scope_name] = _Scope(remaining=remaining)
            if scope.remaining == 0:
                return None
            scope.seen += 1
            if (scope.seen - 1) % int(_text(values["trace_rate"])) != 0:
                return None
            if scope.remaining > 0:
                scope.remaining -= 1
        return Trace(
            next(self._ids),
            model,
            request_id,
            _text(values["trace_file"]),
            int(_text(values["log_frequency"])),
        )

    def end(self, trace: Trace) -> None:
        """Record the trace; written at once or with the next group (``log_frequency``)."""
        line = orjson.dumps(
            {
                "id": trace.id,
                "model_name": trace.model_name,
                "model_version": trace.model_version,
                "request_id": trace.request_id,
                "timestamps": [{"name": n, "ns": ns} for n, ns in trace.timestamps],
            }
        )
        with self._lock:
            buffer = self._buffers.setdefault(trace.file, [])
            buffer.append(line)
            if len(buffer) >= max(trace.frequency, 1):
                self._write(trace.file)

    def remaining(self, model: str) -> int | None:
        """How many traces the scope of ``model`` may still write (None: not started yet)."""
        with self._lock:
            scope = self._scopes.get(self._scope_of(model))
            return None if scope is None else scope.remaining

    def reset(self) -> None:
        """Settings changed: write what is buffered and start sampling afresh."""
        self.flush()
        with self._lock:
            self._scopes.clear()

    def flush(self) -> None:
        with self._lock:
            for path in list(self._buffers):
                self._write(path)

    def _write(self, path: str) -> None:
        lines = self._buffers.pop(path, [])
        if not lines:
            return
        try:
            with open(path, "ab") as out:
                out.write(b"\n".join(lines) + b"\n")
        except OSError as exc:
            log.error("cannot write traces to '%s': %s", path, exc)
