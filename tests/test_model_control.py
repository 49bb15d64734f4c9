"""Control modes through the real server: poll reloads under load, explicit load/unload."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ptserve.examples import SIMPLE_CONFIG, AddSub, write_model
from tests.core.slow import Slow, slow_config, write_slow
from tests.models import simple_config
from tests.serverproc import ServerProcess

POLL = ["--model-control-mode", "poll", "--repository-poll-secs", "1"]


def infer_scaled(client: httpclient.InferenceServerClient, model: str) -> float:
    data = np.ones((1, 4), np.float32)
    inputs = [httpclient.InferInput("INPUT0", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(data)
    return float(client.infer(model, inputs).as_numpy("OUTPUT0")[0, 0])


def wait_until(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def index_of(client: httpclient.InferenceServerClient) -> dict[str, dict[str, str]]:
    return {e["name"]: e for e in client.get_model_repository_index()}


def test_poll_reload_under_load_fails_no_request(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    write_slow(repository, "scaled", {1: 1.0}, iterations=20)
    with ServerProcess([repository], POLL) as server:
        seen: list[float] = []
        errors: list[str] = []
        stop = threading.Event()

        def load() -> None:
            client = httpclient.InferenceServerClient(server.http_url)
            while not stop.is_set():
                try:
                    seen.append(infer_scaled(client, "scaled"))
                except InferenceServerException as exc:
                    errors.append(str(exc))

        threads = [threading.Thread(target=load) for _ in range(2)]
        for thread in threads:
            thread.start()
        try:
            wait_until(lambda: len(seen) > 5)
            # A new version arrives (its folder is written while polls run).
            write_model(
                repository, "scaled", slow_config("scaled"), {2: torch.jit.script(Slow(2.0, 100))}
            )
            wait_until(lambda: seen and seen[-1] == 2.0)
            before = len(seen)
            wait_until(lambda: len(seen) > before + 5)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert errors == []
        assert 1.0 in seen and 2.0 in seen
        # Once the new version answered, the old one never did again.
        first_new = seen.index(2.0)
        assert set(seen[first_new + 2 :]) == {2.0}
        client = httpclient.InferenceServerClient(server.http_url)
        entries = client.get_model_repository_index()
        assert {"name": "scaled", "version": "2", "state": "READY", "reason": ""} in entries
        assert all(e.get("version") != "1" for e in entries)
        assert "changed on disk" in server.log()


def test_poll_adds_models_only_when_complete_and_removes_them(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    write_slow(repository, "first", {1: 1.0}, iterations=1)
    with ServerProcess([repository], POLL) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        # A model folder whose config is still being written: half a config, then the rest.
        model_dir = repository / "second"
        (model_dir / "1").mkdir(parents=True)
        torch.jit.save(torch.jit.script(Slow(3.0, 1)), str(model_dir / "1" / "model.pt"))
        text = slow_config("second")
        (model_dir / "config.pbtxt").write_text(text[: len(text) // 2])
        time.sleep(0.4)
        (model_dir / "config.pbtxt").write_text(text)
        wait_until(
            lambda: client.is_model_ready("second") if "second" in index_of(client) else False
        )
        assert infer_scaled(client, "second") == 3.0
        assert "failed to load 'second'" not in server.log()
        # Removing the folder unloads the model.
        shutil.rmtree(model_dir)
        wait_until(lambda: "second" not in index_of(client))
        with pytest.raises(InferenceServerException):
            infer_scaled(client, "second")
        assert client.is_model_ready("first")
        # Explicit load / unload are refused while polling.
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("first")
        assert "explicit model load / unload is not allowed if polling is enabled" in str(
            refused.value
        )


def broken_model(repository: Path) -> None:
    bad = repository / "broken"
    (bad / "1").mkdir(parents=True)
    (bad / "1" / "model.pt").write_bytes(b"not torchscript")
    (bad / "config.pbtxt").write_text(slow_config("broken"))


def test_explicit_load_unload_override_and_upload(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    write_slow(repository, "scaled", {1: 1.0, 2: 2.0}, iterations=1)
    broken_model(repository)
    args = ["--model-control-mode", "explicit", "--load-model", "simple"]
    with ServerProcess([repository], args) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        assert "model_repository" in client.get_server_metadata()["extensions"]
        index = index_of(client)
        assert index["simple"]["state"] == "READY"
        assert index["scaled"] == {"name": "scaled"}  # in the repository, never loaded
        assert client.is_server_ready()

        client.load_model("scaled")
        assert infer_scaled(client, "scaled") == 2.0  # latest version by default
        # A config override: serve every version.
        config = json.dumps(
            {
                "name": "scaled",
                "platform": "pytorch_libtorch",
                "max_batch_size": 8,
                "version_policy": {"all": {}},
                "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
                "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
            }
        )
        client.load_model("scaled", config=config)
        assert client.is_model_ready("scaled", "1") and client.is_model_ready("scaled", "2")
        assert client.get_model_config("scaled")["version_policy"] == {"all": {}}

        client.unload_model("scaled", unload_dependents=True)
        assert not client.is_model_ready("scaled")
        states = {(e["name"], e.get("version")): e for e in client.get_model_repository_index()}
        assert states[("scaled", "1")]["state"] == "UNAVAILABLE"
        assert states[("scaled", "1")]["reason"] == "unloaded"
        ready = urllib.request.Request(
            f"http://{server.http_url}/v2/repository/index", b'{"ready": true}', method="POST"
        )
        with urllib.request.urlopen(ready, timeout=5) as reply:
            assert [e["name"] for e in json.loads(reply.read())] == ["simple"]
        assert client.is_server_ready()  # an unloaded model no longer counts

        with pytest.raises(InferenceServerException) as failed:
            client.load_model("broken")
        assert "failed to load" in str(failed.value)
        assert failed.value.status() == "400"
        assert "as TorchScript" in str(failed.value)

        # A model sent in the request: its config and its TorchScript file.
        saved = tmp_path / "upload.pt"
        torch.jit.save(torch.jit.script(Slow(5.0, 1)), str(saved))
        as_json = json.dumps(
            {
                "name": "uploaded",
                "platform": "pytorch_libtorch",
                "max_batch_size": 8,
                "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
                "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
            }
        )
        client.load_model("uploaded", config=as_json, files={"file:1/model.pt": saved.read_bytes()})
        assert infer_scaled(client, "uploaded") == 5.0
        with pytest.raises(InferenceServerException) as escaped:
            client.load_model(
                "evil", config=as_json, files={"file:../../escaped.pt": saved.read_bytes()}
            )
        assert "must not contain '..'" in str(escaped.value)
        with pytest.raises(InferenceServerException) as no_config:
            client.load_model("evil", files={"file:1/model.pt": saved.read_bytes()})
        assert "config" in str(no_config.value)
        client.unload_model("uploaded")
        assert not client.is_model_ready("uploaded")


def test_load_model_needs_explicit_mode(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    repository.mkdir()
    server = ServerProcess([repository], ["--load-model", "simple"]).start(wait=None)
    assert server.wait_exit() == 2
    assert "only allowed with --model-control-mode=explicit" in server.log()


def test_repository_api_over_grpc(tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient

    repository = tmp_path / "repo"
    write_slow(repository, "scaled", {1: 1.0, 2: 2.0}, iterations=1)
    broken_model(repository)
    with ServerProcess([repository], ["--model-control-mode", "explicit"]) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        index = {e.name: e for e in client.get_model_repository_index().models}
        assert set(index) == {"broken", "scaled"}
        assert not index["scaled"].state  # in the repository, never loaded

        client.load_model("scaled")
        assert client.is_model_ready("scaled", "2")
        states = {(e.name, e.version): e.state for e in client.get_model_repository_index().models}
        assert states[("scaled", "2")] == "READY"

        config = json.dumps(
            {
                "name": "scaled",
                "platform": "pytorch_libtorch",
                "max_batch_size": 8,
                "version_policy": {"specific": {"versions": [1]}},
                "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
                "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
            }
        )
        client.load_model("scaled", config=config)
        assert client.is_model_ready("scaled", "1")
        assert client.get_model_metadata("scaled").versions == ["1"]

        saved = tmp_path / "upload.pt"
        torch.jit.save(torch.jit.script(Slow(7.0, 1)), str(saved))
        uploaded = config.replace('"scaled"', '"uploaded"').replace(
            '{"specific": {"versions": [1]}}', '{"latest": {"num_versions": 1}}'
        )
        client.load_model(
            "uploaded", config=uploaded, files={"file:3/model.pt": saved.read_bytes()}
        )
        assert client.get_model_metadata("uploaded").versions == ["3"]
        assert infer_scaled(httpclient.InferenceServerClient(server.http_url), "uploaded") == 7.0

        with pytest.raises(InferenceServerException) as failed:
            client.load_model("broken")
        assert "as TorchScript" in str(failed.value)
        assert failed.value.status() == "StatusCode.INVALID_ARGUMENT"

        client.unload_model("scaled", unload_dependents=True)
        assert not client.is_model_ready("scaled")
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            reply = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True))
        assert [(e.name, e.version) for e in reply.models] == [("uploaded", "3")]


def test_repository_api_refused_over_grpc_in_none_mode(tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient

    repository = tmp_path / "repo"
    write_slow(repository, "scaled", {1: 1.0}, iterations=1)
    with ServerProcess([repository]) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        with pytest.raises(InferenceServerException) as refused:
            client.unload_model("scaled")
        assert "explicit model load / unload is not allowed" in str(refused.value)
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        assert client.is_model_ready("scaled")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_repeated_request_is_checked_again_after_the_model_changes(
    tmp_path: Path, protocol: str
) -> None:
    """Requests of one form (the same JSON header, or the same ModelInferRequest but for its
    data) reuse their checks only while the model is the same."""
    repository = tmp_path / "repo"
    write_model(repository, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    args = ["--model-control-mode", "explicit", "--load-model", "simple"]
    module: Any = httpclient if protocol == "http" else grpcclient
    binary = {"binary_data": True} if protocol == "http" else {}
    with ServerProcess([repository], args) as server:
        url = server.http_url if protocol == "http" else server.grpc_url
        client = module.InferenceServerClient(url)
        inputs = [module.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in range(2)]
        outputs = [module.InferRequestedOutput("OUTPUT0", **binary)]
        for step in range(5):  # one form, new data each time
            first = np.full((1, 16), step, np.int32)
            inputs[0].set_data_from_numpy(first, **binary)
            inputs[1].set_data_from_numpy(np.arange(16, dtype=np.int32)[None], **binary)
            result = client.infer("simple", inputs, outputs=outputs).as_numpy("OUTPUT0")
            assert result.tolist() == [[step + i for i in range(16)]]
        client.load_model("simple", config=simple_config(8))
        with pytest.raises(InferenceServerException) as refused:
            client.infer("simple", inputs, outputs=outputs)
        expected = "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
        assert refused.value.status() == expected
        assert "unexpected shape for input 'INPUT0'" in str(refused.value)
        small = [module.InferInput(f"INPUT{i}", [1, 8], "INT32") for i in range(2)]
        for tensor in small:
            tensor.set_data_from_numpy(np.ones((1, 8), np.int32), **binary)
        assert client.infer("simple", small).as_numpy("OUTPUT0").tolist() == [[2] * 8]


def test_load_and_unload_parameters_of_the_wrong_type_are_refused_on_both_protocols(
    tmp_path: Path,
) -> None:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    repository = tmp_path / "repo"
    write_slow(repository, "scaled", {1: 1.0}, iterations=1)
    with ServerProcess([repository], ["--model-control-mode", "explicit"]) as server:
        for path, body, words in (
            ("load", {"parameters": {"config": 5}}, "parameter 'config' must be a string"),
            ("load", {"parameters": {"file:1/model.pt": True}}, "must be base64 text"),
            ("unload", {"parameters": {"unload_dependents": "yes"}}, "must be true or false"),
        ):
            request = urllib.request.Request(
                f"http://{server.http_url}/v2/repository/models/scaled/{path}",
                data=json.dumps(body).encode(),
                method="POST",
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 400
            assert words in json.loads(refused.value.read())["error"]

        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            load = service_pb2.RepositoryModelLoadRequest(model_name="scaled")
            load.parameters["config"].bytes_param = b"{}"
            unload = service_pb2.RepositoryModelUnloadRequest(model_name="scaled")
            unload.parameters["unload_dependents"].string_param = "yes"
            upload = service_pb2.RepositoryModelLoadRequest(model_name="scaled")
            upload.parameters["config"].string_param = "{}"
            upload.parameters["file:1/model.pt"].string_param = "not bytes"
            for call, message, words in (
                (stub.RepositoryModelLoad, load, "parameter 'config' must be a string"),
                (stub.RepositoryModelUnload, unload, "must be true or false"),
                (stub.RepositoryModelLoad, upload, "parameter 'file:1/model.pt' must be bytes"),
            ):
                with pytest.raises(grpc.RpcError) as failed:
                    call(message, timeout=10)
                assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert words in str(failed.value.details())
        # Nothing was loaded or unloaded by the refused requests.
        client = httpclient.InferenceServerClient(server.http_url)
        assert not client.is_model_ready("scaled")
