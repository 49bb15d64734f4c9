"""Running a request's coroutine at once and without a Task (both frontends' hot paths).

A request whose answer is ready is then answered in the same pass over the connection's input.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("ptserve.frontends")


class Running:
    """A coroutine driven by the futures it waits on.

    A Task per request cost about a tenth of a small model's served request (creating and
    registering it, copying the context, scheduling its steps); a request needs none of that.
    ``start`` runs the coroutine up to its first wait; each future it then waits on resumes it
    when done. The catch: there is no current Task while it runs, so it must not use what needs
    one (``asyncio.timeout``, ``TaskGroup``, and ``wait_for`` from Python 3.12); it may create
    Tasks and await them, futures, queues, events and sleeps."""

    __slots__ = ("_cancelling", "_coro", "_loop", "_waiting", "done")

    def __init__(self, coro: Coroutine[Any, Any, None]) -> None:
        self._coro = coro
        self._loop = asyncio.get_running_loop()
        self._waiting: asyncio.Future[Any] | None = None
        self._cancelling = False
        self.done = False

    def step(self, error: BaseException | None = None) -> None:
        """Resume the coroutine (with ``error`` thrown in, if given) up to its next wait."""
        if self._cancelling and error is None:
            error = asyncio.CancelledError()
        self._cancelling = False
        try:
            waiting = self._coro.send(None) if error is None else self._coro.throw(error)
        except (StopIteration, asyncio.CancelledError):
            self.done = True
            return
        except (KeyboardInterrupt, SystemExit):
            self.done = True
            raise
        except BaseException:  # the coroutines given catch what their handlers raise
            self.done = True
            log.exception("a request failed")
            return
        if waiting is None:  # a bare yield (``asyncio.sleep(0)``): go on in the next iteration
            self._loop.call_soon(self.step)
        elif getattr(waiting, "_asyncio_future_blocking", None):
            waiting._asyncio_future_blocking = False
            self._waiting = waiting
            waiting.add_done_callback(self._wake)
        else:
            self._loop.call_soon(self.step, RuntimeError(f"a request awaited {waiting!r}"))

    def _wake(self, future: asyncio.Future[Any]) -> None:
        self._waiting = None
        self.step()  # the coroutine reads the future's result (or its cancellation) itself

    def cancel(self) -> None:
        """The coroutine gets CancelledError where it waits (or at its next step)."""
        if self.done:
            return
        if self._waiting is not None:
            self._waiting.cancel()
        else:
            self._cancelling = True


def start(coro: Coroutine[Any, Any, None]) -> Running | None:
    """Run ``coro`` now, up to its first wait; it goes on as the futures it waits on finish
    (see Running, returned so that it can be cancelled). None when it finished at once."""
    running = Running(coro)
    running.step()
    return None if running.done else running
