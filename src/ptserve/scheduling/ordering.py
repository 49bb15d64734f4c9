"""``preserve_ordering``: answers leave in the order their batches were formed."""

from __future__ import annotations

import threading
from collections.abc import Callable


class OrderedDelivery:
    """Hands out tickets when batches form, and runs deliveries strictly in ticket order.

    With several instances a later batch may finish first; its answers wait for the earlier ones.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._issued = 0
        self._next = 0
        self._waiting: dict[int, Callable[[], None]] = {}

    def ticket(self) -> int:
        """Called under the scheduler's lock, as the batch is formed."""
        ticket = self._issued
        self._issued += 1
        return ticket

    def deliver(self, ticket: int, send: Callable[[], None]) -> None:
        with self._lock:
            self._waiting[ticket] = send
            while self._next in self._waiting:
                self._waiting.pop(self._next)()
                self._next += 1
