"""How many queued requests to run together: the batch-forming rule of the dynamic batcher."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ptserve.scheduling.work import WorkItem


@dataclass(frozen=True, slots=True)
class BatchRule:
    """``max_batch_size``, ``preferred_batch_size`` and ``max_queue_delay``, read at load.

    A batch goes at once when it reaches the largest preferred size or cannot grow (the next
    request does not fit or has other shapes). Otherwise it waits for more requests until the
    oldest has waited ``delay_ns``, then goes at the largest preferred size it reached, or whole.
    """

    max_batch_size: int
    preferred: frozenset[int]
    delay_ns: int

    @classmethod
    def make(cls, max_batch_size: int, preferred: Iterable[int], delay_us: int) -> BatchRule:
        sizes = frozenset(preferred) or frozenset({max_batch_size})
        return cls(max_batch_size, sizes, delay_us * 1000)

    @property
    def max_preferred(self) -> int:
        return max(self.preferred)

    def choose(
        self, queued: Iterable[WorkItem], now_ns: int, flush: bool = False
    ) -> tuple[list[WorkItem], int]:
        """The items to run now (a prefix of ``queued``), else how long to wait (-1: nothing)."""
        chosen: list[WorkItem] = []
        rows = 0
        best = 0
        oldest = now_ns
        blocked = False
        for item in queued:
            size = item.request.batch_size
            if chosen and (item.key != chosen[0].key or rows + size > self.max_batch_size):
                blocked = True
                break
            chosen.append(item)
            rows += size
            oldest = min(oldest, item.enqueue_ns)
            if rows in self.preferred:
                best = len(chosen)
            if rows >= self.max_preferred:
                return chosen, 0
        if not chosen:
            return chosen, -1
        if blocked or flush:
            return chosen, 0
        deadline = oldest + self.delay_ns
        if now_ns >= deadline:
            return (chosen[:best] if best else chosen), 0
        return [], deadline - now_ns
