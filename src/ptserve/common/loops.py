"""The running event loop, found without a system call.

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
