"""Metric state lives and dies with its model version: reloads do not make it grow."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import numpy as np
import torch

from ptserve.common import datatypes
from ptserve.common.requests import InferRequest, Tensor
from ptserve.core.metrics import LatencyRecorder, Metrics, MetricsConfig
from ptserve.core.model import ModelVersion
from ptserve.core.server import InferenceServer, ServerOptions
from ptserve.examples import SIMPLE_CONFIG, AddSub, write_model

RELOADS = 50


def alive(kind: type) -> int:
    gc.collect()
    return sum(1 for thing in gc.get_objects() if type(thing) is kind)


async def infer(server: InferenceServer) -> None:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    dt = datatypes.BY_NAME["INT32"]
    request = InferRequest(
        "simple", inputs=[Tensor("INPUT0", dt, data), Tensor("INPUT1", dt, data)]
    )
    response = await server.infer(request)
    assert response.outputs[0].data.tolist() == (data * 2).tolist()


def test_fifty_reloads_leave_the_metrics_and_the_versions_as_one_load(tmp_path: Path) -> None:
    write_model(tmp_path, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    options = ServerOptions(
        model_repositories=[tmp_path], model_control_mode="explicit", load_models=["simple"]
    )

    async def main() -> None:
        server = InferenceServer(options)
        config = MetricsConfig(summary_latencies=True, histogram_latencies=True)
        metrics = Metrics(server, config)
        assert await server.start() == []
        await infer(server)
        first = metrics.render()
        versions, recorders = alive(ModelVersion), alive(LatencyRecorder)
        assert (versions, recorders) == (1, 1)
        for _ in range(RELOADS):
            await server.load_model("simple")
            await infer(server)
        last = metrics.render()
        # One version, one recorder, and the same series as after the first load.
        assert (alive(ModelVersion), alive(LatencyRecorder)) == (versions, recorders)
        assert len(last.splitlines()) == len(first.splitlines())
        assert [line.split(" ")[0] for line in last.splitlines()] == [
            line.split(" ")[0] for line in first.splitlines()
        ]
        await server.shutdown(5)

    asyncio.run(main())
