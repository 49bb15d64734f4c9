"""Health, metadata, configuration, statistics, repository and settings RPCs."""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from tests.serverproc import ServerProcess


def _simple_inputs(batch: int = 1) -> list[grpcclient.InferInput]:
    inputs = [
        grpcclient.InferInput("INPUT0", [batch, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((batch, 16), dtype=np.int32))
    return inputs


def test_live_ready_and_server_metadata_match_http(
    client: grpcclient.InferenceServerClient, example_server: ServerProcess
) -> None:
    assert client.is_server_live() is True
    assert client.is_server_ready() is True
    metadata = client.get_server_metadata(as_json=True)
    http_metadata = httpclient.InferenceServerClient(example_server.http_url).get_server_metadata()
    assert metadata["name"] == http_metadata["name"] == "ptserve"
    assert metadata["version"] == http_metadata["version"]
    assert metadata["extensions"] == http_metadata["extensions"]


def test_model_metadata_matches_http(
    client: grpcclient.InferenceServerClient, example_server: ServerProcess
) -> None:
    metadata = client.get_model_metadata("simple")
    assert metadata.name == "simple"
    assert list(metadata.versions) == ["1"]
    assert metadata.platform == "pytorch_libtorch"
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    http_metadata = httpclient.InferenceServerClient(example_server.http_url).get_model_metadata(
        "simple"
    )
    assert [o.name for o in metadata.outputs] == [o["name"] for o in http_metadata["outputs"]]
    assert list(client.get_model_metadata("versioned").versions) == ["1", "2", "3"]
    # The metadata of one version lists only that version, as the reference's does.
    assert list(client.get_model_metadata("versioned", "3").versions) == ["3"]


def test_unknown_models_and_versions_are_not_ready(
    client: grpcclient.InferenceServerClient,
) -> None:
    assert client.is_model_ready("simple") is True
    assert client.is_model_ready("versioned", "2") is True
    assert client.is_model_ready("nope") is False
    assert not client.is_model_ready("versioned", "9")
    with pytest.raises(InferenceServerException, match="not a valid number"):
        client.is_model_ready("versioned", "x")


def test_model_config_is_the_auto_completed_message(
    client: grpcclient.InferenceServerClient,
) -> None:
    config = client.get_model_config("simple").config
    assert config.name == "simple"
    assert config.max_batch_size == 8
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    assert list(config.input[0].dims) == [16]
    assert config.input[0].data_type == 8  # TYPE_INT32
    # parts the server filled in
    assert config.version_policy.latest.num_versions == 1
    assert len(config.instance_group) >= 1
    with pytest.raises(InferenceServerException) as error:
        client.get_model_config("no_such_model")
    assert error.value.status() == "StatusCode.NOT_FOUND"


def test_statistics_count_inferences(client: grpcclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("simple").model_stats[0]
    client.infer("simple", _simple_inputs(2))
    client.infer("simple", _simple_inputs(1))
    stats = client.get_inference_statistics("simple").model_stats[0]
    assert stats.name == "simple"
    assert stats.version == "1"
    assert stats.inference_stats.success.count - before.inference_stats.success.count >= 2
    assert stats.inference_count - before.inference_count >= 3
    assert stats.inference_stats.queue.count >= 2
    assert stats.last_inference > 0
    assert any(b.batch_size == 2 for b in stats.batch_stats)
    everything = client.get_inference_statistics()
    assert {"simple", "mlp", "versioned"} <= {s.name for s in everything.model_stats}
    with pytest.raises(InferenceServerException) as error:
        client.get_inference_statistics("no_such_model")
    assert error.value.status() == "StatusCode.NOT_FOUND"


def test_repository_index(client: grpcclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index()
    entries = {(m.name, m.version): m.state for m in index.models}
    assert entries[("simple", "1")] == "READY"
    assert {v for (n, v) in entries if n == "versioned"} == {"1", "2", "3"}


def test_load_and_unload_are_refused(client: grpcclient.InferenceServerClient) -> None:
    for call in (client.load_model, client.unload_model):
        with pytest.raises(InferenceServerException) as error:
            call("simple")
        assert error.value.status() == "StatusCode.UNAVAILABLE"
        assert "explicit model load / unload is not allowed" in error.value.message()
    assert client.is_model_ready("simple") is True


def test_log_settings_read_and_update(
    client: grpcclient.InferenceServerClient, example_server: ServerProcess
) -> None:
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_info"]["bool_param"] is True
    assert settings["log_format"]["string_param"] == "default"
    try:
        updated = client.update_log_settings({"log_verbose_level": 2}, as_json=True)
        assert updated["settings"]["log_verbose_level"]["uint32_param"] == 2
        again = client.get_log_settings(as_json=True)["settings"]
        assert again["log_verbose_level"]["uint32_param"] == 2
    finally:
        client.update_log_settings({"log_verbose_level": 0})
    # the change is real: with info off, the server's own info line about it is not written
    lines = example_server.log().count("log settings updated")
    try:
        client.update_log_settings({"log_info": False})
        assert example_server.log().count("log settings updated") == lines
    finally:
        client.update_log_settings({"log_info": True})
    assert example_server.log().count("log settings updated") == lines + 1
    with pytest.raises(InferenceServerException) as error:
        client.update_log_settings({"log_colour": True})
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unknown log setting 'log_colour'" in error.value.message()


def test_log_settings_type_errors(stub: Any) -> None:
    request = pb.LogSettingsRequest()
    request.settings["log_info"].string_param = "yes"
    with pytest.raises(grpc.RpcError) as error:
        stub.LogSettings(request)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "log setting 'log_info' must be a boolean" in error.value.details()
    request = pb.LogSettingsRequest()
    request.settings["log_format"].string_param = "XML"
    with pytest.raises(grpc.RpcError) as error:
        stub.LogSettings(request)
    assert "must be one of default, ISO8601" in error.value.details()


def test_trace_settings_global_and_per_model(client: grpcclient.InferenceServerClient) -> None:
    settings = client.get_trace_settings(as_json=True)["settings"]
    assert settings["trace_rate"]["value"] == ["1000"]
    assert settings["trace_level"]["value"] == ["OFF"]
    updated = client.update_trace_settings("simple", {"trace_rate": "10"}, as_json=True)
    assert updated["settings"]["trace_rate"]["value"] == ["10"]
    assert client.get_trace_settings(as_json=True)["settings"]["trace_rate"]["value"] == ["1000"]
    cleared = client.update_trace_settings("simple", {"trace_rate": None}, as_json=True)
    assert cleared["settings"]["trace_rate"]["value"] == ["1000"]
    with pytest.raises(InferenceServerException) as error:
        client.update_trace_settings(settings={"trace_level": ["LOUD"]})
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "trace_level 'LOUD'" in error.value.message()
    with pytest.raises(InferenceServerException) as error:
        client.update_trace_settings(settings={"trace_rate": "often"})
    assert error.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException) as error:
        client.get_trace_settings("no_such_model")
    assert error.value.status() == "StatusCode.NOT_FOUND"


def test_shared_memory_refused_unless_allowed(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.register_system_shared_memory("region", "/ptserve_test_nothing", 64)
    assert error.value.status() == "StatusCode.UNAVAILABLE"
    assert "--allow-client-shm" in error.value.message()
    assert len(client.get_system_shared_memory_status().regions) == 0
    inputs = _simple_inputs()
    inputs[0].set_shared_memory("region", 64)
    with pytest.raises(InferenceServerException) as error:
        client.infer("simple", inputs)
    assert error.value.status() == "StatusCode.UNAVAILABLE"


def test_cuda_shared_memory_refused(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as error:
        client.register_cuda_shared_memory("gpu", b"aGFuZGxl", 0, 64)
    assert error.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "CUDA shared memory is not supported" in error.value.message()
    assert len(client.get_cuda_shared_memory_status().regions) == 0
    client.unregister_cuda_shared_memory()


def test_standard_health_check(example_server: ServerProcess) -> None:
    with grpc.insecure_channel(example_server.grpc_url) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"") == b"\x08\x01"  # status: SERVING
        named = b"\x0a" + bytes([len(b"inference.GRPCInferenceService")])
        assert check(named + b"inference.GRPCInferenceService") == b"\x08\x01"
        with pytest.raises(grpc.RpcError) as error:
            check(b"\x0a\x05other")
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
