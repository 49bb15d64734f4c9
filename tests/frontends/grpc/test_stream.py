"""ModelStreamInfer: results and errors on one stream that stays open."""

from __future__ import annotations

import queue
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from tests.serverproc import ServerProcess


def _inputs(module: Any, value: int) -> list[Any]:
    data = np.full((1, 16), value, dtype=np.int32)
    inputs = [
        module.InferInput("INPUT0", [1, 16], "INT32"),
        module.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    return inputs


def test_stream_keeps_going_after_an_error(client: grpcclient.InferenceServerClient) -> None:
    replies: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    try:
        client.async_stream_infer("simple", _inputs(grpcclient, 1), request_id="a")
        client.async_stream_infer("no_such_model", _inputs(grpcclient, 2), request_id="b")
        client.async_stream_infer("simple", _inputs(grpcclient, 3), request_id="c")
        got = [replies.get(timeout=60) for _ in range(3)]
    finally:
        client.stop_stream()
    results = {r.get_response().id: r for r, e in got if e is None}
    errors = [e for r, e in got if e is not None]
    assert sorted(results) == ["a", "c"]
    np.testing.assert_array_equal(results["a"].as_numpy("OUTPUT0"), np.full((1, 16), 2))
    np.testing.assert_array_equal(results["c"].as_numpy("OUTPUT0"), np.full((1, 16), 6))
    assert len(errors) == 1
    assert "Request for unknown model: 'no_such_model' is not found" in errors[0].message()


def test_stream_final_response_flag(client: grpcclient.InferenceServerClient) -> None:
    replies: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: replies.put((result, error)))
    try:
        client.async_stream_infer(
            "simple", _inputs(grpcclient, 1), enable_empty_final_response=True
        )
        result, error = replies.get(timeout=60)
    finally:
        client.stop_stream()
    assert error is None
    assert result.get_response().parameters["triton_final_response"].bool_param is True


async def test_aio_stream(example_server: ServerProcess) -> None:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        for index in range(4):
            yield {
                "model_name": "simple",
                "inputs": _inputs(aioclient, index),
                "request_id": str(index),
            }
        yield {"model_name": "simple", "inputs": _inputs(aioclient, 1)[:1], "request_id": "bad"}

    async with aioclient.InferenceServerClient(example_server.grpc_url) as client:
        seen: dict[str, Any] = {}
        errors: list[Any] = []
        async for result, error in client.stream_infer(requests()):
            if error is not None:
                errors.append(error)
            else:
                seen[result.get_response().id] = result
            if len(seen) + len(errors) == 5:
                break
    assert sorted(seen) == ["0", "1", "2", "3"]
    for key, result in seen.items():
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2 * int(key)))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16)))
    assert len(errors) == 1
    assert "missing required input(s) ['INPUT1']" in errors[0].message()
