"""How many queued requests to run together: the batch-forming rule of the dynamic batcher."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ptserve.scheduling.work import WorkItem


@dataclass(frozen=True, slots=True)
class BatchRule:
    """``max_batch_size``, ``preferred_batch_size`` and ``max_queue_delay``, read at load, and
    the reference batcher's rule for them.

    The queue is read oldest first while the batch can grow (same shapes, within
    ``max_batch_size``). The largest preferred size the batch can reach goes at once, and so
    does the batch when no preferred size can be reached any more (the next request would pass
    the largest preferred size) or it cannot grow. Otherwise the batch waits for more requests
    until its oldest has waited ``delay_ns``, then goes as it is; without a delay it goes at once.
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

    def completes(self, rows: int) -> bool:
        """Whether a queue of ``rows`` rows may hold a batch that goes now (a worker waiting
        out the delay must look again)."""
        return rows in self.preferred or rows > self.max_preferred

    def choose(
        self, queued: Iterable[WorkItem], now_ns: int, flush: bool = False
    ) -> tuple[list[WorkItem], int]:
        """The items to run now (a prefix of ``queued``), else how long to wait (-1: nothing)."""
        chosen: list[WorkItem] = []
        rows = 0
        best = 0  # items in the preferred (or saturated) prefix found so far
        oldest = now_ns
        blocked = False
        largest = self.max_preferred
        for item in queued:
            size = item.request.batch_size
            if chosen:
                if rows + size > largest and not best:
                    best = len(chosen)  # no preferred size can be reached from here
                if item.key != chosen[0].key or rows + size > self.max_batch_size:
                    blocked = True
                    break
            chosen.append(item)
            rows += size
            oldest = min(oldest, item.enqueue_ns)
            if rows in self.preferred:
                best = len(chosen)
        if not chosen:
            return chosen, -1
        expired = self.delay_ns > 0 and now_ns - oldest >= self.delay_ns
        if best and not expired and not flush:
            return chosen[:best], 0
        if blocked or flush or expired or rows >= largest or not self.delay_ns:
            return chosen, 0
        return [], oldest + self.delay_ns - now_ns
