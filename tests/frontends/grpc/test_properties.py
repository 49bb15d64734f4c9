"""Hostile gRPC input: whatever a ModelInferRequest holds, the decoder answers with a client
error or a well-formed request; through the real server, garbage (including bytes that are not
protobuf at all) gets an error status naming the problem and never disturbs valid requests sent
alongside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from ptserve.common.errors import ServerError, Status
from ptserve.core.shared_memory import SharedMemoryRegistry
from ptserve.frontends.grpc import convert
from tests.frontends.grpc.strategies import check_decode, infer_requests, shm_registry
from tests.serverproc import ServerProcess

# Codes a client may see for its own mistakes; INTERNAL and UNKNOWN would mean a bug here.
CLIENT_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.UNAVAILABLE,  # shared memory is off on this server
}
SERVICE = "/inference.GRPCInferenceService/"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedMemoryRegistry]:
    registry = shm_registry(tmp_path_factory.mktemp("shm"))
    yield registry
    registry.close()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message=infer_requests())
def test_decoder_never_fails_uncleanly(message: Any, registry: SharedMemoryRegistry) -> None:
    check_decode(message, registry)


@pytest.fixture(scope="module")
def server(example_repository: Path) -> Iterator[ServerProcess]:
    """A server of its own, so that the garbage does not show in other tests' statistics."""
    with ServerProcess([example_repository]) as process:
        yield process


@pytest.fixture(scope="module")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_url) as connection:
        yield connection


def valid_request(value: int, request_id: str) -> Any:
    message = pb.ModelInferRequest(model_name="simple", id=request_id)
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    data = np.full(16, value, np.int32).tobytes()
    message.raw_input_contents.extend([data, data])
    return message


def check_valid_reply(reply: Any, value: int) -> None:
    assert reply.model_name == "simple"
    out = np.frombuffer(reply.raw_output_contents[0], np.int32)
    assert out.tolist() == [2 * value] * 16


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(garbage=st.lists(infer_requests(), min_size=8, max_size=12))
def test_garbage_beside_valid_requests(garbage: list[Any], channel: grpc.Channel) -> None:
    """Garbage and valid requests in flight together, unary and on one stream."""
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    for message in garbage:
        message.model_name = "simple"
    calls = []
    for index, message in enumerate(garbage):
        calls.append((None, stub.ModelInfer.future(message, timeout=30)))
        calls.append((index, stub.ModelInfer.future(valid_request(index, f"v{index}"), timeout=30)))
    for value, call in calls:
        if value is not None:
            check_valid_reply(call.result(), value)
        elif call.exception() is not None:
            assert call.code() in CLIENT_CODES, call.details()
            assert call.details()
    stream: list[Any] = []
    for index, message in enumerate(garbage):
        message.id = f"g{index}"
        stream += [message, valid_request(index, f"v{index}")]
    replies = list(stub.ModelStreamInfer(iter(stream), timeout=60))
    assert len(replies) == len(stream)
    for reply in replies:
        request_id = reply.infer_response.id
        if request_id.startswith("v"):
            assert not reply.error_message
            check_valid_reply(reply.infer_response, int(request_id[1:]))
        elif reply.error_message:
            assert "internal error" not in reply.error_message


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.binary(min_size=1, max_size=64),
    method=st.sampled_from(["ModelInfer", "RepositoryIndex", "ModelConfig"]),
)
def test_bytes_that_are_not_protobuf(data: bytes, method: str, channel: grpc.Channel) -> None:
    """Random bytes as the serialized request: an error status (or an answer, when the bytes
    happen to parse), and the server keeps serving."""
    call = channel.unary_unary(
        SERVICE + method, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    try:
        call(data, timeout=10)
    except grpc.RpcError as exc:
        assert exc.code() in CLIENT_CODES, exc.details()
        assert exc.details()
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    check_valid_reply(stub.ModelInfer(valid_request(7, "after"), timeout=30), 7)


def test_unparsable_messages_are_invalid_argument(channel: grpc.Channel) -> None:
    for method in ("ModelInfer", "ServerLive", "LogSettings"):
        call = channel.unary_unary(
            SERVICE + method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        with pytest.raises(grpc.RpcError) as failure:
            call(b"\xff\xff\xff\xff", timeout=10)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "is not a valid inference." in str(failure.value.details())
    health = channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.RpcError) as failure:
        health(b"\x0f", timeout=10)
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # A stream with one garbled message ends with INVALID_ARGUMENT after the valid ones.
    stream = channel.stream_stream(
        SERVICE + "ModelStreamInfer",
        request_serializer=lambda b: b,
        response_deserializer=pb.ModelStreamInferResponse.FromString,
    )
    with pytest.raises(grpc.RpcError) as failure:
        list(stream(iter([valid_request(1, "v1").SerializeToString(), b"\xff\xff"]), timeout=30))
    assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    check_valid_reply(stub.ModelInfer(valid_request(3, "after"), timeout=30), 3)


@pytest.mark.parametrize(
    ("datatype", "shape", "raw"),
    [
        ("FP32", [0, 2**62, 2**62], b""),  # no elements, but beyond what numpy can address
        ("BYTES", [0, 2**62, 2**62], b""),
        ("BYTES", [2**40], b"\x00\x00\x00\x00"),  # would allocate 8 TB before reading one
    ],
)
def test_huge_shapes_are_refused(
    datatype: str, shape: list[int], raw: bytes, registry: SharedMemoryRegistry
) -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="INPUT0", datatype=datatype, shape=shape)
    message.raw_input_contents.append(raw)
    with pytest.raises(ServerError) as failure:
        convert.decode_request(message, registry)
    assert failure.value.status == Status.INVALID_ARGUMENT
    assert "INPUT0" in failure.value.message
