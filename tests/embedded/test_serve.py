"""The wire frontends started from the in-process API: real Triton clients against them, and
one set of statistics whichever way the requests came."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from ptserve import InferenceError, Server, Status

A = np.arange(16, dtype=np.int32).reshape(1, 16)


def refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def http_inputs() -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in range(2)]
    for item in inputs:
        item.set_data_from_numpy(A)
    return inputs


def test_http_and_in_process_requests_share_the_statistics(repository: Path) -> None:
    with Server(model_repository=repository) as server:
        for _ in range(3):
            server.model("simple").infer({"INPUT0": A, "INPUT1": A})
        port = server.serve_http(port=0)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        assert client.is_server_ready() and client.is_model_ready("simple")
        over_http = client.get_inference_statistics("simple")["model_stats"][0]
        in_process = server.model("simple").statistics()["model_stats"][0]
        assert over_http["inference_stats"]["success"]["count"] == 3
        assert over_http == in_process
        result = client.infer("simple", http_inputs())
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A * 2)
        stats = server.model("simple").statistics()["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == 4
        with pytest.raises(Exception, match="expects 'INT32'") as caught:
            bad = httpclient.InferInput("INPUT0", [1, 16], "FP32")
            bad.set_data_from_numpy(A.astype(np.float32))
            client.infer("simple", [bad, http_inputs()[1]])
        with pytest.raises(InferenceError) as in_process_error:
            server.model("simple").infer({"INPUT0": A.astype(np.float32), "INPUT1": A})
        assert in_process_error.value.status is Status.INVALID_ARGUMENT
        assert in_process_error.value.message in str(caught.value)
        client.close()
    assert refused(port)


def test_grpc_against_the_embedded_server(repository: Path) -> None:
    with Server(model_repository=repository) as server:
        port = server.serve_grpc(port=0)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        assert client.is_server_live() and client.is_model_ready("mlp")
        inputs = [grpcclient.InferInput("INPUT__0", [2, 64], "FP32")]
        x = np.random.default_rng(0).random((2, 64), dtype=np.float32)
        inputs[0].set_data_from_numpy(x)
        over_grpc = client.infer("mlp", inputs).as_numpy("OUTPUT__0")
        in_process = server.model("mlp").infer({"INPUT__0": x})["OUTPUT__0"]
        np.testing.assert_allclose(over_grpc, in_process, rtol=1e-6)
        stats = client.get_inference_statistics("mlp", as_json=True)["model_stats"][0]
        assert int(stats["inference_stats"]["success"]["count"]) == 2
        client.close()
    assert refused(port)


def test_metrics_count_in_process_requests(repository: Path) -> None:
    with Server(model_repository=repository) as server:
        server.model("simple").infer({"INPUT0": A, "INPUT1": A})
        port = server.serve_metrics(port=0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        assert 'nv_inference_request_success{model="simple",version="1"} 1' in text
    assert refused(port)
