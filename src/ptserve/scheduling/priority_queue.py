"""The waiting room of a batcher: priority levels, each with its policy, size limit and timeouts.

Not thread-safe: the owning scheduler holds its lock around every call. Entries are removed
lazily (an item's ``place`` says whether an entry is still live), so cancelling, expiring and
delaying are O(1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from ptserve.common.errors import unavailable
from ptserve.scheduling.policy import Priorities, QueuePolicy
from ptserve.scheduling.work import Place, WorkItem

QUEUE_FULL = "Exceeds maximum queue size"
TIMEOUT_EXPIRED = "Request timeout expired"


class _Level:
    __slots__ = ("count", "delayed", "policy", "punctual")

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        self.punctual: deque[WorkItem] = deque()
        self.delayed: deque[WorkItem] = deque()
        self.count = 0  # live items, punctual and delayed

    def trim(self) -> None:
        while self.punctual and self.punctual[0].place is not Place.QUEUED:
            self.punctual.popleft()
        while self.delayed and self.delayed[0].place is not Place.DELAYED:
            self.delayed.popleft()


class PriorityQueue:
    """Items in serving order: level 1 first; in a level, punctual items before delayed ones."""

    def __init__(self, priorities: Priorities) -> None:
        self.priorities = priorities
        self._levels = [_Level(policy) for policy in priorities.policies]
        self.count = 0  # live items
        self.rows = 0  # live rows (requests may carry several)

    def push(self, item: WorkItem) -> int:
        """Returns its timeout in ns (0: none). Raises 503 when its level is full."""
        index = self.priorities.level_of(item.level)
        level = self._levels[index]
        policy = level.policy
        if policy.max_queue_size and level.count >= policy.max_queue_size:
            raise unavailable(QUEUE_FULL)
        item.level = index
        item.place = Place.QUEUED
        level.punctual.append(item)
        level.count += 1
        self.count += 1
        self.rows += item.request.batch_size
        return policy.timeout_ns(item.options.timeout_ns)

    def live(self) -> Iterator[WorkItem]:
        """Live items in serving order; cancelled ones are dropped on the way."""
        for level in self._levels:
            for entries, place in ((level.punctual, Place.QUEUED), (level.delayed, Place.DELAYED)):
                for item in entries:
                    if item.place is not place:
                        continue
                    if item.cancelled:
                        self._remove(item, Place.DROPPED)
                        continue
                    yield item

    def take(self, items: list[WorkItem]) -> None:
        """Remove ``items`` (a prefix of :meth:`live`) for a batch."""
        for item in items:
            self._remove(item, Place.TAKEN)
        for level in self._levels:
            level.trim()

    def expire(self, item: WorkItem) -> bool:
        """The item's timeout passed: delay it, or drop it and return True (caller answers 503)."""
        if item.place is not Place.QUEUED:
            return False
        level = self._levels[item.level]
        if level.policy.delay_on_timeout:
            item.place = Place.DELAYED
            level.delayed.append(item)
            return False
        self._remove(item, Place.DROPPED)
        level.trim()
        return True

    def _remove(self, item: WorkItem, place: Place) -> None:
        item.place = place
        self._levels[item.level].count -= 1
        self.count -= 1
        self.rows -= item.request.batch_size
