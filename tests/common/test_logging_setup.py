"""Log formats: the reference's lines stay as they are, ``json`` writes one object per line with
the request's id, model and version; and through the real server, every line about a request
(its failure in a batch included) names it."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ptserve.common import logging_setup
from ptserve.common.logging_setup import REQUEST, RequestFields, TritonFormatter, request_fields
from ptserve.examples import SIMPLE_CONFIG, AddSub, write_model
from tests.models import Fails
from tests.serverproc import ServerProcess

# Two requests that arrive together run as one batch: the failure of that batch names both.
FAILS_BATCHED = """
    name: "fails"
    platform: "pytorch_libtorch"
    max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
    dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 3000000 }
"""


def record(message: str = "hello %s", *args: object, **extra: Any) -> logging.LogRecord:
    made = logging.LogRecord(
        "ptserve.test", logging.WARNING, "/src/ptserve/core/server.py", 42, message, args, None
    )
    made.__dict__.update(extra)
    return made


def test_default_and_iso8601_lines_keep_the_reference_shape() -> None:
    line = TritonFormatter("default").format(record("hello %s", "there"))
    assert re.fullmatch(r"W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ server\.py:42\] hello there", line)
    line = TritonFormatter("ISO8601").format(record("hello %s", "there"))
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ W \d+ server\.py:42\] hello there", line
    ), line


def test_json_line_fields() -> None:
    entry = json.loads(TritonFormatter("json").format(record("hello %s", "there")))
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "ptserve.test"
    assert entry["file"] == "server.py:42"
    assert entry["message"] == "hello there"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", entry["time"])
    assert not {"model", "model_version", "request_id", "request_ids"} & set(entry)


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("/x/ptserve/scheduling/worker.cpython-311-x86_64-linux-gnu.so", r"worker\.py:0"),
        (__file__, r"test_logging_setup\.py:\d+"),
    ],
)
def test_a_module_logger_names_its_file_compiled_or_not(source: str, expected: str) -> None:
    """A compiled module has no frames: its lines name its file (line 0), not the caller's."""
    capture = _Capture()
    logger = logging.getLogger("ptserve.test.source")
    logger.addHandler(capture)
    try:
        log = logging_setup.module_logger("ptserve.test.source", source)
        log.warning("batch failed", extra=request_fields("m", "1", ["a", "b"]))
    finally:
        logger.removeHandler(capture)
    (made,) = capture.records
    entry = json.loads(TritonFormatter("json").format(made))
    assert re.fullmatch(expected, entry["file"]), entry["file"]
    assert entry["request_ids"] == ["a", "b"]  # the call's own extra is kept
    line = TritonFormatter("default").format(made)
    assert re.search(expected + r"\] batch failed$", line), line


def test_json_line_names_the_request_of_its_context() -> None:
    token = REQUEST.set(RequestFields("simple", "3", "req-7"))
    try:
        entry = json.loads(TritonFormatter("json").format(record()))
    finally:
        REQUEST.reset(token)
    assert (entry["model"], entry["model_version"], entry["request_id"]) == ("simple", "3", "req-7")


def test_json_line_names_a_batch_from_another_thread() -> None:
    batch = record(**request_fields("fails", "1", ["a", "b"]))
    entry = json.loads(TritonFormatter("json").format(batch))
    assert entry["request_ids"] == ["a", "b"] and "request_id" not in entry
    assert entry["model"] == "fails" and entry["model_version"] == "1"
    # A batch of one: a filter on request_id finds it too.
    single = json.loads(TritonFormatter("json").format(record(**request_fields("m", "", ["x"]))))
    assert single["request_id"] == "x" and single["request_ids"] == ["x"]
    assert "model_version" not in single


def test_json_line_carries_the_traceback_on_one_line() -> None:
    try:
        raise ValueError("broken")
    except ValueError:
        failed = record(exc_info=sys.exc_info())
    line = TritonFormatter("json").format(failed)
    assert "\n" not in line
    assert "ValueError: broken" in json.loads(line)["exception"]


def test_generated_request_ids_are_unique() -> None:
    ids = {logging_setup.new_request_id() for _ in range(1000)}
    assert len(ids) == 1000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repository = tmp_path_factory.mktemp("logs")
    write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    write_model(repository, "fails", FAILS_BATCHED, {1: torch.jit.script(Fails())})
    with ServerProcess([repository], ["--log-format", "json"]) as process:
        yield process


def log_entries(server: ServerProcess) -> list[dict[str, Any]]:
    lines = [line for line in server.log().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object


def negative(module: Any = httpclient) -> list[Any]:
    tensor = module.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), -1.0, np.float32))
    return [tensor]


def wait_for_entry(server: ServerProcess, wanted: Any, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [entry for entry in log_entries(server) if wanted(entry)]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"no such log line in:\n{server.log()}")


def test_the_failure_of_a_batch_names_each_of_its_requests(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url, concurrency=2)
    errors: list[str] = []

    def send(request_id: str) -> None:
        try:
            client.infer("fails", negative(), request_id=request_id)
        except InferenceServerException as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=send, args=(name,)) for name in ("bad-a", "bad-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(errors) == 2 and all("negative input" in error for error in errors)
    entry = wait_for_entry(server, lambda e: "bad-a" in e.get("request_ids", ()))
    assert entry["level"] == "ERROR" and "negative input" in entry["message"]
    assert sorted(entry["request_ids"]) == ["bad-a", "bad-b"]
    assert entry["model"] == "fails" and entry["model_version"] == "1"
    assert entry["file"].startswith("worker.py:")


def test_a_request_without_an_id_is_given_one(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException, match="negative input"):
        client.infer("fails", negative(grpcclient))  # no id; alone in its batch (3 s later)
    entry = wait_for_entry(server, lambda e: e.get("model") == "fails" and "request_id" in e)
    generated = entry["request_id"]
    assert generated and not generated.startswith("bad-")
    assert entry["request_ids"] == [generated]


def test_verbose_lines_about_a_request_carry_its_id(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    client.update_log_settings({"log_verbose_level": 1})
    try:
        data = np.ones((1, 16), np.int32)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        result = client.infer("simple", inputs, request_id="ok-1")
        assert result.get_response()["id"] == "ok-1"
        answered = client.infer("simple", inputs)
        assert "id" not in answered.get_response()  # a generated id stays in the log
    finally:
        client.update_log_settings({"log_verbose_level": 0})
    entry = wait_for_entry(server, lambda e: e.get("request_id") == "ok-1")
    assert entry["level"] == "VERBOSE" and entry["model"] == "simple"
    assert "answered" in entry["message"]


def test_the_format_can_be_switched_at_run_time(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    with ServerProcess([repository]) as process:
        client = httpclient.InferenceServerClient(process.http_url)
        assert client.update_log_settings({"log_format": "json"})["log_format"] == "json"
        client.update_log_settings({"log_verbose_level": 1})
        client.get_server_metadata()
        time.sleep(0.2)
    lines = process.log().splitlines()
    assert re.match(r"I\d{4} ", lines[0])  # started in the default format
    switched = [json.loads(line) for line in lines if line.startswith("{")]
    assert switched and all(entry["pid"] for entry in switched)
