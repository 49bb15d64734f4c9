"""Inference through tritonclient.http (sync and aio): every datatype, JSON and binary."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient

from tests.models import TENSOR_TYPES
from tests.serverproc import ServerProcess

NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}


def sample(datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(7)
    if datatype == "BOOL":
        return rng.integers(0, 2, shape).astype(np.bool_)
    dtype = np.dtype(NUMPY[datatype])
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@pytest.fixture(scope="module")
def client(http_server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(http_server.http_url)


# FP16 cannot travel as JSON in the v2 protocol: that case is an error, tested below.
CASES = [
    (datatype, binary, batching)
    for datatype in TENSOR_TYPES
    for binary in (True, False)
    for batching in (True, False)
    if binary or datatype != "FP16"
]


@pytest.mark.parametrize(("datatype", "binary", "batching"), CASES)
def test_identity_roundtrip(
    client: httpclient.InferenceServerClient, datatype: str, binary: bool, batching: bool
) -> None:
    model = f"identity_{datatype.lower()}" + ("" if batching else "_nobatch")
    data = sample(datatype, (3, 5))
    tensor = httpclient.InferInput("INPUT0", list(data.shape), datatype)
    tensor.set_data_from_numpy(data, binary_data=binary)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    result = client.infer(model, [tensor], outputs=[output])
    got = result.as_numpy("OUTPUT0")
    assert got.dtype == data.dtype
    assert got.shape == data.shape
    np.testing.assert_array_equal(got, data)


def test_fp16_as_json_is_refused(client: httpclient.InferenceServerClient) -> None:
    tensor = httpclient.InferInput("INPUT0", [1, 2], "FP16")
    tensor.set_data_from_numpy(np.ones((1, 2), np.float16), binary_data=False)
    with pytest.raises(httpclient.InferenceServerException) as info:
        client.infer("identity_fp16", [tensor])
    assert info.value.status() == "400"
    assert "FP16 data cannot be sent as JSON" in info.value.message()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_bytes_roundtrip(client: httpclient.InferenceServerClient, binary: bool) -> None:
    data = np.array(["hello", "wörld", "", "a longer string with spaces"], dtype=object)
    tensor = httpclient.InferInput("INPUT0", [4], "BYTES")
    tensor.set_data_from_numpy(data, binary_data=binary)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
    result = client.infer("identity_bytes", [tensor], outputs=[output])
    got = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("OUTPUT0")]
    assert got == list(data)


def test_simple_string(client: httpclient.InferenceServerClient) -> None:
    a = np.array([str(i) for i in range(16)], dtype=object)
    b = np.array(["1"] * 16, dtype=object)
    inputs = [
        httpclient.InferInput("INPUT0", [16], "BYTES"),
        httpclient.InferInput("INPUT1", [16], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple_string", inputs)
    assert [int(x) for x in result.as_numpy("OUTPUT0")] == [i + 1 for i in range(16)]
    assert [int(x) for x in result.as_numpy("OUTPUT1")] == [i - 1 for i in range(16)]


def test_batched_mlp_matches_in_process(client: httpclient.InferenceServerClient) -> None:
    import torch

    from ptserve.examples import mlp

    data = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    tensor = httpclient.InferInput("INPUT__0", [5, 64], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("mlp", [tensor])
    with torch.no_grad():
        expected = mlp()(torch.from_numpy(data)).numpy()
    np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), expected, rtol=1e-5, atol=1e-5)


def test_cnn_shape(client: httpclient.InferenceServerClient) -> None:
    data = np.zeros((2, 3, 32, 32), np.float32)
    tensor = httpclient.InferInput("INPUT__0", [2, 3, 32, 32], "FP32")
    tensor.set_data_from_numpy(data)
    assert client.infer("cnn", [tensor]).as_numpy("OUTPUT__0").shape == (2, 10)


@pytest.mark.parametrize("version", ["1", "2", "3"])
def test_versions(client: httpclient.InferenceServerClient, version: str) -> None:
    data = np.ones((1, 4), np.float32)
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("versioned", [tensor], model_version=version)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * int(version))
    assert result.get_response()["model_version"] == version


def test_default_version_is_newest(client: httpclient.InferenceServerClient) -> None:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    result = client.infer("versioned", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 3.0))


def test_requested_outputs_only_and_mixed_binary(
    client: httpclient.InferenceServerClient,
) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    only = client.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert [o["name"] for o in only.get_response()["outputs"]] == ["OUTPUT1"]
    mixed = client.infer(
        "simple",
        inputs,
        outputs=[
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=False),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
        ],
    )
    outputs = {o["name"]: o for o in mixed.get_response()["outputs"]}
    assert "data" in outputs["OUTPUT0"] and "parameters" not in outputs["OUTPUT0"]
    assert outputs["OUTPUT1"]["parameters"]["binary_data_size"] == 64
    np.testing.assert_array_equal(mixed.as_numpy("OUTPUT0"), a * 2)
    np.testing.assert_array_equal(mixed.as_numpy("OUTPUT1"), a * 0)


def test_classification(client: httpclient.InferenceServerClient) -> None:
    a = np.array([[5, 1, 9, 3] + [0] * 12], dtype=np.int32)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.zeros_like(a))
    output = httpclient.InferRequestedOutput("OUTPUT0", class_count=2)
    result = client.infer("simple", inputs, outputs=[output])
    assert [x.decode() for x in result.as_numpy("OUTPUT0")[0]] == ["9:2", "5:0"]


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compression_both_ways(client: httpclient.InferenceServerClient, algorithm: str) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    result = client.infer(
        "simple",
        inputs,
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


def test_request_id_echoed(client: httpclient.InferenceServerClient) -> None:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    assert client.infer("versioned", [tensor], request_id="abc-1").get_response()["id"] == "abc-1"
    assert "id" not in client.infer("versioned", [tensor], request_id="").get_response()


async def test_aio_client(http_server: ServerProcess) -> None:
    client = aiohttpclient.InferenceServerClient(http_server.http_url)
    try:
        assert await client.is_server_live()
        assert await client.is_server_ready()
        assert await client.is_model_ready("simple")
        metadata = await client.get_model_metadata("simple")
        assert metadata["inputs"][0]["shape"] == [-1, 16]
        a = np.arange(32, dtype=np.int32).reshape(2, 16)
        inputs = [
            aiohttpclient.InferInput("INPUT0", [2, 16], "INT32"),
            aiohttpclient.InferInput("INPUT1", [2, 16], "INT32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a, binary_data=False)
        result = await client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
        with pytest.raises(aiohttpclient.InferenceServerException, match="unknown model"):
            await client.infer("nope", inputs)
    finally:
        await client.close()


def test_reshape_both_ways(client: httpclient.InferenceServerClient) -> None:
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    tensor = httpclient.InferInput("INPUT0", [2, 4], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("reshaped", [tensor])
    expected = data.reshape(2, 2, 2).sum(-1).reshape(2, 2, 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)
    assert client.get_model_metadata("reshaped")["outputs"][0]["shape"] == [-1, 2, 1]
