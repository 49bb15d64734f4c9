"""Sampled requests as OpenTelemetry spans, exported over OTLP/HTTP by the SDK.

Imported only when a trace scope uses the ``opentelemetry`` mode (the SDK and exporter are the
optional extra ``ptserve[otel]``). The spans of one request are made once its answer has been
written (``core/tracing.py`` schedules them on the event loop behind the transport's flush),
with the times its stages were recorded at (``Trace``), and handed to the SDK's
``BatchSpanProcessor``: its own thread exports them in batches, drops spans when its queue
(``bsp_max_queue_size``) is full, and gives up on an export after the exporter's timeout, so the
collector's speed or absence never reaches a request.

A request's spans::

    <server span>  POST /v2/models/{model}/infer | inference.GRPCInferenceService/ModelInfer
                   (in-process requests: "infer", kind INTERNAL)
      queue        from entering the scheduler's queue to the start of its batch's execution
      compute      the execution of its batch (ptserve.batch.size: the batch's rows)
        compute_input, compute_infer, compute_output
                   the backend's phases, laid end to end from the start of the execution with
                   the durations it measured (summed over the batch's calls)

The server span continues the client's trace when the request carried a W3C ``traceparent``
(and ``tracestate``) header or gRPC metadata; which requests are traced is still decided by the
trace settings (rate, count, level), not by the client's sampled flag.
"""

from __future__ import annotations

import logging
import time

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ptserve.common.version import __version__
from ptserve.core.trace_records import Trace
from ptserve.core.trace_settings import OtelSettings

log = logging.getLogger("ptserve.trace")

# The attributes every request's server span carries (and ``compute`` the batch size).
MODEL_NAME = "ptserve.model.name"
MODEL_VERSION = "ptserve.model.version"
REQUEST_ID = "ptserve.request.id"
BATCH_SIZE = "ptserve.batch.size"
STATUS = "ptserve.status"  # "OK", or the failure's status (INVALID_ARGUMENT, UNAVAILABLE, ...)

# The SDK logs a warning for every span dropped from a full queue, and for each failed export;
# with a collector away under load that would be a line per request. One line per message a
# minute is enough to say what happens.
_SDK_LOGGERS = (
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace.export",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)


class _AtMostOncePerMinute(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._last: dict[object, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        key = (record.name, record.msg)
        if now - self._last.get(key, -120.0) < 60.0:
            return False
        self._last[key] = now
        return True


class OtelExport:
    """One tracer provider of our own (the process-wide one is left to the application that
    embeds ptserve), its batch processor and OTLP/HTTP exporter."""

    def __init__(self, settings: OtelSettings) -> None:
        resource = Resource.create(
            {"service.name": "ptserve", "service.version": __version__, **dict(settings.resource)}
        )
        # Sampling is the trace settings' decision, made before a span exists: every span
        # that reaches the SDK is recorded and exported. ``shutdown`` stops it within the
        # server's exit timeout, so the SDK's own handler at exit is not wanted.
        self.provider = TracerProvider(resource=resource, sampler=ALWAYS_ON, shutdown_on_exit=False)
        self.exporter = OTLPSpanExporter(endpoint=settings.url)
        self.processor = BatchSpanProcessor(
            self.exporter,
            max_queue_size=settings.bsp_max_queue_size,
            schedule_delay_millis=settings.bsp_schedule_delay,
            max_export_batch_size=settings.bsp_max_export_batch_size,
        )
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("ptserve", __version__)
        self.propagator = TraceContextTextMapPropagator()
        quiet = _AtMostOncePerMinute()
        for name in _SDK_LOGGERS:
            logging.getLogger(name).addFilter(quiet)

    def export(self, trace: Trace) -> None:
        """The spans of one answered request, handed to the batch span processor."""
        # Stages are perf_counter nanoseconds; spans want the epoch's.
        offset = time.time_ns() - time.perf_counter_ns()
        incoming = trace.incoming
        request_start = trace.stage("REQUEST_START")
        request_end = trace.stage("REQUEST_END") or time.perf_counter_ns()
        attributes: dict[str, str | int] = {
            MODEL_NAME: trace.model_name,
            REQUEST_ID: trace.request_id,
            STATUS: trace.status or "OK",
        }
        if trace.model_version:
            attributes[MODEL_VERSION] = str(trace.model_version)
        if trace.batch_size:
            attributes[BATCH_SIZE] = trace.batch_size
        parent = Context()
        if incoming is not None:
            attributes.update(incoming.attributes)
            name, kind = incoming.name, SpanKind.SERVER
            start, end = incoming.start_ns, incoming.end_ns or request_end
            if incoming.traceparent:
                carrier = {"traceparent": incoming.traceparent}
                if incoming.tracestate:
                    carrier["tracestate"] = incoming.tracestate
                # A malformed traceparent gives an empty context: the span starts a trace.
                parent = self.propagator.extract(carrier)
        else:
            name, kind, start, end = "infer", SpanKind.INTERNAL, request_start, request_end
        root = self.tracer.start_span(
            name, context=parent, kind=kind, attributes=attributes, start_time=start + offset
        )
        if trace.error:
            root.set_status(Status(StatusCode.ERROR, trace.error))
        inside = set_span_in_context(root)

        queue_start = trace.stage("QUEUE_START")
        compute_start = trace.stage("COMPUTE_START")
        compute_end = trace.stage("COMPUTE_END") or request_end
        if queue_start:
            queue = self.tracer.start_span("queue", context=inside, start_time=queue_start + offset)
            queue.end(end_time=(compute_start or request_end) + offset)
        if compute_start:
            compute = self.tracer.start_span(
                "compute",
                context=inside,
                start_time=compute_start + offset,
                attributes={BATCH_SIZE: trace.batch_size} if trace.batch_size else None,
            )
            times = trace.times
            if times is not None:
                phases = set_span_in_context(compute)
                cursor = compute_start
                for phase, took in (
                    ("compute_input", times.compute_input_ns),
                    ("compute_infer", times.compute_infer_ns),
                    ("compute_output", times.compute_output_ns),
                ):
                    until = min(cursor + took, compute_end)
                    span = self.tracer.start_span(phase, context=phases, start_time=cursor + offset)
                    span.end(end_time=until + offset)
                    cursor = until
            if trace.error:
                compute.set_status(Status(StatusCode.ERROR, trace.error))
            compute.end(end_time=compute_end + offset)
        root.end(end_time=end + offset)

    def shutdown(self, timeout_s: float) -> None:
        """Export the spans queued (within ``timeout_s``) and stop."""
        if not self.processor.force_flush(int(timeout_s * 1000)):
            # The collector is slow or away: stop the export's retries rather than wait them out.
            self.exporter.shutdown()  # type: ignore[no-untyped-call]
        self.provider.shutdown()
