"""Running a request without a Task: what finishes at once is done before ``start`` returns;
what waits goes on as its futures finish, with values, exceptions and cancellation delivered
where it stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from ptserve.frontends import running as calls


async def test_a_request_that_does_not_wait_finishes_at_once() -> None:
    done: list[str] = []

    async def call() -> None:
        done.append("ran")

    assert calls.start(call()) is None
    assert done == ["ran"]


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(100):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the call did not get there")


async def test_a_request_that_waits_goes_on_as_its_futures_finish() -> None:
    loop = asyncio.get_running_loop()
    first: asyncio.Future[int] = loop.create_future()
    second: asyncio.Future[int] = loop.create_future()
    seen: list[object] = []

    async def call() -> None:
        seen.append("started")
        seen.append(await first)
        await asyncio.sleep(0)  # a bare yield to the loop
        await asyncio.sleep(0.001)  # a timer
        seen.append(await second)

    running = calls.start(call())
    assert running is not None
    assert seen == ["started"]  # ran up to its first wait, synchronously
    first.set_result(1)
    await _until(lambda: seen == ["started", 1])
    assert not running.done
    second.set_result(2)
    await _until(lambda: running.done)
    assert seen == ["started", 1, 2]


async def test_a_request_may_start_and_await_tasks_and_gather() -> None:
    """What the streaming servicer does: tasks of its own, gathered and awaited."""
    results: list[object] = []

    async def part(value: int) -> int:
        await asyncio.sleep(0.001)
        return value

    async def call() -> None:
        task = asyncio.get_running_loop().create_task(part(1))
        results.append(await task)
        results.append(await asyncio.gather(part(2), part(3)))

    running = calls.start(call())
    assert running is not None
    await _until(lambda: running.done)
    assert results == [1, [2, 3]]


async def test_exceptions_reach_the_request_where_it_waits() -> None:
    loop = asyncio.get_running_loop()
    waiting: asyncio.Future[int] = loop.create_future()
    caught: list[BaseException] = []

    async def call() -> None:
        try:
            await waiting
        except ValueError as exc:
            caught.append(exc)

    running = calls.start(call())
    assert running is not None
    waiting.set_exception(ValueError("boom"))
    await _until(lambda: running.done)
    assert [str(e) for e in caught] == ["boom"]


@pytest.mark.parametrize("where", ["future", "bare yield"])
async def test_cancelling_cancels_the_request_where_it_waits(where: str) -> None:
    loop = asyncio.get_running_loop()
    waiting: asyncio.Future[int] = loop.create_future()
    cleaned: list[str] = []

    async def call() -> None:
        try:
            if where == "future":
                await waiting
            else:
                await asyncio.sleep(0)
                await asyncio.sleep(10)
        except asyncio.CancelledError:
            cleaned.append("cancelled")
            raise
        finally:
            cleaned.append("finally")

    running = calls.start(call())
    assert running is not None
    running.cancel()  # before the call was resumed even once
    await _until(lambda: running.done)
    assert cleaned == ["cancelled", "finally"]
    running.cancel()  # a finished call: nothing happens


async def test_an_unexpected_error_ends_the_request_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    waiting: asyncio.Future[int] = loop.create_future()

    async def call() -> None:
        await waiting
        raise KeyError("escaped")

    running = calls.start(call())
    assert running is not None
    waiting.set_result(1)
    await _until(lambda: running.done)
    assert "a request failed" in caplog.text
