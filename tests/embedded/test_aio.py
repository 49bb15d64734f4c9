"""``ptserve.AsyncServer``: the in-process API on the caller's running event loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from ptserve import AsyncServer, InferenceError, Status
from ptserve.examples import SIMPLE_CONFIG, AddSub, write_model

A = np.arange(16, dtype=np.int32).reshape(1, 16)


@pytest.fixture
def simple_repository(tmp_path: Path) -> Path:
    write_model(tmp_path, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    return tmp_path


async def test_infer_concurrently_with_numpy_and_torch(simple_repository: Path) -> None:
    async with AsyncServer(simple_repository) as server:
        simple = server.model("simple")
        results = await asyncio.gather(
            *(simple.infer({"INPUT0": A * i, "INPUT1": A}) for i in range(8)),
            simple.infer({"INPUT0": torch.from_numpy(A), "INPUT1": torch.from_numpy(A)}),
        )
        for i, outputs in enumerate(results[:8]):
            np.testing.assert_array_equal(outputs["OUTPUT0"], A * i + A)
        assert isinstance(results[8]["OUTPUT0"], torch.Tensor)
        assert torch.equal(results[8]["OUTPUT1"], torch.zeros(1, 16, dtype=torch.int32))
        stats = simple.statistics()["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == 9
        assert server.statistics()["model_stats"][0]["name"] == "simple"


async def test_health_metadata_config_and_errors(simple_repository: Path) -> None:
    async with AsyncServer(simple_repository) as server:
        assert server.live and server.ready
        assert server.metadata()["name"] == "ptserve"
        assert server.model("simple").ready() and server.model_ready("simple", 1)
        assert server.model("simple", 1).metadata()["versions"] == ["1"]
        assert server.model_metadata("simple")["platform"] == "pytorch_libtorch"
        assert server.model("simple").config()["max_batch_size"] == 8
        assert server.model_config("simple")["name"] == "simple"
        assert server.repository_index()[0]["state"] == "READY"
        with pytest.raises(InferenceError) as caught:
            await server.infer("simple", {"INPUT0": A, "INPUT1": A.astype(np.float32)})
        assert caught.value.status is Status.INVALID_ARGUMENT
        assert "expects 'INT32'" in caught.value.message
        with pytest.raises(InferenceError) as caught:
            await server.model("simple", version=7).infer({"INPUT0": A, "INPUT1": A})
        assert caught.value.status is Status.NOT_FOUND
        assert "'simple' version 7 is not found" in caught.value.message
        with pytest.raises(InferenceError) as caught:
            server.model("other").metadata()
        assert caught.value.status is Status.NOT_FOUND


async def test_load_and_unload(simple_repository: Path) -> None:
    async with AsyncServer(simple_repository, model_control_mode="explicit") as server:
        assert not server.model_ready("simple")
        await server.load_model("simple")
        assert server.model("simple").ready()
        outputs = await server.model("simple").infer({"INPUT0": A, "INPUT1": A})
        np.testing.assert_array_equal(outputs["OUTPUT1"], np.zeros_like(A))
        config = server.model_config("simple")
        config["max_batch_size"] = 4
        await server.load_model("simple", config=config)  # a dict, as JSON for the load API
        assert server.model_config("simple")["max_batch_size"] == 4
        await server.unload_model("simple")
        assert not server.model_ready("simple")


async def test_close_leaves_nothing_running(simple_repository: Path) -> None:
    before = set(threading.enumerate())
    server = await AsyncServer(simple_repository).start()
    await server.model("simple").infer({"INPUT0": A, "INPUT1": A})
    await server.close()
    assert not server.live and not server.ready
    # The caller's loop keeps its own executor threads (``asyncio_N``); nothing else is left.
    left = {t for t in set(threading.enumerate()) - before if not t.name.startswith("asyncio_")}
    assert not left, left
    with pytest.raises(InferenceError) as caught:
        await server.model("simple").infer({"INPUT0": A, "INPUT1": A})
    assert caught.value.status is Status.UNAVAILABLE
