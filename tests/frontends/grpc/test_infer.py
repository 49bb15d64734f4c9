"""Inference through tritonclient.grpc (sync and asyncio) and the raw stub."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from ptserve.examples import mlp
from ptserve.frontends.grpc.convert import parameters_to_dict
from tests.serverproc import ServerProcess


def _pair(a: np.ndarray, b: np.ndarray, module: object = grpcclient) -> list[object]:
    inputs = [
        module.InferInput("INPUT0", list(a.shape), "INT32"),  # type: ignore[attr-defined]
        module.InferInput("INPUT1", list(b.shape), "INT32"),  # type: ignore[attr-defined]
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_simple_batches(client: grpcclient.InferenceServerClient, batch: int) -> None:
    a = np.arange(batch * 16, dtype=np.int32).reshape(batch, 16)
    b = np.full((batch, 16), 5, dtype=np.int32)
    result = client.infer("simple", _pair(a, b), request_id="req-1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response.id == "req-1"
    assert response.model_name == "simple"
    assert response.model_version == "1"
    assert len(response.raw_output_contents) == len(response.outputs) == 2


def test_a_repeated_form_answers_with_each_requests_own_data_and_id(
    client: grpcclient.InferenceServerClient,
) -> None:
    """The second request of a form is cut out of its bytes (``convert.decode_wire_request``)
    and answered as bytes: its data and id, not the first one's."""
    for number in range(4):
        a = np.arange(16, dtype=np.int32).reshape(1, 16) * (number + 1)
        b = np.full((1, 16), number, dtype=np.int32)
        request_id = f"form-{number}" if number % 2 else ""
        result = client.infer("simple", _pair(a, b), request_id=request_id)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        assert result.get_response().id == request_id


def test_bytes_without_batching(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([str(i).encode() for i in range(16)], dtype=object)
    b = np.array([b"3"] * 16, dtype=object)
    inputs = [
        grpcclient.InferInput("INPUT0", [16], "BYTES"),
        grpcclient.InferInput("INPUT1", [16], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple_string", inputs)
    assert [int(x) for x in result.as_numpy("OUTPUT0")] == [i + 3 for i in range(16)]
    assert [int(x) for x in result.as_numpy("OUTPUT1")] == [i - 3 for i in range(16)]


@pytest.mark.parametrize("version", ["1", "2", "3"])
def test_versions(client: grpcclient.InferenceServerClient, version: str) -> None:
    data = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(data)
    result = client.infer("versioned", [tensor], model_version=version)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), data * int(version))
    assert result.get_response().model_version == version


def test_requested_outputs_and_classification(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    only = client.infer("simple", _pair(a, b), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in only.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(only.as_numpy("OUTPUT1"), a - b)
    top = client.infer(
        "simple", _pair(a, b), outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    )
    assert [x.decode() for x in top.as_numpy("OUTPUT0").reshape(-1)] == ["16:15", "15:14"]


def test_parameters_reach_the_core_and_triton_ones_are_ignored(stub: Any) -> None:
    request = _stub_request()
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    request.parameters["custom"].string_param = "kept"
    response = stub.ModelInfer(request)
    assert "triton_final_response" not in response.parameters
    assert len(response.raw_output_contents) == 2
    message = pb.ModelInferRequest()
    message.parameters["sequence_id"].uint64_param = 42
    message.parameters["sequence_start"].bool_param = True
    message.parameters["priority"].int64_param = 2
    message.parameters["timeout"].int64_param = 1000
    message.parameters["tag"].string_param = "abc"
    message.parameters["triton_anything"].bool_param = True
    values = parameters_to_dict(message.parameters)
    assert values == {
        "sequence_id": 42,
        "sequence_start": True,
        "priority": 2,
        "timeout": 1000,
        "tag": "abc",
    }
    assert type(values["sequence_id"]) is int


def _error(call: object, *args: object, **kwargs: object) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as error:
        call(*args, **kwargs)  # type: ignore[operator]
    return error.value


def test_client_mistakes_are_reported(client: grpcclient.InferenceServerClient) -> None:
    a = np.zeros((1, 16), dtype=np.int32)
    unknown = _error(client.infer, "no_such_model", _pair(a, a))
    assert unknown.status() == "StatusCode.NOT_FOUND"
    assert unknown.message() == "Request for unknown model: 'no_such_model' is not found"

    wrong_type = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    wrong_type.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    typed = _error(client.infer, "simple", [wrong_type, _pair(a, a)[1]])
    assert typed.status() == "StatusCode.INVALID_ARGUMENT"
    assert "data-type is 'FP32'" in typed.message()

    shaped = _error(client.infer, "simple", _pair(np.zeros((1, 8), np.int32), a))
    assert shaped.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected shape for input 'INPUT0'" in shaped.message()

    big = np.zeros((9, 16), dtype=np.int32)
    too_big = _error(client.infer, "simple", _pair(big, big))
    assert too_big.status() == "StatusCode.INVALID_ARGUMENT"
    assert "batch-size must be <= 8" in too_big.message()

    missing = _error(client.infer, "simple", _pair(a, a)[:1])
    assert missing.status() == "StatusCode.INVALID_ARGUMENT"
    assert "missing required input(s) ['INPUT1']" in missing.message()

    bad_version = _error(client.infer, "versioned", [], model_version="9")
    assert bad_version.status() == "StatusCode.NOT_FOUND"


def _stub_request(**contents: list[int]) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        entry = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        entry.contents.int_contents.extend(contents.get(name, list(range(16))))
    return request


def test_typed_contents(stub: object) -> None:
    request = _stub_request(INPUT1=[2] * 16)
    response = stub.ModelInfer(request)  # type: ignore[attr-defined]
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
    sums = np.frombuffer(response.raw_output_contents[0], dtype=np.int32)
    np.testing.assert_array_equal(sums, np.arange(16) + 2)


def test_typed_contents_errors(stub: object) -> None:
    import grpc

    def status(request: pb.ModelInferRequest) -> tuple[object, str]:
        with pytest.raises(grpc.RpcError) as error:
            stub.ModelInfer(request)  # type: ignore[attr-defined]
        return error.value.code(), error.value.details()

    mixed = _stub_request()
    mixed.raw_input_contents.append(np.zeros(16, np.int32).tobytes())
    code, message = status(mixed)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "contents field must not be specified when using raw_input_contents" in message

    short = _stub_request(INPUT0=[1, 2, 3])
    code, message = status(short)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "contents.int_contents has 3 elements" in message

    too_large = _stub_request(INPUT0=[2**31 - 1] * 15 + [0])
    too_large.inputs[0].datatype = "INT16"
    code, message = status(too_large)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "out of range for INT16" in message

    wrong_list = _stub_request()
    wrong_list.inputs[0].contents.fp32_contents.append(1.0)
    code, message = status(wrong_list)
    assert "belongs in contents.int_contents" in message

    no_data = pb.ModelInferRequest(model_name="simple")
    no_data.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    no_data.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    no_data.raw_input_contents.append(np.zeros(16, np.int32).tobytes())
    code, message = status(no_data)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "input 'INPUT1' has no data" in message

    extra = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        extra.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    extra.raw_input_contents.extend([np.zeros(16, np.int32).tobytes()] * 3)
    code, message = status(extra)
    assert "carries 3 raw_input_contents" in message

    short_raw = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        short_raw.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    short_raw.raw_input_contents.extend([b"\0" * 60, b"\0" * 64])
    code, message = status(short_raw)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "input byte size mismatch for input" in message and "Expected 64, got" in message


async def test_aio_concurrent_mlp(example_server: ServerProcess) -> None:
    model = mlp()
    async with aioclient.InferenceServerClient(example_server.grpc_url) as client:
        assert await client.is_server_ready()
        batches = [np.random.default_rng(i).random((1 + i % 4, 64), np.float32) for i in range(8)]

        async def one(data: np.ndarray) -> np.ndarray:
            tensor = aioclient.InferInput("INPUT__0", list(data.shape), "FP32")
            tensor.set_data_from_numpy(data)
            result = await client.infer("mlp", [tensor])
            output: np.ndarray = result.as_numpy("OUTPUT__0")
            return output

        results = await asyncio.gather(*(one(b) for b in batches))
        for data, output in zip(batches, results, strict=True):
            with torch.no_grad():
                expected = model(torch.from_numpy(data)).numpy()
            np.testing.assert_allclose(output, expected, rtol=1e-4, atol=1e-5)

        with pytest.raises(InferenceServerException) as error:
            await client.infer("no_such_model", [])
        assert error.value.status() == "StatusCode.NOT_FOUND"
        config = await client.get_model_config("mlp")
        assert config.config.max_batch_size == 32
