"""What a traced request leaves behind: its stages, its execution and how it ended; and the
transport-level request a frontend hands down to the core for the OpenTelemetry mode.

Plain data, shared by the tracer (``core/tracing.py``) and the OpenTelemetry export
(``core/otel.py``), which import nothing of each other's.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

from ptserve.common.prepared import ExecutionTimes


@dataclass(slots=True)
class Incoming:
    """A request as its frontend received it (HTTP or gRPC), for its server span: what to call
    the span, where the client's trace context is (W3C ``traceparent`` / ``tracestate``), and how
    the frontend answered. Made only while the OpenTelemetry mode is on."""

    name: str  # the span's name: "POST /v2/models/{model}/infer", "inference.../ModelInfer"
    attributes: dict[str, str | int]
    traceparent: str = ""
    tracestate: str = ""
    start_ns: int = field(default_factory=time.perf_counter_ns)
    end_ns: int = 0
    trace: Trace | None = None  # set by the core when it samples the request
    token: Token[Incoming | None] | None = None


# The frontend request the current Task is answering (OpenTelemetry mode only).
INCOMING: ContextVar[Incoming | None] = ContextVar("ptserve_incoming", default=None)


@dataclass(slots=True)
class Trace:
    """One traced request: its identity and the stages seen so far.

    ``executed`` is called by the instance worker that ran the request's batch (on its thread,
    before the answer is handed back), so the batch size and phase times are known by the time
    the request ends."""

    id: int
    model_name: str
    request_id: str
    file: str
    frequency: int
    model_version: int = 0
    timestamps: list[tuple[str, int]] = field(default_factory=list)
    mode: str = "triton"
    incoming: Incoming | None = None
    batch_size: int = 0  # rows of the batch it ran in (0: it never ran)
    times: ExecutionTimes | None = None
    error: str = ""  # the failure's message
    status: str = ""  # the failure's status name (INVALID_ARGUMENT, ...); "" on success

    def mark(self, stage: str, ns: int | None = None) -> None:
        self.timestamps.append((stage, time.perf_counter_ns() if ns is None else ns))

    def executed(self, batch_size: int, times: ExecutionTimes | None) -> None:
        self.batch_size = batch_size
        self.times = times

    def stage(self, name: str) -> int:
        """The last timestamp of ``name``; 0 when the request never reached it."""
        for stage, ns in reversed(self.timestamps):
            if stage == name:
                return ns
        return 0
