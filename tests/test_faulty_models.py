"""Faulty models next to a healthy one: each fails its own requests (or its own load) clearly,
and the healthy model keeps answering correctly, also while a faulty one runs."""

from __future__ import annotations

import json
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.http as httpclient
from torch import nn
from tritonclient.utils import InferenceServerException

from ptserve.examples import write_model
from tests.serverproc import ServerProcess

HANG_TIMEOUT_MS = 600
LEAK_MB = 4  # what the leaky model keeps per call

IO = """
    max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
ONE_CPU = "instance_group [ { count: 1 kind: KIND_CPU } ]"
NO_COMPILE = (
    'parameters { key: "TORCH_COMPILE_OPTIONAL_PARAMETERS" '
    'value: { string_value: "{\\"disable\\": true}" } }'
)
TIMEOUT = (
    f'parameters {{ key: "EXECUTION_TIMEOUT_MS" value: {{ string_value: "{HANG_TIMEOUT_MS}" }} }}'
)


class Double(nn.Module):
    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        return INPUT0 * 2


class Raises(nn.Module):
    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("this model is broken on purpose")


class WrongKeys(nn.Module):
    def forward(self, INPUT0: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"WRONG": INPUT0}


class WrongDtype(nn.Module):
    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        return INPUT0.to(torch.int64)


class Scalar(nn.Module):
    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        return INPUT0.sum()


class ThreeColumns(nn.Module):
    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        return INPUT0[:, :3] * 2


class FirstRowOnly(nn.Module):
    def forward(self, INPUT0: torch.Tensor) -> torch.Tensor:
        return INPUT0[:1] * 2


RETURNS_INT = """
    from torch import nn

    class ReturnsInt(nn.Module):
        def forward(self, x):
            return 7
"""

RETURNS_NONE = """
    from torch import nn

    class ForgotReturn(nn.Module):
        def forward(self, x):
            x * 2
"""

# Sleeps INPUT0[0, 0] seconds, then doubles: a hang that ends, so the instance can rejoin.
HANGS = """
    import time
    from torch import nn

    class Hangs(nn.Module):
        def forward(self, x):
            time.sleep(float(x[0, 0]))
            return x * 2
"""

LEAKS = f"""
    import torch
    from torch import nn

    KEPT = []

    class Leaks(nn.Module):
        def forward(self, x):
            KEPT.append(torch.ones({LEAK_MB} * 1024 * 256))
            return x * 2
"""

SYNTAX_ERROR = """
    from torch import nn

    class Broken(nn.Module)
        def forward(self, x):
            return x
"""


def _torchscript(repo: Path, name: str, module: nn.Module, extra: str = "") -> None:
    config = f'name: "{name}" platform: "pytorch_libtorch" {IO} {ONE_CPU} {extra}'
    write_model(repo, name, config, {1: torch.jit.script(module)})


def _python(repo: Path, name: str, source: str, extra: str = "", count: int = 1) -> Path:
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(
        f'name: "{name}" backend: "pytorch" runtime: "model.py" {IO} '
        f"instance_group [ {{ count: {count} kind: KIND_CPU }} ] {NO_COMPILE} {extra}\n"
    )
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(source).strip() + "\n")
    return model_dir


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("faulty")
    _torchscript(repo, "healthy", Double(), "dynamic_batching { }")
    _torchscript(repo, "raises", Raises())
    _torchscript(repo, "wrong_keys", WrongKeys())
    _torchscript(repo, "wrong_dtype", WrongDtype())
    _torchscript(repo, "scalar", Scalar())
    _torchscript(repo, "wrong_dims", ThreeColumns())
    # Three columns again, but the output is reshaped for the client: [4] in the model is [2, 2].
    _torchscript(repo, "wrong_reshape", ThreeColumns())
    (repo / "wrong_reshape" / "config.pbtxt").write_text(
        'name: "wrong_reshape" platform: "pytorch_libtorch" max_batch_size: 8 '
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ] '
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2, 2 ] '
        "reshape: { shape: [ 4 ] } } ] " + ONE_CPU + "\n"
    )
    _torchscript(
        repo,
        "fewer_rows",
        FirstRowOnly(),
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 300000 }",
    )
    _python(repo, "returns_int", RETURNS_INT)
    _python(repo, "returns_none", RETURNS_NONE)
    _python(repo, "hangs", HANGS, TIMEOUT)
    _python(repo, "hangs_twice", HANGS, TIMEOUT, count=2)
    _python(
        repo, "hangs_ordered", HANGS, TIMEOUT + " dynamic_batching { preserve_ordering: true }", 2
    )
    _python(repo, "leaks", LEAKS)
    # Three models that cannot load: each fails only itself.
    corrupt = repo / "corrupt_pt"
    (corrupt / "1").mkdir(parents=True)
    (corrupt / "config.pbtxt").write_text(f'name: "corrupt_pt" platform: "pytorch_libtorch" {IO}\n')
    (corrupt / "1" / "model.pt").write_bytes(b"PK\x03\x04 this is not a TorchScript archive")
    _python(repo, "syntax_error", SYNTAX_ERROR)
    unparsable = repo / "bad_config"
    (unparsable / "1").mkdir(parents=True)
    torch.jit.save(torch.jit.script(Double()), str(unparsable / "1" / "model.pt"))
    (unparsable / "config.pbtxt").write_text('name: "bad_config" max_batch_size: [ 8 \n')
    bad_timeout = TIMEOUT.replace(f'"{HANG_TIMEOUT_MS}"', '"soon"')
    _torchscript(repo, "bad_timeout", Double(), bad_timeout)
    process = ServerProcess(
        [repo], ["--exit-on-error=false", "--strict-readiness=false", "--allow-grpc=false"]
    ).start()
    yield process
    process.stop()


def _data(rows: int = 1, value: float = 1.0) -> np.ndarray:
    return np.full((rows, 4), value, dtype=np.float32) + np.arange(4, dtype=np.float32)


def _infer(server: ServerProcess, model: str, data: np.ndarray, **kwargs: Any) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    try:
        tensor = httpclient.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data)
        result = client.infer(model, [tensor], **kwargs).as_numpy("OUTPUT0")
        assert isinstance(result, np.ndarray)
        return result
    finally:
        client.close()


def _error(server: ServerProcess, model: str, data: np.ndarray, **kwargs: Any) -> tuple[str, str]:
    """The HTTP status and message of a request that must fail."""
    with pytest.raises(InferenceServerException) as caught:
        _infer(server, model, data, **kwargs)
    return str(caught.value.status()), caught.value.message()


def _assert_healthy(server: ServerProcess, rows: int = 2) -> None:
    data = _data(rows, 5.0)
    np.testing.assert_array_equal(_infer(server, "healthy", data), data * 2)


def _post(server: ServerProcess, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        f"http://{server.http_url}{path}", data=json.dumps(body or {}).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


def _index(server: ServerProcess) -> dict[str, dict[str, str]]:
    return {entry["name"]: entry for entry in _post(server, "/v2/repository/index")}


def _rss_kb(server: ServerProcess) -> int:
    assert server.process is not None
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# Each faulty model: what one request gets back. The original backend does not check output dims
# against the config, and neither does ptserve: "wrong_dims" answers with the shape it returned.
FAILURES = {
    "raises": ("500", "PyTorch execute failure: builtins.RuntimeError: this model is broken on"),
    "wrong_keys": (
        "500",
        "model 'wrong_keys': the model returned a dictionary without output 'OUTPUT0' "
        "(its keys: 'WRONG')",
    ),
    "wrong_dtype": (
        "500",
        "configuration expects datatype TYPE_FP32 for output 'OUTPUT0', model provides TYPE_INT64",
    ),
    "scalar": ("500", "model 'scalar': output 'OUTPUT0' is a scalar (0-d) tensor"),
    "returns_int": (
        "500",
        "model 'returns_int': output 'OUTPUT0' is a int; outputs must be Tensors or List[str]",
    ),
    "returns_none": ("500", "model 'returns_none': output 'OUTPUT0' is a NoneType"),
    "wrong_reshape": (
        "500",
        "model 'wrong_reshape': output 'OUTPUT0' has shape [2, 3] (3 element(s) per request "
        "row), which does not fit its configured dims [2, 2]",
    ),
}


@pytest.mark.parametrize("model", sorted(FAILURES))
def test_a_faulty_result_fails_its_request_clearly(server: ServerProcess, model: str) -> None:
    status, expected = FAILURES[model]
    got_status, message = _error(server, model, _data(2))
    assert got_status == status, message
    assert expected in message
    assert server.status(f"/v2/models/{model}/ready") == 200  # and the model keeps serving
    _assert_healthy(server)


def test_wrong_output_dims_are_not_checked(server: ServerProcess) -> None:
    """As in the original, dims are the model's business: what it returns is what clients get."""
    data = _data(3)
    np.testing.assert_array_equal(_infer(server, "wrong_dims", data), data[:, :3] * 2)
    _assert_healthy(server)


def test_faulty_models_do_not_disturb_a_healthy_one(server: ServerProcess) -> None:
    """Faulty and healthy requests at once: every faulty one fails, every healthy one is right."""

    def faulty(i: int) -> None:
        model = sorted(FAILURES)[i % len(FAILURES)]
        status, message = _error(server, model, _data(2, float(i)))
        assert status == FAILURES[model][0] and FAILURES[model][1] in message

    def healthy(i: int) -> None:
        data = _data(1 + i % 4, float(i))
        np.testing.assert_array_equal(_infer(server, "healthy", data), data * 2)

    with ThreadPoolExecutor(8) as pool:
        calls = [pool.submit(faulty, i) for i in range(28)]
        calls += [pool.submit(healthy, i) for i in range(40)]
        for call in calls:
            call.result(timeout=60)


def test_fewer_batch_rows_fail_the_whole_batch_then_single_requests_succeed(
    server: ServerProcess,
) -> None:
    """Four requests share one batch (preferred size 4); the model returns one row for four."""
    with ThreadPoolExecutor(4) as pool:
        calls = [pool.submit(_error, server, "fewer_rows", _data(1, i)) for i in range(4)]
        outcomes = [call.result(timeout=30) for call in calls]
    for status, message in outcomes:
        assert status == "500"
        assert (
            "model 'fewer_rows': output 'OUTPUT0' has batch dimension 1, but the batch holds 4 "
            "request row(s)" in message
        )
    data = _data(1, 3.0)  # alone in its batch: one row asked, one row returned
    np.testing.assert_array_equal(_infer(server, "fewer_rows", data), data * 2)
    _assert_healthy(server)


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_a_hang_fails_at_the_execution_timeout_and_the_instance_rejoins(
    server: ServerProcess,
) -> None:
    """One instance: the hanging request and the one queued behind it fail; the version is
    unavailable with the reason until the call returns, then serves again."""
    hang_s = 2.5
    with ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        hanging = pool.submit(_error, server, "hangs", _data(1, hang_s))
        time.sleep(0.2)
        queued = pool.submit(_error, server, "hangs", _data(1, 0.0))
        status, message = hanging.result(timeout=30)
        waited = time.monotonic() - started
        assert status == "500", message
        assert (
            "model 'hangs' version 1: instance 'hangs_0' ran a batch for longer than "
            f"EXECUTION_TIMEOUT_MS ({HANG_TIMEOUT_MS} ms)" in message
        )
        assert HANG_TIMEOUT_MS / 1000 - 0.05 <= waited < hang_s - 0.5
        status, message = queued.result(timeout=30)
        assert status == "503", message
        assert "every instance of model 'hangs' version 1 is stuck" in message
    # While stuck: not ready, the index says why, new requests are refused with the reason.
    assert server.status("/v2/models/hangs/ready") != 200
    entry = _index(server)["hangs"]
    assert entry["state"] == "UNAVAILABLE"
    assert f"longer than EXECUTION_TIMEOUT_MS ({HANG_TIMEOUT_MS} ms)" in entry["reason"]
    status, message = _error(server, "hangs", _data(1, 0.0))
    assert status == "503" and "is stuck in an execution" in message
    _assert_healthy(server)
    # The call returns: the instance rejoins and the version is ready again.
    _wait(lambda: server.status("/v2/models/hangs/ready") == 200, hang_s + 10)
    assert _index(server)["hangs"]["state"] == "READY"
    data = _data(2, 0.0)
    np.testing.assert_array_equal(_infer(server, "hangs", data), data * 2)


def test_one_stuck_instance_of_two_leaves_the_other_serving(server: ServerProcess) -> None:
    hang_s = 6.0  # the first must still hang when the second is declared stuck, under load too
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_error, server, "hangs_twice", _data(1, hang_s))
        status, message = first.result(timeout=30)
        assert status == "500" and "EXECUTION_TIMEOUT_MS" in message
        # One instance stuck: still ready, and the other instance answers.
        assert server.status("/v2/models/hangs_twice/ready") == 200
        data = _data(1, 0.0)
        np.testing.assert_array_equal(_infer(server, "hangs_twice", data), data * 2)
        second = pool.submit(_error, server, "hangs_twice", _data(1, hang_s))
        status, message = second.result(timeout=30)
        assert status == "500" and "EXECUTION_TIMEOUT_MS" in message
        # Both stuck: unavailable until the first returns.
        assert server.status("/v2/models/hangs_twice/ready") != 200
        status, message = _error(server, "hangs_twice", _data(1, 0.0), model_version="1")
        assert status == "503"
        assert "version 1 is not at ready state: every instance" in message
    _wait(lambda: server.status("/v2/models/hangs_twice/ready") == 200, hang_s + 10)
    data = _data(1, 0.0)
    np.testing.assert_array_equal(_infer(server, "hangs_twice", data), data * 2)
    _assert_healthy(server)


def test_an_abandoned_batch_does_not_hold_back_ordered_answers(server: ServerProcess) -> None:
    """With preserve_ordering a later batch's answer waits for the earlier one; the watchdog's
    answer for the stuck batch releases it, long before the stuck call returns."""
    hang_s = 3.0
    with ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        stuck = pool.submit(_error, server, "hangs_ordered", _data(1, hang_s))
        time.sleep(0.2)  # the first batch is running on one instance
        data = _data(1, 0.0)
        quick = pool.submit(_infer, server, "hangs_ordered", data)
        np.testing.assert_array_equal(quick.result(timeout=30), data * 2)
        assert time.monotonic() - started < hang_s - 0.5
        status, message = stuck.result(timeout=30)
        assert status == "500" and "EXECUTION_TIMEOUT_MS" in message
    assert server.status("/v2/models/hangs_ordered/ready") == 200  # one of two instances left
    _assert_healthy(server)


def test_a_leaking_model_keeps_serving_and_its_growth_shows_in_rss(server: ServerProcess) -> None:
    """ptserve does not limit a model's memory: the leak is visible, the server keeps serving."""
    data = _data(1)
    np.testing.assert_array_equal(_infer(server, "leaks", data), data * 2)
    before = _rss_kb(server)
    calls = 12
    for _ in range(calls):
        np.testing.assert_array_equal(_infer(server, "leaks", data), data * 2)
    grown_mb = (_rss_kb(server) - before) / 1024
    assert grown_mb >= calls * LEAK_MB * 0.75, grown_mb
    _assert_healthy(server)


def test_broken_model_folders_fail_only_their_own_load(server: ServerProcess) -> None:
    index = _index(server)
    corrupt = index["corrupt_pt"]
    assert corrupt["state"] == "UNAVAILABLE"
    assert "failed to load" in corrupt["reason"] and "as TorchScript" in corrupt["reason"]
    syntax = index["syntax_error"]
    assert syntax["state"] == "UNAVAILABLE"
    assert "importing" in syntax["reason"] and "SyntaxError" in syntax["reason"]
    config = index["bad_config"]
    assert config["state"] == "UNAVAILABLE"
    assert "failed to parse the model configuration of model 'bad_config'" in config["reason"]
    timeout = index["bad_timeout"]
    assert timeout["state"] == "UNAVAILABLE"
    assert (
        "parameter EXECUTION_TIMEOUT_MS must be a whole number of milliseconds (0: no timeout), "
        "got 'soon'" in timeout["reason"]
    )
    for name in ("corrupt_pt", "syntax_error", "bad_config", "bad_timeout"):
        assert server.status(f"/v2/models/{name}/ready") != 200
        status, message = _error(server, name, _data(1))
        assert status == "503" and "has no available versions" in message
    ready = {e["name"] for e in _post(server, "/v2/repository/index", {"ready": True})}
    assert {"healthy", "raises", "leaks", "fewer_rows"} <= ready
    _assert_healthy(server)


def test_the_request_timeout_needs_a_queue_policy(server: ServerProcess) -> None:
    """As in the reference, a request's ``timeout`` acts only through a dynamic batcher's queue
    policy; "hangs" has no dynamic batching, so a 1 ms timeout does not cut a 0.4 s wait in the
    queue (behind a 0.4 s run, below its 0.6 s execution timeout)."""
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(_infer, server, "hangs", _data(1, 0.4))
        time.sleep(0.1)
        data = _data(1, 0.0)
        started = time.monotonic()
        queued = pool.submit(_infer, server, "hangs", data, timeout=1000)
        np.testing.assert_array_equal(queued.result(timeout=30), data * 2)
        assert time.monotonic() - started >= 0.2  # it did wait behind the first
        np.testing.assert_array_equal(first.result(timeout=30), _data(1, 0.4) * 2)


def test_the_server_survived_them_all(server: ServerProcess) -> None:
    """Runs last: no faulty model escaped its error handling (nothing logged a traceback)."""
    assert server.process is not None and server.process.poll() is None
    assert "Traceback" not in server.log()
    _assert_healthy(server, 8)
