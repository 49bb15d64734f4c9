"""Instance workers and their pool: with the default scheduler a request runs on the caller
(inline) when an instance is idle and its executions are short, else it is queued."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import numpy as np
import pytest

from ptserve.backends.base import BackendInstance
from ptserve.common.errors import ServerError
from ptserve.common.prepared import BatchResult, ExecutionTimes, OutputMap, PreparedRequest
from ptserve.common.stats import ModelStats
from ptserve.scheduling.default import DefaultScheduler
from ptserve.scheduling.work import WorkItem
from ptserve.scheduling.worker import InstanceWorker, WorkerPool, inline_limit_ns

LIMIT_NS = 500_000  # the default MAX_INLINE_EXECUTION_US
ALWAYS_SHORT_NS = 60 * 10**9  # a limit no measured execution reaches

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


def setup(delay: float = 0.0, inline_ns: int = LIMIT_NS) -> tuple[WorkerPool, InstanceWorker]:
    stats = ModelStats()
    scheduler = DefaultScheduler(stats)
    worker = InstanceWorker("probe", 0, Recorder(delay), scheduler, stats, inline_ns)
    pool = WorkerPool(scheduler, [worker])
    pool.start()
    return pool, worker


async def run(pool: WorkerPool) -> int:
    item = WorkItem(request(), asyncio.get_running_loop())
    pool.submit(item)
    return int((await item.future)["OUT"][0])


def finish(pool: WorkerPool, main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on a fresh event loop, then stop the worker."""
    try:
        return asyncio.run(main)
    finally:
        pool.stop("probe", 5)


async def one_by_one(pool: WorkerPool, count: int = 3, pause: float = 0.0) -> list[int]:
    """The threads that ran ``count`` requests sent one after the other."""
    threads = []
    for _ in range(count):
        threads.append(await run(pool))
        await asyncio.sleep(pause)
    return threads


def test_first_request_goes_to_the_worker_then_fast_ones_run_on_the_loop() -> None:
    pool, worker = setup()
    # The pause lets the worker let go of the instance after answering.
    threads = finish(pool, one_by_one(pool, pause=0.01))
    loop_thread = threading.get_ident()
    # Nothing is known of the model before its first execution, so that one runs on the worker.
    assert threads[0] == worker.thread.ident
    assert threads[1:] == [loop_thread, loop_thread]
    assert worker.average_ns < LIMIT_NS


def test_slow_executions_stay_on_the_worker() -> None:
    pool, worker = setup(delay=2 * LIMIT_NS / 1e9)
    threads = finish(pool, one_by_one(pool))
    assert threads == [worker.thread.ident] * 3
    assert worker.average_ns > LIMIT_NS


def test_without_inline_runs_everything_goes_to_the_worker() -> None:
    pool, worker = setup(inline_ns=0)
    threads = finish(pool, one_by_one(pool, pause=0.01))
    assert threads == [worker.thread.ident] * 3


def test_a_busy_instance_makes_the_request_queue() -> None:
    pool, worker = setup()

    async def main() -> int:
        await run(pool)  # the first, measured, execution
        with worker.claim:  # the instance is busy: the request must wait for the worker
            item = WorkItem(request(), asyncio.get_running_loop())
            pool.submit(item)
            await asyncio.sleep(0.05)
            assert not item.future.done()
        return int((await item.future)["OUT"][0])

    assert finish(pool, main()) == worker.thread.ident


def test_a_queued_request_is_not_overtaken() -> None:
    """While a request waits in the queue, a new one queues behind it instead of running
    inline ahead of it, though the instance is free by the time it arrives."""
    pool, worker = setup()

    async def main() -> list[int]:
        await run(pool)
        loop = asyncio.get_running_loop()
        with worker.claim:
            first = WorkItem(request(), loop)
            pool.submit(first)  # queued: the instance is busy
            await asyncio.sleep(0.01)
        second = WorkItem(request(), loop)
        pool.submit(second)
        return [int((await item.future)["OUT"][0]) for item in (first, second)]

    assert finish(pool, main()) == [worker.thread.ident] * 2


def test_inline_only_for_cpu_instances_without_a_timeout() -> None:
    assert inline_limit_ns("KIND_CPU", 500, 0) == 500_000
    assert inline_limit_ns("KIND_CPU", 0, 0) == 0  # MAX_INLINE_EXECUTION_US 0: off
    assert inline_limit_ns("KIND_CPU", 500, 100) == 0  # EXECUTION_TIMEOUT_MS set
    assert inline_limit_ns("KIND_GPU", 500, 0) == 0
    assert inline_limit_ns("KIND_MODEL", 500, 0) == 0


class Prepared(Recorder):
    """Records the thread of its warm-up (prepare) and whether it was unloaded."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.prepared_on: int | None = None
        self.unloaded = threading.Event()

    def prepare(self) -> None:
        self.prepared_on = threading.get_ident()
        if self.fail:
            raise RuntimeError("warm-up failed")

    def unload(self) -> None:
        self.unloaded.set()


def test_the_instance_is_prepared_on_its_worker_thread_before_start_returns() -> None:
    stats = ModelStats()
    scheduler = DefaultScheduler(stats)
    instance = Prepared()
    worker = InstanceWorker("probe", 0, instance, scheduler, stats, 0, prepare=instance.prepare)
    pool = WorkerPool(scheduler, [worker])
    pool.start()
    assert instance.prepared_on == worker.thread.ident
    assert instance.prepared_on != threading.get_ident()
    assert finish(pool, run(pool)) == worker.thread.ident  # and it serves on that thread


def test_a_failed_preparation_fails_the_start_and_stops_that_worker() -> None:
    stats = ModelStats()
    scheduler = DefaultScheduler(stats)
    good, bad = Prepared(), Prepared(fail=True)
    workers = [
        InstanceWorker(f"probe_{i}", i, instance, scheduler, stats, 0, prepare=instance.prepare)
        for i, instance in enumerate((good, bad))
    ]
    pool = WorkerPool(scheduler, workers)
    with pytest.raises(RuntimeError, match="warm-up failed"):
        pool.start()
    assert bad.unloaded.wait(5)  # its thread ended and released the instance
    workers[1].thread.join(5)
    assert not workers[1].thread.is_alive()
    assert not good.unloaded.is_set()
    pool.stop("probe", 5)  # the caller stops the rest
    assert good.unloaded.wait(5)


class Ordered(Recorder):
    """Records the ids of the requests it runs, in order, and on which thread."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[tuple[str, int]] = []

    def execute(self, batch: Sequence[PreparedRequest]) -> BatchResult:
        self.ran.extend((request.id, threading.get_ident()) for request in batch)
        return super().execute(batch)


def named(request_id: str) -> PreparedRequest:
    return PreparedRequest(request_id, {"IN": np.zeros(1, np.float32)}, 1, ("OUT",))


def ordered_pool() -> tuple[WorkerPool, InstanceWorker, Ordered]:
    """A pool whose executions always count as short once measured: these tests are about the
    order of deferred runs, and on a loaded machine the first (measuring) execution of even
    this instance has taken longer than the default limit, which kept the next one off the loop."""
    stats = ModelStats()
    scheduler = DefaultScheduler(stats)
    instance = Ordered()
    worker = InstanceWorker("probe", 0, instance, scheduler, stats, ALWAYS_SHORT_NS)
    pool = WorkerPool(scheduler, [worker])
    pool.start()
    return pool, worker, instance


def test_requests_after_an_inline_run_in_one_pass_run_back_to_back_in_the_next() -> None:
    """The first request of a pass runs at once; those submitted after it in the same pass
    wait for the next pass and then run one after another, in order, still on the loop."""
    pool, _, instance = ordered_pool()

    async def main() -> list[str]:
        await run(pool)  # the first execution goes to the worker and measures the model
        await asyncio.sleep(0.01)
        instance.ran.clear()
        loop = asyncio.get_running_loop()
        items = [WorkItem(named(f"r{i}"), loop) for i in range(4)]
        for item in items:  # one pass: nothing awaited in between
            pool.submit(item)
        assert [rid for rid, _ in instance.ran] == ["r0"]  # the rest wait for the next pass
        await asyncio.gather(*(item.future for item in items))
        return [rid for rid, _ in instance.ran]

    assert finish(pool, main()) == ["r0", "r1", "r2", "r3"]
    assert {thread for _, thread in instance.ran} == {threading.get_ident()}  # all inline


def test_deferred_requests_queue_in_order_behind_a_busy_instance() -> None:
    """When the instance is busy by the time the deferred requests run, they are queued for
    its worker in their order, and none that is cancelled runs."""
    pool, worker, instance = ordered_pool()

    async def main() -> list[str]:
        await run(pool)
        await asyncio.sleep(0.01)
        instance.ran.clear()
        loop = asyncio.get_running_loop()
        items = [WorkItem(named(f"r{i}"), loop) for i in range(4)]
        for item in items:
            pool.submit(item)
        items[2].future.cancel()  # its client went away while it waited
        with worker.claim:  # the instance is busy when the deferred ones come up
            await asyncio.sleep(0)  # (the next pass: they are queued)
            await asyncio.sleep(0.01)
        await asyncio.gather(items[1].future, items[3].future)
        return [rid for rid, _ in instance.ran]

    assert finish(pool, main()) == ["r0", "r1", "r3"]
    assert [thread for rid, thread in instance.ran if rid != "r0"] == [worker.thread.ident] * 2


def test_deferred_requests_refused_by_an_unloading_version_get_the_error() -> None:
    pool, worker, _ = ordered_pool()

    async def main() -> str:
        await run(pool)
        await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()
        first, second = WorkItem(named("a"), loop), WorkItem(named("b"), loop)
        pool.submit(first)
        pool.submit(second)
        with worker.claim:  # busy: the deferred one must be queued, and the queue is closed
            pool.scheduler.close(0)  # a closed queue refuses
            await asyncio.sleep(0)
            await asyncio.sleep(0.01)
        with pytest.raises(ServerError) as failed:
            await second.future
        return failed.value.message

    assert finish(pool, main()) == "the model is unloading and accepts no new requests"
    assert pool.scheduler.stats.inference["fail"].count == 1
