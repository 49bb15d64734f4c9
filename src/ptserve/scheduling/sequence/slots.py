"""Live sequences and the batch slots they hold."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ptserve.scheduling.work import WorkItem


@dataclass(slots=True, eq=False)
class Slot:
    """A place for one sequence: a batch row of one instance (direct), or any instance (oldest)."""

    instance: int  # -1: any instance
    row: int
    sequence: Sequence | None = None


@dataclass(slots=True, eq=False)
class Sequence:
    """One correlation id's requests, run strictly one after another."""

    id: int | str
    last_ns: int  # last activity, for the idle timeout
    slot: Slot | None = None
    pending: deque[WorkItem] = field(default_factory=deque)
    busy: bool = False  # a request of it is running
    ended: bool = False  # its END request has arrived
    state: dict[str, np.ndarray] = field(default_factory=dict)  # state input name -> value

    @property
    def ready(self) -> bool:
        """Has a slot, a request waiting, and none running."""
        return self.slot is not None and not self.busy and bool(self.pending)


class SlotTable:
    """Which sequence holds which slot, and the sequences waiting for one, first come first."""

    def __init__(self, slots: list[Slot]) -> None:
        # Fill the first row of every instance before the second, so instances share the load.
        self.slots = sorted(slots, key=lambda s: (s.row, s.instance))
        self.backlog: deque[Sequence] = deque()

    def assign(self, sequence: Sequence) -> None:
        for slot in self.slots:
            if slot.sequence is None:
                slot.sequence = sequence
                sequence.slot = slot
                return
        self.backlog.append(sequence)

    def release(self, sequence: Sequence) -> None:
        """Free the sequence's slot and give it to the longest-waiting sequence."""
        slot = sequence.slot
        sequence.slot = None
        if slot is None:
            return
        slot.sequence = None
        if self.backlog:
            waiting = self.backlog.popleft()
            slot.sequence = waiting
            waiting.slot = slot

    def of_instance(self, instance: int) -> list[Slot]:
        return sorted((s for s in self.slots if s.instance == instance), key=lambda s: s.row)
