"""An OTLP/HTTP traces receiver for tests and benchmarks: it decodes every export the way a
collector does (``ExportTraceServiceRequest`` of opentelemetry-proto, gzip or not) and keeps the
spans it carried."""

from __future__ import annotations

import gzip
import os
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

PATH = "/v1/traces"


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


@dataclass
class Span:
    """One received span, with ids as hex and times in epoch nanoseconds."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind: 1 internal, 2 server
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, Any] = field(default_factory=dict)
    trace_state: str = ""

    def contains(self, other: Span) -> bool:
        return self.start_ns <= other.start_ns and other.end_ns <= self.end_ns


class OtlpReceiver:
    """``with OtlpReceiver() as receiver:`` listens on a free port of 127.0.0.1. ``keep=False``
    (benchmarks) only counts the spans it decoded, in ``received``; ``cores`` pins its threads."""

    def __init__(self, keep: bool = True, cores: set[int] | None = None) -> None:
        self.keep = keep
        self.cores = cores  # the CPUs its threads run on (benchmarks: not the server's)
        self.spans: list[Span] = []
        self.exports = 0
        self.received = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != PATH or "protobuf" not in self.headers.get("Content-Type", ""):
                    self.send_error(404 if self.path != PATH else 415)
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._add(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        if self.cores is not None:
            os.sched_setaffinity(0, self.cores)  # this thread, and the handlers it starts
        self._server.serve_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{PATH}"

    def _add(self, request: ExportTraceServiceRequest) -> None:
        if not self.keep:
            count = sum(
                len(scope.spans) for spans in request.resource_spans for scope in spans.scope_spans
            )
            with self._lock:
                self.exports += 1
                self.received += count
            return
        received: list[Span] = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        Span(
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.kind,
                            span.start_time_unix_nano,
                            span.end_time_unix_nano,
                            {a.key: _value(a.value) for a in span.attributes},
                            span.status.code,
                            span.status.message,
                            resource,
                            span.trace_state,
                        )
                    )
        with self._lock:
            self.exports += 1
            self.received += len(received)
            self.spans.extend(received)

    def wait_for(self, count: int, timeout: float = 20.0, settle: float = 0.3) -> list[Span]:
        """At least ``count`` spans (waiting ``settle`` s more for any that would follow)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.spans) >= count:
                    break
            time.sleep(0.05)
        time.sleep(settle)
        with self._lock:
            return list(self.spans)

    def clear(self) -> None:
        with self._lock:
            self.spans.clear()

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def by_trace(spans: list[Span]) -> dict[str, list[Span]]:
    traces: dict[str, list[Span]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    return traces


def children(spans: list[Span], parent: Span) -> dict[str, Span]:
    return {s.name: s for s in spans if s.parent_id == parent.span_id}
