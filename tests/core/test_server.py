"""The server polls before its loop sleeps once the last request in flight is answered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import torch

from ptserve.common import datatypes
from ptserve.common.requests import InferRequest, Tensor
from ptserve.core.server import InferenceServer, ServerOptions
from ptserve.examples import SIMPLE_CONFIG, AddSub, write_model


def simple_request() -> InferRequest:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    dt = datatypes.BY_NAME["INT32"]
    return InferRequest("simple", inputs=[Tensor("INPUT0", dt, data), Tensor("INPUT1", dt, data)])


def test_the_loop_polls_after_the_last_answer(tmp_path: Path) -> None:
    write_model(tmp_path, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    options = ServerOptions(model_repositories=[tmp_path], idle_poll_us=200_000)

    async def main() -> list[bool]:
        server = InferenceServer(options)
        assert await server.start() == []
        seen = [server.idle_poll.polling]  # nothing answered yet
        await server.infer(simple_request())
        seen.append(server.idle_poll.polling)  # answered: polling for up to 200 ms
        while server.idle_poll.polling:
            await asyncio.sleep(0.01)
        # Two at once: polling once both are answered.
        results = await asyncio.gather(
            server.infer(simple_request()), server.infer(simple_request())
        )
        assert len(results) == 2
        seen.append(server.idle_poll.polling)
        await server.shutdown(5)
        return seen

    assert asyncio.run(main()) == [False, True, True]


def test_a_server_with_no_window_never_polls(tmp_path: Path) -> None:
    write_model(tmp_path, "simple", SIMPLE_CONFIG, {1: torch.jit.script(AddSub())})
    options = ServerOptions(model_repositories=[tmp_path], idle_poll_us=0)

    async def main() -> bool:
        server = InferenceServer(options)
        assert await server.start() == []
        await server.infer(simple_request())
        polling = server.idle_poll.polling
        await server.shutdown(5)
        return polling

    assert asyncio.run(main()) is False
