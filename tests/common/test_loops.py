"""The running loop, cached per thread; polling before the loop sleeps."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import uvloop

from ptserve.common.loops import IdlePoll, running_loop


def test_outside_a_loop_it_raises_as_asyncio_does() -> None:
    with pytest.raises(RuntimeError):
        running_loop()


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run])
def test_each_new_loop_on_a_thread_is_found(run: object) -> None:
    async def both() -> tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
        return running_loop(), asyncio.get_running_loop()

    for _ in range(3):  # a thread that runs one loop after another
        ours, theirs = run(both())  # type: ignore[operator]
        assert ours is theirs


def test_the_loop_is_looked_up_once_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    lookups = []
    real = asyncio.get_running_loop

    def counted() -> asyncio.AbstractEventLoop:
        lookups.append(1)
        return real()

    async def many() -> None:
        for _ in range(100):
            assert running_loop() is real()

    monkeypatch.setattr("ptserve.common.loops.asyncio.get_running_loop", counted)
    asyncio.run(many())
    assert len(lookups) == 1


def test_threads_running_loops_at_once_get_their_own() -> None:
    found: dict[str, bool] = {}
    barrier = threading.Barrier(2)

    def runner(name: str) -> None:
        async def check() -> bool:
            barrier.wait(5)  # both loops run now
            return all(running_loop() is asyncio.get_running_loop() for _ in range(3))

        found[name] = asyncio.run(check())

    threads = [threading.Thread(target=runner, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert found == {"a": True, "b": True}


def test_a_loop_moved_to_another_thread_is_not_answered_to_its_first_thread() -> None:
    loop = asyncio.new_event_loop()
    try:
        first = loop.run_until_complete(_found())
        assert first is loop

        moved: list[asyncio.AbstractEventLoop] = []
        other = threading.Thread(target=lambda: moved.append(loop.run_until_complete(_found())))
        other.start()
        other.join(10)
        assert moved == [loop]
        # This thread now runs a second loop: it must be answered that one.
        assert asyncio.run(_found()) is not loop
    finally:
        loop.close()


async def _found() -> asyncio.AbstractEventLoop:
    return running_loop()


class _NeverBusy:
    """``IdlePoll``'s ``busy``: no request is ever in flight; counts how often it is asked
    (once per poll, i.e. per pass of the loop)."""

    def __init__(self) -> None:
        self.polls = 0

    def __call__(self) -> bool:
        self.polls += 1
        return False


def test_after_settling_the_loop_polls_until_the_window_ends() -> None:
    idle = _NeverBusy()

    async def main() -> tuple[int, int, bool]:
        poll = IdlePoll(40_000_000, idle)  # 40 ms
        poll.settle()
        assert poll.polling
        await asyncio.sleep(0.02)  # the loop does not sleep 20 ms: it polls all along
        during = idle.polls
        await asyncio.sleep(0.06)
        after = idle.polls
        await asyncio.sleep(0.02)
        return during, idle.polls - after, poll.polling

    during, since_the_end, polling = uvloop.run(main())
    assert during > 20  # one poll per pass of the loop: many within 20 ms
    assert since_the_end == 0 and not polling


def test_a_request_in_flight_stops_the_polling() -> None:
    async def main() -> bool:
        poll = IdlePoll(1_000_000_000, lambda: True)
        poll.settle()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return poll.polling

    assert uvloop.run(main()) is False


def test_settling_again_extends_the_window_without_a_second_poller() -> None:
    idle = _NeverBusy()

    async def main() -> tuple[bool, float]:
        poll = IdlePoll(30_000_000, idle)
        poll.settle()
        await asyncio.sleep(0.02)
        poll.settle()  # 30 ms from now
        before = idle.polls
        await asyncio.sleep(0)
        one_pass = idle.polls - before
        start = time.monotonic()
        while poll.polling:
            await asyncio.sleep(0.001)
        return one_pass == 1, time.monotonic() - start

    single, remaining = uvloop.run(main())
    assert single
    assert 0.02 < remaining < 1.0


def test_a_window_of_zero_never_polls() -> None:
    async def main() -> bool:
        poll = IdlePoll(0, lambda: False)
        poll.settle()
        return poll.polling

    assert uvloop.run(main()) is False


def test_a_loop_that_stopped_while_polling_leaves_no_poller_behind() -> None:
    """An embedded server stopped mid-window and run again on a new loop polls there."""
    idle = _NeverBusy()
    poll = IdlePoll(1_000_000_000, idle)

    async def settle_and_wait(seconds: float) -> bool:
        poll.settle()
        await asyncio.sleep(seconds)
        return poll.polling

    assert uvloop.run(settle_and_wait(0))  # the loop ends while polling: its callback is dropped
    before = idle.polls
    assert uvloop.run(settle_and_wait(0.005))
    assert idle.polls - before > 3  # the second loop polled all along
