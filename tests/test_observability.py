"""Metrics, log settings and traces through the real server, after known traffic."""

from __future__ import annotations

import json
import re
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ptserve.examples import SIMPLE_CONFIG, AddSub, write_model
from tests.core.slow import write_slow
from tests.models import Fails, identity_config
from tests.serverproc import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("observability")
    write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    write_model(
        repository,
        "fails",
        identity_config("fails", "TYPE_FP32", 8, "4"),
        {1: torch.jit.script(Fails())},
    )
    args = [
        "--metrics-config",
        "summary_latencies=true",
        "--metrics-config",
        "histogram_latencies=true",
    ]
    with ServerProcess([repository], args) as process:
        yield process


def scrape(server: ServerProcess) -> tuple[str, str]:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=5) as reply:
        return reply.headers["Content-Type"], reply.read().decode()


def value(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    series = f"{name}{{{wanted}}}" if wanted else name
    match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    assert match is not None, f"{series} not in metrics"
    return float(match.group(1))


def simple_inputs(rows: int = 1) -> list[httpclient.InferInput]:
    data = np.ones((rows, 16), np.int32)
    inputs = [
        httpclient.InferInput("INPUT0", [rows, 16], "INT32"),
        httpclient.InferInput("INPUT1", [rows, 16], "INT32"),
    ]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    return inputs


def fails_input(sign: float) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), sign, np.float32))
    return [tensor]


def test_metrics_agree_with_traffic_and_stats(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for rows in (1, 2, 3):
        client.infer("simple", simple_inputs(rows))
    client.infer("fails", fails_input(1.0))
    for _ in range(2):
        with pytest.raises(InferenceServerException):
            client.infer("fails", fails_input(-1.0))

    content_type, text = scrape(server)
    assert content_type.startswith("text/plain; version=0.0.4")
    assert "# TYPE nv_inference_request_success counter" in text
    assert "# HELP nv_inference_count " in text
    simple = {"model": "simple", "version": "1"}
    assert value(text, "nv_inference_request_success", **simple) == 3
    assert value(text, "nv_inference_count", **simple) == 6
    assert value(text, "nv_inference_exec_count", **simple) == 3
    fails = {"model": "fails", "version": "1"}
    assert value(text, "nv_inference_request_success", **fails) == 1
    assert value(text, "nv_inference_request_failure", **fails, reason="BACKEND") == 2
    assert value(text, "nv_inference_request_failure", **fails, reason="REJECTED") == 0
    assert value(text, "nv_inference_pending_request_count", **simple) == 0
    assert value(text, "nv_model_load_duration_secs", **simple) > 0

    stats = client.get_inference_statistics("simple")["model_stats"][0]
    success = stats["inference_stats"]["success"]
    assert value(text, "nv_inference_request_duration_us", **simple) == success["ns"] // 1000
    queue = stats["inference_stats"]["queue"]["ns"]
    assert value(text, "nv_inference_queue_duration_us", **simple) == queue // 1000
    assert value(text, "nv_inference_request_summary_us_count", **simple) == 3
    assert value(text, "nv_inference_request_summary_us", **simple, quantile="0.5") > 0
    histogram = "nv_inference_first_response_histogram_ms"
    assert value(text, f"{histogram}_bucket", **simple, le="+Inf") == 3
    assert value(text, f"{histogram}_count", **simple) == 3
    assert 0.0 <= value(text, "nv_cpu_utilization") <= 1.0
    assert value(text, "nv_cpu_memory_total_bytes") >= value(text, "nv_cpu_memory_used_bytes") > 0


def test_load_is_refused_in_none_mode(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as refused:
        client.unload_model("simple")
    assert refused.value.status() == "503"
    assert "explicit model load / unload is not allowed if polling is enabled" in str(refused.value)
    assert client.is_model_ready("simple")


def test_log_settings_round_trip(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = client.get_log_settings()
    assert before["log_format"] == "default" and before["log_info"] is True
    updated = client.update_log_settings({"log_format": "ISO8601", "log_verbose_level": 1})
    assert updated["log_format"] == "ISO8601" and updated["log_verbose_level"] == 1
    assert client.get_log_settings() == updated
    client.update_log_settings({"log_info": False})
    mark = len(server.log())
    client.update_log_settings({"log_info": True})
    # The info line announcing the change is written in the ISO8601 form.
    time.sleep(0.2)
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I ", server.log()[mark:], re.M)
    with pytest.raises(InferenceServerException):
        client.update_log_settings({"log_format": "fancy"})
    client.update_log_settings({"log_format": "default", "log_verbose_level": 0})


def test_trace_file_holds_stage_timestamps(server: ServerProcess, tmp_path: Path) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    trace_file = tmp_path / "trace.jsonl"
    settings = client.update_trace_settings(
        "simple",
        {
            "trace_file": str(trace_file),
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": "2",
            "trace_count": "2",
            "log_frequency": "0",
        },
    )
    assert settings["trace_level"] == ["TIMESTAMPS"] and settings["trace_rate"] == "2"
    assert client.get_trace_settings()["trace_level"] == ["OFF"]  # the global ones are unchanged
    for _ in range(6):
        client.infer("simple", simple_inputs())
    client.infer("fails", fails_input(1.0))  # its model is not traced
    lines = [json.loads(line) for line in trace_file.read_text().splitlines()]
    # Rate 2 samples requests 1 and 3; count 2 stops there.
    assert len(lines) == 2
    stages = [t["name"] for t in lines[0]["timestamps"]]
    assert stages == ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_END", "REQUEST_END"]
    stamps = [t["ns"] for t in lines[0]["timestamps"]]
    assert stamps == sorted(stamps)
    assert lines[0]["model_name"] == "simple" and lines[0]["model_version"] == 1
    assert client.get_trace_settings("simple")["trace_count"] == "0"
    client.update_trace_settings("simple", {"trace_level": ["OFF"]})


def test_client_gone_while_queued_counts_as_canceled(tmp_path: Path) -> None:
    write_slow(tmp_path, "slow", {1: 1.0}, iterations=3000)
    with ServerProcess([tmp_path]) as server:
        body = json.dumps(
            {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]}
        ).encode()
        wire = (
            b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        host, port = server.http_url.split(":")
        with socket.create_connection((host, int(port)), timeout=60) as running:
            running.sendall(wire)
            time.sleep(0.2)  # the first request is executing
            with socket.create_connection((host, int(port)), timeout=60) as gone:
                gone.sendall(wire)
                time.sleep(0.2)  # queued behind it; then the client leaves, with a reset (a
                # plain FIN is a half-close, whose requests are still answered)
                gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            assert running.recv(65536).startswith(b"HTTP/1.1 200")
        deadline = time.monotonic() + 30
        while True:
            text = scrape(server)[1]
            labels = {"model": "slow", "version": "1"}
            if value(text, "nv_inference_request_failure", **labels, reason="CANCELED") == 1:
                break
            assert time.monotonic() < deadline, text
            time.sleep(0.2)
        assert value(text, "nv_inference_request_success", **labels) == 1
        assert value(text, "nv_inference_exec_count", **labels) == 1
