"""Request traces, in either trace mode.

Which requests are traced follows the trace settings of their model: ``trace_level`` (OFF
disables), ``trace_rate`` (one of every N requests), ``trace_count`` (how many more traces;
-1 = no limit) and ``trace_mode``.

- ``triton``: the time each stage of a sampled request began, written as JSON lines to
  ``trace_file``; ``log_frequency`` N > 0 writes the traces in groups of N, 0 writes each as
  soon as its request ends. Timestamps are monotonic nanoseconds.
- ``opentelemetry``: each sampled request becomes spans exported over OTLP/HTTP
  (``core/otel.py``, imported only when this mode is first configured, since the SDK is an
  optional extra): the frontend's server span (or an ``infer`` span for in-process requests)
  with ``queue`` and ``compute`` (``compute_input``, ``compute_infer``, ``compute_output``)
  as children. A frontend that sees the mode on hands its request down in ``INCOMING`` with
  the client's W3C trace context, and exports the spans once it has answered. Spans are made
  on the event loop once the answer has been written, and handed to the SDK's batch processor
  (bounded by ``bsp_max_queue_size``), whose own thread exports them: a slow or unreachable
  collector costs requests nothing but dropped spans.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import orjson

from ptserve.common.errors import ServerError, invalid_arg
from ptserve.core.trace_records import INCOMING, Incoming, Trace
from ptserve.core.trace_settings import OtelSettings, TraceSettings, TraceValue, validate

log = logging.getLogger("ptserve.trace")

OTEL = "opentelemetry"
OTEL_MISSING = (
    "trace_mode 'opentelemetry' needs the OpenTelemetry SDK and its OTLP/HTTP exporter "
    "(module '{name}' is missing): pip install 'ptserve[otel]'"
)


class SpanExport(Protocol):
    """What the tracer needs of the OpenTelemetry export (``core/otel.OtelExport``)."""

    def export(self, trace: Trace) -> None:
        """Turn a finished trace into spans and queue them for export (never blocks)."""

    def shutdown(self, timeout_s: float) -> None:
        """Export what is queued (within ``timeout_s``) and stop."""


def start_otel_export(settings: OtelSettings) -> SpanExport:
    """The OpenTelemetry export for ``settings``; a clear error when the extra is missing."""
    try:
        # The SDK is an optional extra (ptserve[otel]): imported only when the mode is used.
        from ptserve.core.otel import OtelExport
    except ImportError as missing:
        raise invalid_arg(OTEL_MISSING.format(name=missing.name or "opentelemetry")) from None
    try:
        return OtelExport(settings)
    except ValueError as exc:  # the SDK's own checks of the batch span processor's sizes
        raise invalid_arg(
            f"opentelemetry settings bsp_max_queue_size, bsp_max_export_batch_size and "
            f"bsp_schedule_delay (or the OTEL_BSP_* variables they default to): {exc}"
        ) from None


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
        # The OpenTelemetry export, made when a scope first asks for that mode; frontends
        # check it (one attribute) to know whether to hand their requests down.
        self.otel: SpanExport | None = None
        self._export_failed = False

    def _scope_of(self, model: str) -> str:
        """Models without their own settings share the global scope (and its count)."""
        return model if self.settings.get(model) != self.settings.get("") else ""

    def begin(self, model: str, request_id: str) -> Trace | None:
        """A new trace when this request is sampled, else None (the common, cheap case)."""
        if self.settings.untouched:
            return None
        values = self.settings.get(model)
        levels = values["trace_level"]
        if levels == ["OFF"] or levels == "OFF":
            return None
        mode = _text(values["trace_mode"])
        if mode == OTEL:
            if self.otel is None:
                return None
        elif not _text(values["trace_file"]):
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
        trace = Trace(
            next(self._ids),
            model,
            request_id,
            _text(values["trace_file"]),
            int(_text(values["log_frequency"])),
            mode=mode,
        )
        if mode == OTEL:
            incoming = INCOMING.get()
            if incoming is not None:  # the frontend's request: its span is the parent
                incoming.trace = trace
                trace.incoming = incoming
        return trace

    def end(self, trace: Trace) -> None:
        """Record the trace: written at once or with the next group (``log_frequency``); in
        the OpenTelemetry mode, exported after the answer (by the frontend when it handed the
        request down, since its span lasts until it has answered)."""
        if trace.mode == OTEL:
            if trace.incoming is None:
                self._export(trace)
            return
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

    # --- the OpenTelemetry mode ----------------------------------------------------------

    def start_otel(self) -> None:
        """Start the OpenTelemetry export (with the exporter settings given at start) unless
        it runs; raises a clear error when the optional SDK is not installed."""
        if self.otel is None:
            self.otel = start_otel_export(self.settings.otel)
            log.info("OpenTelemetry traces are exported to %s (OTLP/HTTP)", self.settings.otel.url)

    def check_mode(self, changes: dict[str, TraceValue | None]) -> None:
        """Before settings change: a switch to the OpenTelemetry mode needs its export."""
        mode = changes.get("trace_mode")
        if mode is not None and mode != [] and validate("trace_mode", mode) == OTEL:
            self.start_otel()

    def incoming(
        self, name: str, attributes: dict[str, str | int], traceparent: str, tracestate: str
    ) -> Incoming:
        """A frontend received an inference request (OpenTelemetry mode): it is what the core
        links a sampled request's trace to. ``answered`` must follow, in the same Task."""
        incoming = Incoming(name, attributes, traceparent, tracestate)
        incoming.token = INCOMING.set(incoming)
        return incoming

    def answered(self, incoming: Incoming, failure: BaseException | None = None) -> None:
        """The frontend has its answer (or ``failure``): export the request's spans, if the
        core sampled it, once the answer is on its way."""
        incoming.end_ns = time.perf_counter_ns()
        if incoming.token is not None:
            INCOMING.reset(incoming.token)
            incoming.token = None
        trace = incoming.trace
        if trace is None:
            return
        if failure is not None and not trace.error:
            if isinstance(failure, ServerError):
                trace.error, trace.status = failure.message, failure.status.name
            elif isinstance(failure, asyncio.CancelledError):
                trace.error, trace.status = "the request was cancelled", "CANCELLED"
            else:
                trace.error, trace.status = f"{type(failure).__name__}: {failure}", "INTERNAL"
        self._export(trace)

    def _export(self, trace: Trace) -> None:
        """Export two turns of the event loop later: the transports flush an answer with a
        callback of their own (HTTP/2 in the next turn), and making spans must not delay it."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread
            self._export_now(trace)
        else:
            loop.call_soon(loop.call_soon, self._export_now, trace)

    def _export_now(self, trace: Trace) -> None:
        otel = self.otel
        if otel is None:
            return
        try:
            otel.export(trace)
        except Exception:  # a trace must never fail the server
            if not self._export_failed:
                self._export_failed = True
                log.exception("turning a request's trace into spans failed (logged once)")

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is buffered and stop the OpenTelemetry export (within ``timeout_s``:
        an unreachable collector does not hold up the server's exit longer)."""
        self.flush()
        otel, self.otel = self.otel, None
        if otel is None:
            return
        done = threading.Thread(
            target=otel.shutdown, args=(timeout_s,), name="trace-export-shutdown", daemon=True
        )
        done.start()
        done.join(timeout_s + 1.0)
        if done.is_alive():
            log.warning("the OpenTelemetry export did not finish within %.0f s", timeout_s)

    # --- settings ------------------------------------------------------------------------

    def remaining(self, model: str) -> int | None:
        """How many traces the scope of ``model`` may still write (None: not started yet)."""
        with self._lock:
            scope = self._scopes.get(self._scope_of(model))
            return None if scope is None else scope.remaining

    def reset(self) -> None:
        """Settings changed: write what is buffered and start sampling afresh (and start the
        OpenTelemetry export if a scope now asks for it)."""
        self.flush()
        with self._lock:
            self._scopes.clear()
        if self.otel is None and OTEL in self.settings.modes():
            self.start_otel()

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
