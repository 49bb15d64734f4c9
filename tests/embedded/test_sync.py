"""``ptserve.Server``: the synchronous in-process API on the core, each call and its errors."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import ptserve
from ptserve import InferenceError, Server, Status
from ptserve.examples import AddSub, write_model
from tests.models import simple_config

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.int32)


def successes(server: Server, model: str) -> int:
    stats = server.statistics(model)["model_stats"][0]
    count: int = stats["inference_stats"]["success"]["count"]
    assert stats["inference_count"] >= count
    return count


def test_infer_with_numpy_returns_numpy(server: Server) -> None:
    outputs = server.model("simple").infer({"INPUT0": A, "INPUT1": B})
    assert set(outputs) == {"OUTPUT0", "OUTPUT1"}
    assert isinstance(outputs["OUTPUT0"], np.ndarray)
    np.testing.assert_array_equal(outputs["OUTPUT0"], A + B)
    np.testing.assert_array_equal(outputs["OUTPUT1"], A - B)


def test_infer_with_torch_returns_torch(server: Server) -> None:
    outputs = server.model("simple", version=1).infer(
        {"INPUT0": torch.from_numpy(A), "INPUT1": torch.from_numpy(B)}, outputs=["OUTPUT1"]
    )
    assert list(outputs) == ["OUTPUT1"]
    assert isinstance(outputs["OUTPUT1"], torch.Tensor)
    assert torch.equal(outputs["OUTPUT1"], torch.from_numpy(A - B))


def test_the_model_reads_the_callers_memory(server: Server) -> None:
    array = np.zeros(8, dtype=np.float32)
    tensor = torch.zeros(8, dtype=torch.float32)
    marks = server.model("marks")
    np.testing.assert_array_equal(marks.infer({"INPUT0": array})["OUTPUT0"], np.full(8, 2.0))
    np.testing.assert_array_equal(array, np.ones(8))  # the model wrote into the caller's array
    marks.infer({"INPUT0": tensor})
    assert torch.equal(tensor, torch.ones(8))
    view = np.zeros(16, dtype=np.float32)[::2]  # not contiguous: the backend takes a copy
    marks.infer({"INPUT0": view})
    np.testing.assert_array_equal(view, np.zeros(8))


def test_the_server_level_infer_and_request_parameters(server: Server) -> None:
    outputs = server.infer("versioned", {"INPUT0": np.ones((1, 4), np.float32)}, version=3)
    np.testing.assert_array_equal(outputs["OUTPUT0"], np.full((1, 4), 3.0, np.float32))
    outputs = server.infer(
        "simple", {"INPUT0": A, "INPUT1": B}, parameters={"priority": 0}, request_id="r1"
    )
    np.testing.assert_array_equal(outputs["OUTPUT0"], A + B)


def test_strings(server: Server) -> None:
    numbers = np.array([str(i) for i in range(16)])
    outputs = server.model("simple_string").infer({"INPUT0": numbers, "INPUT1": numbers})
    assert list(outputs["OUTPUT0"]) == [str(2 * i).encode() for i in range(16)]


def test_health_metadata_and_config(server: Server) -> None:
    assert server.live and server.ready
    assert server.metadata()["name"] == "ptserve"
    assert "statistics" in server.metadata()["extensions"]
    assert server.model_ready("simple") and server.model("simple").ready()
    assert not server.model_ready("nothing") and not server.model("nothing").ready()
    assert server.model_ready("versioned", 2) and not server.model_ready("versioned", 9)
    metadata = server.model("mlp").metadata()
    assert metadata["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 64]}]
    assert server.model_metadata("versioned", 2)["versions"] == ["2"]
    assert server.model("mlp").config()["max_batch_size"] == 32
    assert server.model_config("simple")["input"][0]["name"] == "INPUT0"
    names = {entry["name"] for entry in server.repository_index()}
    assert {"simple", "mlp", "marks"} <= names


def test_statistics_count_in_process_requests(server: Server) -> None:
    before = successes(server, "mlp")
    mlp = server.model("mlp")
    for batch in (1, 3):
        mlp.infer({"INPUT__0": np.zeros((batch, 64), np.float32)})
    assert successes(server, "mlp") == before + 2
    stats = mlp.statistics()["model_stats"][0]
    assert stats["name"] == "mlp" and stats["last_inference"] > 0
    failures = stats["inference_stats"]["fail"]["count"]
    with pytest.raises(InferenceError):
        mlp.infer({"INPUT__0": np.zeros((1, 63), np.float32)})
    assert mlp.statistics()["model_stats"][0]["inference_stats"]["fail"]["count"] == failures + 1
    assert successes(server, "mlp") == before + 2


@pytest.mark.parametrize(
    ("model", "inputs", "outputs", "status", "says"),
    [
        ("nothing", {"INPUT0": A}, None, Status.NOT_FOUND, "nothing"),
        ("simple", {"INPUT0": A.astype(np.int64), "INPUT1": B}, None, Status.INVALID_ARGUMENT,
         "data-type is 'INT64', but model 'simple' expects 'INT32'"),
        ("simple", {"INPUT0": A[:, :8], "INPUT1": B}, None, Status.INVALID_ARGUMENT,
         "unexpected shape for input 'INPUT0'"),
        ("simple", {"INPUT0": A}, None, Status.INVALID_ARGUMENT,
         "missing required input(s) ['INPUT1']"),
        ("simple", {"INPUT0": A, "INPUT1": B}, ["OUTPUT9"], Status.INVALID_ARGUMENT,
         "unexpected inference output 'OUTPUT9'"),
        ("simple", {"INPUT0": A, "INPUT1": B, "EXTRA": B}, None, Status.INVALID_ARGUMENT,
         "unexpected inference input 'EXTRA'"),
        ("simple", {"INPUT0": A.tolist(), "INPUT1": B}, None, Status.INVALID_ARGUMENT,
         "must be a numpy array or a torch tensor"),
    ],
)  # fmt: skip
def test_errors_are_the_wire_apis(
    server: Server,
    model: str,
    inputs: dict[str, Any],
    outputs: list[str] | None,
    status: Status,
    says: str,
) -> None:
    with pytest.raises(InferenceError) as caught:
        server.model(model).infer(inputs, outputs=outputs)
    assert caught.value.status is status
    assert says in caught.value.message
    assert isinstance(caught.value, ptserve.ServerError)


def test_repository_calls_need_explicit_mode(server: Server) -> None:
    with pytest.raises(InferenceError) as caught:
        server.unload_model("simple")
    assert caught.value.status is Status.UNAVAILABLE  # the reference's answer
    assert "explicit model load / unload is not allowed" in caught.value.message


def test_load_and_unload_in_explicit_mode(tmp_path: Path) -> None:
    write_model(tmp_path, "simple", 'platform: "pytorch_libtorch"', {1: torch.jit.script(AddSub())})
    with Server(model_repository=tmp_path, model_control_mode="explicit") as server:
        assert not server.model_ready("simple")
        assert server.repository_index() == [{"name": "simple"}]
        server.load_model("simple", config=simple_config(4))
        assert server.model_ready("simple")
        assert server.model("simple").metadata()["inputs"][0]["shape"] == [-1, 4]
        four = np.ones((1, 4), np.int32)
        outputs = server.model("simple").infer({"INPUT0": four, "INPUT1": four})
        np.testing.assert_array_equal(outputs["OUTPUT0"], four * 2)
        server.unload_model("simple")
        assert not server.model_ready("simple")
        with pytest.raises(InferenceError) as caught:
            server.model("simple").infer({"INPUT0": four, "INPUT1": four})
        assert caught.value.status in (Status.NOT_FOUND, Status.UNAVAILABLE)
        with pytest.raises(InferenceError) as caught:
            server.load_model("missing")
        assert caught.value.status in (Status.NOT_FOUND, Status.INVALID_ARGUMENT)


def test_a_model_that_fails_to_load_stops_the_start(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "1" / "model.pt").write_bytes(b"not torchscript")
    (broken / "config.pbtxt").write_text(
        'platform: "pytorch_libtorch"\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    before = set(threading.enumerate())
    with pytest.raises(InferenceError) as caught:
        Server(model_repository=tmp_path)
    assert caught.value.status is Status.UNAVAILABLE and "broken" in caught.value.message
    assert set(threading.enumerate()) <= before
    with Server(model_repository=tmp_path, exit_on_error=False) as server:
        assert not server.model_ready("broken") and not server.ready


def test_unknown_options_are_named() -> None:
    with pytest.raises(TypeError, match="http_port"):
        Server(model_repository="/nonexistent", http_port=8000)


def test_close_leaves_nothing_running(repository: Path) -> None:
    before = set(threading.enumerate())
    server = Server(model_repository=repository)
    assert set(threading.enumerate()) - before  # the loop and the instance workers
    model = server.model("simple")
    model.infer({"INPUT0": A, "INPUT1": B})
    server.close()
    assert server.closed and not server.live
    assert set(threading.enumerate()) <= before
    server.close()  # again: nothing to do
    with pytest.raises(RuntimeError, match="closed"):
        model.infer({"INPUT0": A, "INPUT1": B})
