"""The default scheduler: requests run on the caller when an instance is idle and fast."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import numpy as np

from ptserve.backends.base import BackendInstance, BatchResult, ExecutionTimes
from ptserve.core.prepared import OutputMap, PreparedRequest
from ptserve.core.stats import ModelStats
from ptserve.scheduling.default import DIRECT_LIMIT_NS, DefaultScheduler
from ptserve.scheduling.work import WorkItem
from ptserve.scheduling.worker import InstanceWorker

T = TypeVar("T")


class Recorder(BackendInstance):
    """Answers every request with the identity of the thread that ran it."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.threads: list[int] = []

    def execute(self, batch: Sequence[PreparedRequest]) -> BatchResult:
        self.threads.append(threading.get_ident())
        time.sleep(self.delay)
        results: list[OutputMap | Exception] = [
            {"OUT": np.array([threading.get_ident()], dtype=np.int64)} for _ in batch
        ]
        return BatchResult(results, ExecutionTimes())  # type: ignore[arg-type]


def request() -> PreparedRequest:
    return PreparedRequest("", {"IN": np.zeros(1, np.float32)}, 1, ("OUT",))


def setup(
    delay: float = 0.0, direct: bool = True
) -> tuple[DefaultScheduler, InstanceWorker, Recorder]:
    stats = ModelStats()
    scheduler = DefaultScheduler(stats)
    instance = Recorder(delay)
    worker = InstanceWorker("probe", 0, instance, scheduler, stats)
    scheduler.attach([worker], direct=direct)
    worker.start()
    return scheduler, worker, instance


async def run(scheduler: DefaultScheduler) -> int:
    item = WorkItem(request(), asyncio.get_running_loop())
    scheduler.enqueue(item)
    return int((await item.future)["OUT"][0])


def finish(scheduler: DefaultScheduler, worker: InstanceWorker, main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on a fresh event loop, then stop the worker."""
    try:
        return asyncio.run(main)
    finally:
        scheduler.close(1)
        worker.join(5)


async def one_by_one(scheduler: DefaultScheduler, count: int = 3, pause: float = 0.0) -> list[int]:
    """The threads that ran ``count`` requests sent one after the other."""
    threads = []
    for _ in range(count):
        threads.append(await run(scheduler))
        await asyncio.sleep(pause)
    return threads


def test_first_request_goes_to_the_worker_then_fast_ones_run_on_the_loop() -> None:
    scheduler, worker, _ = setup()
    # The pause lets the worker let go of the instance after answering.
    threads = finish(scheduler, worker, one_by_one(scheduler, pause=0.01))
    loop_thread = threading.get_ident()
    # Nothing is known of the model before its first execution, so that one runs on the worker.
    assert threads[0] == worker.thread.ident
    assert threads[1:] == [loop_thread, loop_thread]
    assert worker.average_ns < DIRECT_LIMIT_NS


def test_slow_executions_stay_on_the_worker() -> None:
    scheduler, worker, _ = setup(delay=2 * DIRECT_LIMIT_NS / 1e9)
    threads = finish(scheduler, worker, one_by_one(scheduler))
    assert threads == [worker.thread.ident] * 3
    assert worker.average_ns > DIRECT_LIMIT_NS


def test_without_direct_runs_everything_goes_to_the_worker() -> None:
    scheduler, worker, _ = setup(direct=False)
    threads = finish(scheduler, worker, one_by_one(scheduler))
    assert threads == [worker.thread.ident] * 3


def test_a_busy_instance_makes_the_request_queue() -> None:
    scheduler, worker, _ = setup()

    async def main() -> int:
        await run(scheduler)  # the first, measured, execution
        with worker.claim:  # the instance is busy: the request must wait for the worker
            item = WorkItem(request(), asyncio.get_running_loop())
            scheduler.enqueue(item)
            await asyncio.sleep(0.05)
            assert not item.future.done()
        return int((await item.future)["OUT"][0])

    assert finish(scheduler, worker, main()) == worker.thread.ident
