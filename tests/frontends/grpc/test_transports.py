"""The two gRPC transports (``--grpc-transport native`` and ``aio``) through the real server.

Both serve the same guarded handlers, so everything a client can observe must be the same:
large messages (far beyond HTTP/2's 64 KiB default windows and 16 KiB frames), compressed
requests, deadlines, many calls multiplexed on one channel, long streams, status codes and
messages, the standard health service, and answers to calls in flight at shutdown. Every test
here runs once per transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.frontends.grpc.conftest import identity_name
from tests.models import write_sleepy
from tests.serverproc import ServerProcess

TRANSPORTS = ("native", "aio")
SERVICE = "/inference.GRPCInferenceService"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
UNKNOWN_MODEL = "Request for unknown model: 'no_such_model' is not found"
# Threads that only grpcio's own server starts in the server process.
GRPCIO_THREADS = ("grpc_global_tim", "event_engine")


@pytest.fixture(scope="module")
def sleepy_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("grpc-transports")
    write_sleepy(repository, "sleepy")
    return repository


@pytest.fixture(scope="module", params=TRANSPORTS)
def server(
    request: pytest.FixtureRequest, dtype_repository: Path, sleepy_repository: Path
) -> Iterator[ServerProcess]:
    """The identity models and the sleepy model, served over one transport."""
    process = ServerProcess(
        [dtype_repository, sleepy_repository], ["--grpc-transport", request.param]
    ).start()
    yield process
    process.stop()


@pytest.fixture()
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as connection:
        yield connection


@pytest.fixture()
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_url) as connection:
        yield connection


def _transport(server: ServerProcess) -> str:
    return server.args[server.args.index("--grpc-transport") + 1]


def _raw(channel: grpc.Channel, path: str) -> Any:
    """A unary method that sends and returns bytes as they are."""
    return channel.unary_unary(
        path, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )


def _tensor(module: Any, data: np.ndarray, datatype: str) -> Any:
    tensor = module.InferInput("INPUT0", list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    return tensor


def _sleepy_input(module: Any, seconds: float, value: float = 1.0) -> list[Any]:
    data = np.array([[seconds, value, value + 1, value + 2]], dtype=np.float32)
    return [_tensor(module, data, "FP32")]


def _thread_names(pid: int) -> set[str]:
    names = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            names.add((task / "comm").read_text().strip())
    return names


# --- the transport in use ---------------------------------------------------------------------


def test_the_flag_selects_the_transport(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    """Without this, both parametrizations could silently test the same transport: only grpcio's
    server starts grpcio's polling threads in the server process."""
    assert client.is_server_ready()
    assert server.process is not None
    grpcio_threads = _thread_names(server.process.pid) & set(GRPCIO_THREADS)
    assert bool(grpcio_threads) == (_transport(server) == "aio"), grpcio_threads


# --- large messages ---------------------------------------------------------------------------


def test_large_fp32_tensor_round_trip(client: grpcclient.InferenceServerClient) -> None:
    """24 MiB each way: many windows and frames, in both directions, on one stream."""
    data = np.random.default_rng(1).standard_normal((1, 6 * 2**20), dtype=np.float32)
    result = client.infer(identity_name("FP32"), [_tensor(grpcclient, data, "FP32")])
    output = result.as_numpy("OUTPUT0")
    assert output.shape == data.shape
    assert output.tobytes() == data.tobytes()


async def test_large_uint8_tensors_interleaved(server: ServerProcess) -> None:
    """Four 8 MiB calls at once on one channel: their DATA frames share the connection window
    and interleave both ways, and each answer still carries its own bytes."""
    rng = np.random.default_rng(2)
    datas = [rng.integers(0, 256, (1, 8 * 2**20), dtype=np.uint8) for _ in range(4)]
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        results = await asyncio.gather(
            *(
                client.infer(identity_name("UINT8"), [_tensor(aioclient, data, "UINT8")])
                for data in datas
            )
        )
    for data, result in zip(datas, results, strict=True):
        assert result.as_numpy("OUTPUT0").tobytes() == data.tobytes()


# --- compression ------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_request(client: grpcclient.InferenceServerClient, algorithm: str) -> None:
    """Compressed messages are decompressed by the transport before the handler parses them."""
    data = (np.arange(2**18, dtype=np.float32) % 7).reshape(1, -1)  # 1 MiB, compresses well
    result = client.infer(
        identity_name("FP32"), [_tensor(grpcclient, data, "FP32")], compression_algorithm=algorithm
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


async def test_compressed_request_aio(server: ServerProcess) -> None:
    data = np.arange(4096, dtype=np.int64).reshape(1, -1) % 3
    tensor = _tensor(aioclient, data, "INT64")
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        result = await client.infer(identity_name("INT64"), [tensor], compression_algorithm="gzip")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_compressed_stream(client: grpcclient.InferenceServerClient) -> None:
    """Every message of a compressed stream is compressed on its own."""
    replies: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(
        callback=lambda result, error: replies.put((result, error)), compression_algorithm="gzip"
    )
    try:
        for index in range(10):
            data = np.full((1, 1024), index, dtype=np.int32)
            client.async_stream_infer(
                identity_name("INT32"), [_tensor(grpcclient, data, "INT32")], request_id=str(index)
            )
        got = [replies.get(timeout=30) for _ in range(10)]
    finally:
        client.stop_stream()
    assert [error for _, error in got] == [None] * 10
    for result, _ in got:
        index = int(result.get_response().id)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 1024), index))


# --- deadlines --------------------------------------------------------------------------------


def test_deadline_exceeded_then_next_call_answers(
    client: grpcclient.InferenceServerClient,
) -> None:
    """A call past its deadline ends promptly with DEADLINE_EXCEEDED; the server is not left
    stuck and answers the next call correctly."""
    started = time.monotonic()
    with pytest.raises(InferenceServerException) as expired:
        client.infer("sleepy", _sleepy_input(grpcclient, 1.0), client_timeout=0.2)
    assert time.monotonic() - started < 0.8
    assert expired.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    result = client.infer("sleepy", _sleepy_input(grpcclient, 0.0, 5.0), client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[0.0, 10.0, 12.0, 14.0]])


async def test_deadline_exceeded_aio(server: ServerProcess) -> None:
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as expired:
            await client.infer("sleepy", _sleepy_input(aioclient, 1.0), client_timeout=0.2)
        assert time.monotonic() - started < 0.8
        assert expired.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        result = await client.infer("sleepy", _sleepy_input(aioclient, 0.0, 2.0), client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[0.0, 4.0, 6.0, 8.0]])


def test_raw_stub_deadline(channel: grpc.Channel) -> None:
    """A deadline on the raw stub ends the call with DEADLINE_EXCEEDED and the channel stays
    usable. (The client enforces it too; that the server itself ends an expired call is checked
    over raw HTTP/2 in native/test_connection.py.)"""
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    request = pb.ModelInferRequest(model_name="sleepy")
    tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([1.0, 1.0, 2.0, 3.0])
    with pytest.raises(grpc.RpcError) as expired:
        stub.ModelInfer(request, timeout=0.2)
    assert expired.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live


# --- many calls on one channel ----------------------------------------------------------------


async def test_concurrent_calls_on_one_channel(server: ServerProcess) -> None:
    """200 calls in flight at once on one HTTP/2 connection: each answer goes to its own call."""
    datas = [np.arange(64, dtype=np.int64).reshape(1, 64) + 1000 * i for i in range(200)]
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        results = await asyncio.gather(
            *(
                client.infer(
                    identity_name("INT64"), [_tensor(aioclient, data, "INT64")], request_id=str(i)
                )
                for i, data in enumerate(datas)
            )
        )
    for index, (data, result) in enumerate(zip(datas, results, strict=True)):
        assert result.get_response().id == str(index)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


# --- streams ----------------------------------------------------------------------------------


def _stream_data(index: int) -> np.ndarray:
    return np.arange(8, dtype=np.int32).reshape(1, 8) * index + index


def test_long_stream(client: grpcclient.InferenceServerClient) -> None:
    """300 requests on one stream: 300 answers, each matched to its request by id."""
    replies: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    try:
        for index in range(300):
            tensor = _tensor(grpcclient, _stream_data(index), "INT32")
            client.async_stream_infer(identity_name("INT32"), [tensor], request_id=str(index))
        got = [replies.get(timeout=30) for _ in range(300)]
    finally:
        client.stop_stream()
    assert [error for _, error in got if error is not None] == []
    by_id = {result.get_response().id: result for result, _ in got}
    assert sorted(by_id, key=int) == [str(i) for i in range(300)]
    for key, result in by_id.items():
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), _stream_data(int(key)))


async def test_long_stream_aio(server: ServerProcess) -> None:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        for index in range(300):
            yield {
                "model_name": identity_name("INT32"),
                "inputs": [_tensor(aioclient, _stream_data(index), "INT32")],
                "request_id": str(index),
            }

    by_id: dict[str, Any] = {}
    errors: list[Any] = []
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        async for result, error in client.stream_infer(requests()):
            if error is not None:
                errors.append(error)
            else:
                by_id[result.get_response().id] = result
            if len(by_id) + len(errors) == 300:
                break
    assert errors == []
    assert sorted(by_id, key=int) == [str(i) for i in range(300)]
    for key, result in by_id.items():
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), _stream_data(int(key)))


async def test_large_messages_on_a_stream(server: ServerProcess) -> None:
    """Stream messages larger than a stream's whole flow-control window, several in a row: the
    window must be reopened as the messages are taken, both ways."""
    rng = np.random.default_rng(3)
    datas = [rng.standard_normal((1, 3 * 2**20), dtype=np.float32) for _ in range(3)]  # 12 MiB

    async def requests() -> AsyncIterator[dict[str, Any]]:
        for index, data in enumerate(datas):
            yield {
                "model_name": identity_name("FP32"),
                "inputs": [_tensor(aioclient, data, "FP32")],
                "request_id": str(index),
            }

    by_id: dict[str, Any] = {}
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        async for result, error in client.stream_infer(requests()):
            assert error is None
            by_id[result.get_response().id] = result
            if len(by_id) == len(datas):
                break
    assert sorted(by_id) == ["0", "1", "2"]
    for key, result in by_id.items():
        assert result.as_numpy("OUTPUT0").tobytes() == datas[int(key)].tobytes()


# --- status codes and messages ----------------------------------------------------------------


def test_unknown_model_not_found(
    client: grpcclient.InferenceServerClient, channel: grpc.Channel
) -> None:
    """The handlers' errors reach the client with the same code and text on both transports."""
    data = np.zeros((1, 4), dtype=np.float32)
    with pytest.raises(InferenceServerException) as unknown:
        client.infer("no_such_model", [_tensor(grpcclient, data, "FP32")])
    assert unknown.value.status() == "StatusCode.NOT_FOUND"
    assert unknown.value.message() == UNKNOWN_MODEL
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    with pytest.raises(grpc.RpcError) as metadata:
        stub.ModelMetadata(pb.ModelMetadataRequest(name="no_such_model"), timeout=10)
    assert metadata.value.code() == grpc.StatusCode.NOT_FOUND
    assert metadata.value.details() == UNKNOWN_MODEL


async def test_unknown_model_not_found_aio(server: ServerProcess) -> None:
    data = np.zeros((1, 4), dtype=np.float32)
    async with aioclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as unknown:
            await client.infer("no_such_model", [_tensor(aioclient, data, "FP32")])
    assert unknown.value.status() == "StatusCode.NOT_FOUND"
    assert unknown.value.message() == UNKNOWN_MODEL


def test_unparsable_request_invalid_argument(channel: grpc.Channel) -> None:
    """Bytes that are not a ModelInferRequest: INVALID_ARGUMENT naming the message type."""
    with pytest.raises(grpc.RpcError) as refused:
        _raw(channel, f"{SERVICE}/ModelInfer")(b"\xff\xff\xff\xff", timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith(
        "the request is not a valid inference.ModelInferRequest message"
    )
    assert _raw(channel, HEALTH_CHECK)(b"", timeout=10) == b"\x08\x01"  # the channel still works


def test_unparsable_stream_message_invalid_argument(channel: grpc.Channel) -> None:
    """Inside a stream, an unparsable message ends the stream with INVALID_ARGUMENT, after the
    answers to the valid messages before it."""
    request = pb.ModelInferRequest(model_name=identity_name("INT32"), id="ok")
    tensor = request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 2])
    tensor.contents.int_contents.extend([4, 5])
    stream = channel.stream_stream(
        f"{SERVICE}/ModelStreamInfer",
        request_serializer=lambda b: b,
        response_deserializer=pb.ModelStreamInferResponse.FromString,
    )
    replies: list[Any] = []
    with pytest.raises(grpc.RpcError) as refused:
        for reply in stream(iter([request.SerializeToString(), b"\xff\xff\xff"]), timeout=10):
            replies.append(reply)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "inference.ModelInferRequest" in refused.value.details()
    assert [reply.infer_response.id for reply in replies] == ["ok"]
    assert replies[0].error_message == ""


def test_unknown_method_unimplemented(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as unknown:
        _raw(channel, f"{SERVICE}/NoSuchMethod")(b"", timeout=10)
    assert unknown.value.code() == grpc.StatusCode.UNIMPLEMENTED


# --- health -----------------------------------------------------------------------------------


def test_health_check_serving(channel: grpc.Channel) -> None:
    """The standard health service, by hand: an empty HealthCheckRequest asks about the server,
    and status 1 (SERVING) is the response's only field."""
    check = _raw(channel, HEALTH_CHECK)
    assert check(b"", timeout=10) == b"\x08\x01"
    name = b"inference.GRPCInferenceService"
    assert check(b"\x0a" + bytes([len(name)]) + name, timeout=10) == b"\x08\x01"
    with pytest.raises(grpc.RpcError) as unknown:
        check(b"\x0a\x05other", timeout=10)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


def test_truncated_health_request_invalid_argument(channel: grpc.Channel) -> None:
    """A service name whose length runs past the end of the message does not parse (protobuf
    refuses it as truncated), so it must be refused like any other unparsable request rather
    than read as a shorter name."""
    with pytest.raises(grpc.RpcError) as refused:
        _raw(channel, HEALTH_CHECK)(b"\x0a\x05ab", timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "grpc.health.v1.HealthCheckRequest" in refused.value.details()


# --- shutdown ---------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_call_in_flight_answered_at_shutdown(sleepy_repository: Path, transport: str) -> None:
    """SIGINT while a call runs: new calls are refused, the running one still gets its answer,
    and the server exits cleanly."""
    server = ServerProcess([sleepy_repository], ["--grpc-transport", transport]).start()
    try:
        outcome: list[Any] = []

        def call() -> None:
            with grpcclient.InferenceServerClient(server.grpc_url) as client:
                try:
                    result = client.infer(
                        "sleepy", _sleepy_input(grpcclient, 1.0, 3.0), client_timeout=30
                    )
                    outcome.append(result.as_numpy("OUTPUT0"))
                except InferenceServerException as exc:
                    outcome.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(0.3)  # the call is running
        stopping: list[int] = []
        stopper = threading.Thread(target=lambda: stopping.append(server.stop(signal.SIGINT)))
        stopper.start()
        deadline = time.monotonic() + 5
        while server.status("/v2/health/ready") == 200:
            assert time.monotonic() < deadline, "the server never started draining"
            time.sleep(0.02)
        with (
            grpcclient.InferenceServerClient(server.grpc_url) as late,
            pytest.raises(InferenceServerException) as refused,
        ):
            late.infer("sleepy", _sleepy_input(grpcclient, 0.0), client_timeout=10)
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        caller.join(30)
        stopper.join(60)
    finally:
        server.stop()
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    np.testing.assert_array_equal(outcome[0], [[2.0, 6.0, 8.0, 10.0]])
    assert stopping == [0], server.log()
