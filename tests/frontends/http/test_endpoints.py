"""Health, metadata, readiness and config routes, through tritonclient and plain HTTP."""

from __future__ import annotations

import json

import pytest
import tritonclient.http as httpclient

from tests.frontends.http.rawhttp import error_of, request
from tests.serverproc import ServerProcess


@pytest.fixture(scope="module")
def client(http_server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(http_server.http_url)


def test_health(client: httpclient.InferenceServerClient, http_server: ServerProcess) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    status, _headers, body = request(http_server.http_url, "GET", "/v2/health/ready")
    assert (status, body) == (200, b"")


def test_server_metadata(client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_server_metadata()
    assert metadata["name"] == "ptserve"
    for extension in (
        "binary_tensor_data",
        "classification",
        "model_configuration",
        "statistics",
        "system_shared_memory",
        "sequence",
        "schedule_policy",
    ):
        assert extension in metadata["extensions"]
    assert "cuda_shared_memory" not in metadata["extensions"]


def test_model_metadata(client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_model_metadata("simple")
    assert metadata == {
        "name": "simple",
        "versions": ["1"],
        "platform": "pytorch_libtorch",
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
            {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]},
            {"name": "OUTPUT1", "datatype": "INT32", "shape": [-1, 16]},
        ],
    }
    assert client.get_model_metadata("simple_string")["inputs"][0]["shape"] == [16]
    assert client.get_model_metadata("versioned")["versions"] == ["1", "2", "3"]


def test_model_config_is_auto_completed(client: httpclient.InferenceServerClient) -> None:
    config = client.get_model_config("simple_string")
    assert config["name"] == "simple_string"
    assert config["platform"] == "pytorch_libtorch"
    assert config["backend"] == "pytorch"
    assert config["default_model_filename"] == "model.pt"
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert config["instance_group"][0]["count"] == 1
    assert config["input"][0]["data_type"] == "TYPE_STRING"
    assert config["input"][0]["dims"] == [16]  # a number, not a string
    assert "dynamic_batching" not in config
    assert "sequence_batching" not in config
    assert config["max_batch_size"] == 0


def test_model_readiness(
    client: httpclient.InferenceServerClient, http_server: ServerProcess
) -> None:
    assert client.is_model_ready("simple")
    assert client.is_model_ready("versioned", "2")
    # Unknown models and versions are not ready (400, as the reference), not an error.
    assert request(http_server.http_url, "GET", "/v2/models/nope/ready")[0] == 400
    assert request(http_server.http_url, "GET", "/v2/models/versioned/versions/9/ready")[0] == 400


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/v2/models/nope", 404, "Request for unknown model: 'nope' is not found"),
        ("/v2/models/nope/config", 404, "Request for unknown model: 'nope' is not found"),
        (
            "/v2/models/simple/versions/7",
            404,
            "Request for unknown model: 'simple' version 7 is not found",
        ),
        ("/v2/models/simple/versions/x", 400, "not a valid version number"),
        ("/v2/nothing/here", 404, "not found"),
    ],
)
def test_lookup_errors(http_server: ServerProcess, path: str, status: int, message: str) -> None:
    got_status, headers, body = request(http_server.http_url, "GET", path)
    assert got_status == status
    assert headers["content-type"] == "application/json"
    assert message in error_of(body)


def test_wrong_method(http_server: ServerProcess) -> None:
    status, _, body = request(http_server.http_url, "GET", "/v2/models/simple/infer")
    assert status == 405
    assert "method GET is not allowed" in error_of(body)
    assert request(http_server.http_url, "POST", "/v2/health/live")[0] == 405


def test_statistics_shape(client: httpclient.InferenceServerClient) -> None:
    stats = client.get_inference_statistics("simple_string")["model_stats"][0]
    assert stats["name"] == "simple_string" and stats["version"] == "1"
    for key in (
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    ):
        assert set(stats["inference_stats"][key]) == {"count", "ns"}


def test_config_json_numbers(http_server: ServerProcess) -> None:
    status, _, body = request(http_server.http_url, "GET", "/v2/models/cnn/config")
    assert status == 200
    config = json.loads(body)
    assert config["input"][0]["dims"] == [3, 32, 32]
    assert config["max_batch_size"] == 32
