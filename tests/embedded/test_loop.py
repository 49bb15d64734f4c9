"""The synchronous API's loop thread: results, exceptions, the deadlock guard, and stopping."""

from __future__ import annotations

import asyncio

import pytest

from ptserve.embedded.loop import LoopThread


async def double(value: int) -> int:
    await asyncio.sleep(0)
    return value * 2


async def fail() -> None:
    raise ValueError("from the loop")


def test_results_exceptions_and_stop() -> None:
    thread = LoopThread()
    assert thread.running
    assert thread.run(double(21)) == 42
    assert thread.call(max, 1, 3) == 3
    with pytest.raises(ValueError, match="from the loop"):
        thread.run(fail())
    pending = asyncio.run_coroutine_threadsafe(asyncio.sleep(3600), thread.loop)
    thread.stop()
    assert not thread.running and thread.loop.is_closed()
    assert pending.cancelled()  # what still ran was cancelled, not left behind
    with pytest.raises(RuntimeError, match="closed"):
        thread.run(double(1))
    thread.stop()  # again: nothing to do


def test_a_sync_call_from_the_loop_itself_is_refused() -> None:
    thread = LoopThread()

    async def nested() -> int:
        return thread.run(double(1))

    with pytest.raises(RuntimeError, match="wait forever"):
        thread.run(nested())
    thread.stop()
