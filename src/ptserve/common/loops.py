"""The event loop: the running one found without a system call, and polling before it sleeps.

On Python 3.11, ``asyncio.get_running_loop()`` checks ``getpid()`` on every call (to notice a
fork), and ``getpid`` is a system call: on a virtual machine it costs microseconds, a measurable
share of a request's budget when it is made once per request. A thread runs at most one loop at
a time, so the loop found once for a thread is the running one for as long as it runs. (A loop
that stops, and then runs on another thread while this one runs a second loop, is found anew
once the other thread asks for it; until then this thread would be answered the first loop.)
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

DEFAULT_IDLE_POLL_US = 500  # see IdlePoll
MAX_IDLE_POLL_US = 10_000

_LOOPS: dict[int, asyncio.AbstractEventLoop] = {}  # thread ident -> the loop it last ran


def running_loop() -> asyncio.AbstractEventLoop:
    """``asyncio.get_running_loop()``, cached per thread; raises RuntimeError outside a loop."""
    thread = threading.get_ident()
    loop = _LOOPS.get(thread)
    if loop is not None and loop.is_running() and not loop.is_closed():
        return loop
    loop = asyncio.get_running_loop()
    for other, seen in list(_LOOPS.items()):  # (a loop runs on one thread at a time)
        if seen is loop or not seen.is_running():
            del _LOOPS[other]
    _LOOPS[thread] = loop
    return loop


class IdlePoll:
    """Keeps the event loop polling for a while after its work runs out, instead of sleeping.

    A loop with nothing to do blocks in ``epoll_wait``; the thread sleeps and, on a virtual
    machine, its CPU halts. Waking costs tens of microseconds, and the code that runs next is
    slower for a while (cold caches), so a client that sends its next request right after an
    answer (a closed loop at concurrency 1) pays that twice per request. ``settle()``, called
    when the last request in flight is answered, keeps one callback re-queued on the loop for
    up to ``window_ns``: while a callback is ready the loop polls its sockets without blocking,
    and a request that arrives meanwhile is read at once. The cost is bounded: at most
    ``window_ns`` of one core's time per burst of requests, nothing while requests run (the
    worker threads keep the core) and nothing once idle.
    """

    def __init__(self, window_ns: int, busy: Callable[[], bool]) -> None:
        self.window_ns = window_ns
        self._busy = busy  # true while requests are in flight: polling stops
        self._deadline = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._polling = False

    @property
    def polling(self) -> bool:
        """Whether the loop is polling (a callback is queued) rather than free to sleep."""
        return self._polling

    def settle(self) -> None:
        """The last request in flight was answered: poll for up to ``window_ns`` from now."""
        if self.window_ns <= 0:
            return
        self._deadline = time.perf_counter_ns() + self.window_ns
        loop = running_loop()
        if not self._polling or loop is not self._loop:  # (a loop that stopped mid-window)
            self._polling = True
            self._loop = loop
            loop.call_soon(self._poll)

    def _poll(self) -> None:
        loop = running_loop()
        if loop is not self._loop:  # a poller left behind on a loop that stopped
            return
        if self._busy() or time.perf_counter_ns() >= self._deadline:
            self._polling = False
            return
        loop.call_soon(self._poll)
