"""OpenTelemetry traces from the real server, received by a real OTLP/HTTP endpoint that decodes
the exports (opentelemetry-proto): span structure, timings, the client's trace continued over
HTTP and gRPC, sampling by the trace settings of both protocols, and a collector that is away."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import format_span_id, format_trace_id
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from tritonclient.utils import InferenceServerException

from ptserve.examples import SIMPLE_CONFIG, AddSub, write_model
from tests.models import Fails, identity_config
from tests.otlp import OtlpReceiver, Span, by_trace, children
from tests.serverproc import ServerProcess, free_port

SERVER = 2  # opentelemetry.proto Span.SpanKind
INTERNAL = 1
ERROR = 2  # Status.StatusCode
PHASES = ("compute_input", "compute_infer", "compute_output")


def otel_args(url: str) -> list[str]:
    args = [
        "mode=opentelemetry",
        "level=TIMESTAMPS",
        "rate=1",
        f"opentelemetry,url={url}",
        "opentelemetry,bsp_schedule_delay=100",
        "opentelemetry,resource=deployment.environment=test",
    ]
    return [flag for arg in args for flag in ("--trace-config", arg)]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("otel")
    write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    write_model(
        repository,
        "fails",
        identity_config("fails", "TYPE_FP32", 8, "4"),
        {1: torch.jit.script(Fails())},
    )
    return repository


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def server(repository: Path, receiver: OtlpReceiver) -> Iterator[ServerProcess]:
    with ServerProcess([repository], otel_args(receiver.url)) as process:
        yield process


@pytest.fixture(autouse=True)
def fresh(receiver: OtlpReceiver) -> None:
    receiver.clear()


def simple_inputs(module: object = httpclient) -> list[object]:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [
        module.InferInput("INPUT0", [1, 16], "INT32"),  # type: ignore[attr-defined]
        module.InferInput("INPUT1", [1, 16], "INT32"),  # type: ignore[attr-defined]
    ]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    return inputs


def server_spans(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.kind == SERVER]


def check_request_tree(spans: list[Span], root: Span) -> None:
    """queue and compute under the request's span, the phases under compute, times nested."""
    under = children(spans, root)
    assert set(under) == {"queue", "compute"}, under
    queued, compute = under["queue"], under["compute"]
    assert root.contains(queued) and root.contains(compute)
    assert queued.end_ns <= compute.start_ns
    assert compute.attributes["ptserve.batch.size"] == root.attributes["ptserve.batch.size"]
    phases = children(spans, compute)
    assert set(phases) == set(PHASES)
    previous = compute.start_ns
    for name in PHASES:
        assert compute.contains(phases[name])
        assert phases[name].start_ns >= previous  # laid end to end, in order
        previous = phases[name].end_ns
    for span in spans:
        assert span.trace_id == root.trace_id and span.end_ns >= span.start_ns


def test_http_request_continues_the_client_trace(
    server: ServerProcess, receiver: OtlpReceiver
) -> None:
    # A real client span, exported to the same receiver, whose context travels as traceparent.
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.url)))
    client_tracer = provider.get_tracer("test-client")
    client = httpclient.InferenceServerClient(server.http_url)
    with client_tracer.start_as_current_span("client-call") as client_span:
        headers: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(headers)
        headers["tracestate"] = "vendor=value"
        result = client.infer("simple", simple_inputs(), request_id="req-1", headers=headers)
    assert result.as_numpy("OUTPUT0") is not None
    provider.shutdown()

    spans = receiver.wait_for(7)
    context = client_span.get_span_context()
    trace_id = format_trace_id(context.trace_id)
    client_received = next(s for s in spans if s.name == "client-call")
    [root] = server_spans(spans)
    assert root.name == "POST /v2/models/{model}/infer"
    assert root.trace_id == trace_id
    assert root.parent_id == format_span_id(context.span_id)
    assert root.trace_state == "vendor=value"
    assert root.attributes["ptserve.model.name"] == "simple"
    assert root.attributes["ptserve.model.version"] == "1"
    assert root.attributes["ptserve.request.id"] == "req-1"
    assert root.attributes["ptserve.batch.size"] == 1
    assert root.attributes["ptserve.status"] == "OK"
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["http.request.method"] == "POST"
    assert root.attributes["url.path"] == "/v2/models/simple/infer"
    assert root.status_code != ERROR
    assert root.resource["service.name"] == "ptserve"
    assert root.resource["deployment.environment"] == "test"
    # The client's span (another process, the same clock) holds the server's, within 1 ms of
    # converting the server's monotonic times to the epoch.
    assert client_received.start_ns - 1_000_000 <= root.start_ns
    assert root.end_ns <= client_received.end_ns + 1_000_000
    check_request_tree(by_trace(spans)[trace_id], root)


def test_grpc_calls_continue_the_trace_in_their_metadata(
    server: ServerProcess, receiver: OtlpReceiver
) -> None:
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    headers = {"traceparent": f"00-{trace_id}-{parent}-01"}
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.infer("simple", simple_inputs(grpcclient), request_id="g-1", headers=headers)
    # A streaming call: each message its own server span, in the stream's trace.
    answers: queue.Queue[object] = queue.Queue()
    client.start_stream(
        callback=lambda result, error: answers.put(error or result), headers=headers
    )
    for index in range(2):
        client.async_stream_infer("simple", simple_inputs(grpcclient), request_id=f"s-{index}")
    for _ in range(2):
        assert not isinstance(answers.get(timeout=20), Exception)
    client.stop_stream()

    spans = receiver.wait_for(3 * 6)
    roots = server_spans(spans)
    assert len(roots) == 3
    for root in roots:
        assert root.trace_id == trace_id and root.parent_id == parent
        assert root.attributes["rpc.system"] == "grpc"
        assert root.attributes["rpc.service"] == "inference.GRPCInferenceService"
        assert root.attributes["rpc.grpc.status_code"] == 0
        check_request_tree(
            [s for s in spans if s.trace_id == trace_id and s.start_ns >= root.start_ns], root
        )
    unary = next(r for r in roots if r.attributes["ptserve.request.id"] == "g-1")
    assert unary.name == "inference.GRPCInferenceService/ModelInfer"
    streamed = {r.attributes["ptserve.request.id"] for r in roots if r is not unary}
    assert streamed == {"s-0", "s-1"}
    assert {r.name for r in roots if r is not unary} == {
        "inference.GRPCInferenceService/ModelStreamInfer"
    }


def test_failures_are_recorded_in_the_spans(server: ServerProcess, receiver: OtlpReceiver) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    wrong = httpclient.InferInput("INPUT0", [1, 4], "INT32")
    wrong.set_data_from_numpy(np.ones((1, 4), np.int32))
    with pytest.raises(InferenceServerException, match="data-type is 'INT32'"):
        client.infer("fails", [wrong])
    negative = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    negative.set_data_from_numpy(np.full((1, 4), -1.0, np.float32))
    with pytest.raises(InferenceServerException, match="negative input"):
        client.infer("fails", [negative])

    spans = receiver.wait_for(1 + 6)
    roots = {r.attributes["ptserve.status"]: r for r in server_spans(spans)}
    assert set(roots) == {"INVALID_ARGUMENT", "INTERNAL"}
    invalid, failed = roots["INVALID_ARGUMENT"], roots["INTERNAL"]
    # Refused before it was queued: no queue or compute span, the reason on the request's.
    assert invalid.status_code == ERROR and "data-type is 'INT32'" in invalid.status_message
    assert invalid.attributes["http.response.status_code"] == 400
    assert not children(spans, invalid)
    # The model failed: the compute span says so too.
    assert failed.attributes["http.response.status_code"] == 500
    assert "negative input" in failed.status_message
    compute = children(spans, failed)["compute"]
    assert compute.status_code == ERROR and "negative input" in compute.status_message


def test_sampling_follows_the_settings_of_both_trace_apis(
    server: ServerProcess, receiver: OtlpReceiver
) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    fine = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    fine.set_data_from_numpy(np.ones((1, 4), np.float32))
    try:
        # One request in 3 of "simple" (HTTP trace API), none of "fails" (gRPC trace API).
        http.update_trace_settings("simple", {"trace_rate": "3"})
        grpc.update_trace_settings("fails", {"trace_level": ["OFF"]})
        for _ in range(9):
            http.infer("simple", simple_inputs())
            http.infer("fails", [fine])
        spans = receiver.wait_for(3 * 6, settle=1.0)
        models = [r.attributes["ptserve.model.name"] for r in server_spans(spans)]
        assert models == ["simple"] * 3
        assert len(by_trace(spans)) == 3  # one trace per sampled request

        # At most 2 more traces; the setting counts down and says so.
        receiver.clear()
        grpc.update_trace_settings("simple", {"trace_rate": "1", "trace_count": "2"})
        for _ in range(5):
            http.infer("simple", simple_inputs())
        spans = receiver.wait_for(2 * 6, settle=1.0)
        assert len(server_spans(spans)) == 2
        assert http.get_trace_settings("simple")["trace_count"] == "0"
    finally:
        http.update_trace_settings("simple", {"trace_rate": None, "trace_count": None})
        http.update_trace_settings("fails", {"trace_level": None})


@pytest.fixture(params=["refuses", "never-answers"])
def dead_collector(request: pytest.FixtureRequest) -> Iterator[str]:
    """A collector URL where nothing listens, or where a socket takes connections (the kernel
    completes them) and never reads or answers: each export waits out its timeout."""
    if request.param == "refuses":
        yield f"http://127.0.0.1:{free_port()}/v1/traces"
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        yield f"http://127.0.0.1:{silent.getsockname()[1]}/v1/traces"


def test_a_dead_collector_costs_requests_nothing(repository: Path, dead_collector: str) -> None:
    with ServerProcess([repository], otel_args(dead_collector)) as process:
        client = httpclient.InferenceServerClient(process.http_url)
        inputs = simple_inputs()
        started = time.perf_counter()
        for _ in range(100):
            result = client.infer("simple", inputs)
            assert result.as_numpy("OUTPUT0") is not None
        took = time.perf_counter() - started
        # Exports fail or hang on the processor's thread meanwhile (every 100 ms); requests do
        # not wait for them: 100 requests take less than one export's timeout (10 s).
        assert took < 8.0, took
        stopping = time.perf_counter()
        assert process.stop() == 0
        # The exit waits for the export for at most about 5 s (the tracer's close).
        assert time.perf_counter() - stopping < 12.0
    assert "Traceback" not in process.log()


def test_without_the_sdk_the_server_works_and_the_mode_says_what_to_install(
    repository: Path, tmp_path: Path
) -> None:
    """Without the optional extra (its modules made unimportable) ptserve serves as before;
    asking for the mode, at start or through the trace API, is refused with what to install."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    install = "pip install 'ptserve[otel]'"
    with ServerProcess([repository], env=env) as process:
        client = httpclient.InferenceServerClient(process.http_url)
        assert client.infer("simple", simple_inputs()).as_numpy("OUTPUT0") is not None
        with pytest.raises(InferenceServerException, match=re.escape(install)):
            client.update_trace_settings(settings={"trace_mode": "opentelemetry"})
        assert client.get_trace_settings()["trace_mode"] == "triton"  # nothing changed
        assert client.infer("simple", simple_inputs()).as_numpy("OUTPUT0") is not None
    args = ["--trace-config", "mode=opentelemetry"]
    process = ServerProcess([repository], args, env=env).start(wait=None)
    assert process.wait_exit(60) == 2
    assert "trace_mode 'opentelemetry' needs the OpenTelemetry SDK" in process.log()
    assert install in process.log()


def test_the_server_refuses_bad_exporter_settings(repository: Path) -> None:
    for arg, message in (
        ("opentelemetry,url=ftp://collector", "must be an http:// or https:// URL"),
        ("opentelemetry,bsp_max_queue_size=-3", "must be a positive integer, got '-3'"),
        ("opentelemetry,resource=novalue", "must be <key>=<value>"),
        ("opentelemetry,colour=blue", "expected [triton,]<key>=<value>"),
        # Checked by the SDK against its default queue size (2048) when the mode starts.
        ("opentelemetry,bsp_max_export_batch_size=4096", "less than or equal to max_queue_size"),
    ):
        args = ["--trace-config", "mode=opentelemetry", "--trace-config", arg]
        process = ServerProcess([repository], args).start(wait=None)
        assert process.wait_exit(60) == 2
        assert message in process.log(), process.log()
    process.stop(signal.SIGKILL)
