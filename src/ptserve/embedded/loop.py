"""An event loop on a thread of its own, for the synchronous API: the core runs on asyncio, and
a caller without a loop hands it coroutines and waits for their results."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

try:  # as the command runs: the hop to the loop's thread and back costs less on uvloop
    import uvloop

    _new_loop: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
except ImportError:
    _new_loop = asyncio.new_event_loop

T = TypeVar("T")
P = ParamSpec("P")


class LoopThread:
    """A running event loop on a daemon thread until ``stop``."""

    def __init__(self, name: str = "ptserve-loop") -> None:
        self.loop = _new_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for its result (or exception). Interrupted
        (e.g. Ctrl-C in a notebook), the coroutine is cancelled."""
        if threading.current_thread() is self.thread:
            coroutine.close()
            raise RuntimeError("a synchronous call from the server's own loop would wait forever")
        if not self.running:
            coroutine.close()
            raise RuntimeError("the server is closed")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def call(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a plain function on the loop's thread, where the core's state lives."""

        async def on_loop() -> T:
            return function(*args, **kwargs)

        return self.run(on_loop())

    def stop(self) -> None:
        """Cancel what still runs on the loop (as ``asyncio.run`` does at its end), finish its
        async generators and executor, stop the loop and join its thread."""
        if not self.running:
            return
        self.run(_cancel_the_rest())
        self.run(self.loop.shutdown_asyncgens())
        self.run(self.loop.shutdown_default_executor())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


async def _cancel_the_rest() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
