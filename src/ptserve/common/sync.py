"""A condition variable for the request path.

``threading.Condition`` is interpreted Python: every request takes one several times (a model
version's gate, its batcher's queue), and each ``with`` costs two interpreted calls and a
``wait`` five. This one keeps the standard protocol (a waiter blocks on its own lock, which a
notify releases) on a plain, non-reentrant lock, and is compiled with the request path.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class Condition:
    """``threading.Condition`` over a plain lock: ``with`` takes the lock; ``wait``, ``notify``
    and ``notify_all`` are called with it held, as the standard one requires."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: deque[threading.Lock] = deque()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Release the lock until notified or ``timeout`` seconds pass (None: no limit), then
        take it again; False when the time ran out."""
        waiter = threading.Lock()
        waiter.acquire()
        self._waiters.append(waiter)
        self._lock.release()
        notified = False
        try:
            if timeout is None:
                notified = waiter.acquire()
            elif timeout > 0:
                notified = waiter.acquire(True, timeout)
            else:
                notified = waiter.acquire(False)
            return notified
        finally:
            self._lock.acquire()
            if not notified and waiter in self._waiters:  # (else a notify took it as time ran out)
                self._waiters.remove(waiter)

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait until ``predicate()`` holds or ``timeout`` seconds pass; its last value."""
        deadline = None if timeout is None else time.monotonic() + timeout
        result = predicate()
        while not result:
            remaining = None
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
            self.wait(remaining)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        """Wake up to ``n`` waiters, the longest waiting first."""
        waiters = self._waiters
        while waiters and n > 0:
            waiters.popleft().release()
            n -= 1

    def notify_all(self) -> None:
        self.notify(len(self._waiters))
