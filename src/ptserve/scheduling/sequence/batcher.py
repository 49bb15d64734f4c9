"""The sequence batcher: routes each sequence to one slot and runs its requests one at a time.

``direct``: a slot is a batch row of one instance; that instance runs its ready slots together,
idle rows filled with not-READY filler so a sequence keeps its row. ``oldest``: a slot is a
candidate place; any free instance batches the ready sequences, oldest request first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from ptserve.common.errors import ServerError, invalid_arg, unavailable
from ptserve.common.iospec import ModelIO
from ptserve.common.prepared import OutputMap, PreparedRequest
from ptserve.common.sequence_io import CORRID
from ptserve.common.stats import ModelStats
from ptserve.common.sync import Condition
from ptserve.config.autocomplete import DEFAULT_SEQUENCE_IDLE_US
from ptserve.config.parse import ModelConfig
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.batching import BatchRule
from ptserve.scheduling.hold import POLL_SECONDS, Hold
from ptserve.scheduling.sequence.rows import RowBuilder
from ptserve.scheduling.sequence.slots import Sequence, Slot, SlotTable
from ptserve.scheduling.work import Batch, WorkItem

log = logging.getLogger("ptserve.scheduling")


class SequenceBatcher(Scheduler):
    """Sequences by correlation id, their slots, controls, state and idle release."""

    def __init__(self, stats: ModelStats, io: ModelIO, config: ModelConfig, instances: int) -> None:
        super().__init__(stats)
        settings = config.sequence_batching
        self.model = config.name
        self.io = io
        self.rows = RowBuilder(io, config.name)
        self.idle_ns = (settings.max_sequence_idle_microseconds or DEFAULT_SEQUENCE_IDLE_US) * 1000
        width = max(config.max_batch_size, 1)
        self.oldest = settings.WhichOneof("strategy_choice") == "oldest"
        if self.oldest:
            oldest = settings.oldest
            candidates = oldest.max_candidate_sequences or width * instances
            slots = [Slot(-1, row) for row in range(candidates)]
            self.rule = BatchRule.make(
                width, oldest.preferred_batch_size, oldest.max_queue_delay_microseconds
            )
        else:
            direct = settings.direct
            slots = [Slot(i, row) for i in range(instances) for row in range(width)]
            self.rule = BatchRule.make(width, (), direct.max_queue_delay_microseconds)
            self.min_utilization = float(direct.minimum_slot_utilization)
        self.table = SlotTable(slots)
        self._by_instance = [self.table.of_instance(i) for i in range(instances)]
        # Sequences that take further requests of their id, and every sequence not yet done
        # (an ended one runs its queued requests while a new one of the same id may start).
        self._open: dict[int | str, Sequence] = {}
        self._live: set[Sequence] = set()
        self._cond = Condition()
        self._closed = False
        self._hold = Hold.from_environment(config.name, sequences=True)
        self._string_ids = all(
            c.datatype.is_bytes for c in self.rows.plan.controls if c.kind == CORRID
        )

    # --- the event loop side -------------------------------------------------------------

    def enqueue(self, item: WorkItem) -> None:
        options = item.options
        sequence_id = options.sequence_id
        if not options.in_sequence:
            raise invalid_arg(
                f"inference request to model '{self.model}' must specify a non-zero or "
                "non-empty correlation ID"
            )
        if isinstance(sequence_id, str) and not self._string_ids:
            raise invalid_arg(
                f"inference request for sequence '{sequence_id}' to model '{self.model}': the "
                "model's CORRID control takes integer correlation IDs, got a string"
            )
        if self.io.batching and item.request.batch_size != 1:
            raise invalid_arg(
                f"inference request to model '{self.model}' must specify batch-size 1 due to "
                f"requirements of sequence batcher (sequence {sequence_id} sent batch-size "
                f"{item.request.batch_size})"
            )
        now = time.perf_counter_ns()
        with self._cond:
            if self._closed:
                raise unavailable(f"model '{self.model}' is unloading and accepts no new requests")
            sequence = self._open.get(sequence_id)
            if sequence is None:
                if not options.start:
                    raise invalid_arg(
                        f"inference request for sequence {sequence_id} to model '{self.model}' "
                        f"must specify the START flag on the first request of the sequence "
                        f"(sequence {sequence_id} is not active)"
                    )
                # A new sequence, even while an ended one of the same id still runs: it takes
                # a slot of its own (or waits in the backlog for one).
                sequence = Sequence(sequence_id, now)
                self._open[sequence_id] = sequence
                self._live.add(sequence)
                self.table.assign(sequence)
            elif options.start:
                log.warning(
                    "sequence %s for model '%s' has a conflict. The previous sequence did not "
                    "end before this sequence start. Previous sequence will be terminated early.",
                    sequence_id,
                    self.model,
                )
            sequence.pending.append(item)
            sequence.last_ns = now
            if options.end:  # later requests of this id start a new sequence
                sequence.ended = True
                del self._open[sequence_id]
            self._cond.notify_all()

    # --- the worker side -----------------------------------------------------------------

    def next_batch(self, instance: int) -> Batch | None:
        with self._cond:
            while True:
                now = time.perf_counter_ns()
                wake_ns = self._release_idle(now)
                if not self._closed and self._held():
                    self._cond.wait(POLL_SECONDS)
                    continue
                batch, wait_ns = self._oldest(now) if self.oldest else self._direct(instance, now)
                if batch is not None:
                    return batch
                if self._closed and not self._has_pending():
                    self._cond.notify_all()
                    return None
                waits = [w for w in (wake_ns, wait_ns) if w >= 0]
                self._cond.wait(min(waits) / 1e9 if waits else None)

    def _direct(self, instance: int, now: int) -> tuple[Batch | None, int]:
        slots = self._by_instance[instance]
        ready = [s for s in slots if s.sequence is not None and s.sequence.ready]
        if not ready:
            return None, -1
        if self.rule.delay_ns and not self._closed and len(ready) < len(slots):
            oldest = min(s.sequence.pending[0].enqueue_ns for s in ready if s.sequence)
            deadline = oldest + self.rule.delay_ns
            if len(ready) < self.min_utilization * len(slots) and now < deadline:
                return None, deadline - now
        first = ready[0].sequence
        assert first is not None
        template = first.pending[0].request
        key = self.rows.key(self.rows.row(first.pending[0], first))
        top = max(s.row for s in ready)
        batch = Batch([], [])
        for slot in slots[: top + 1]:
            sequence = slot.sequence
            if sequence is not None and sequence.ready:
                request = self.rows.row(sequence.pending[0], sequence)
                if self.rows.key(request) == key:
                    batch.items.append(sequence.pending.popleft())
                    batch.requests.append(request)
                    batch.context.append(sequence)
                    sequence.busy = True
                    continue
            batch.items.append(None)  # a not-READY row keeps the others in their slots
            batch.requests.append(self.rows.filler(template))
            batch.context.append(None)
        return batch, 0

    def _oldest(self, now: int) -> tuple[Batch | None, int]:
        ready = sorted(
            (s for s in self._live if s.ready),
            key=lambda s: s.pending[0].enqueue_ns,
        )
        rows: dict[int, tuple[Sequence, PreparedRequest]] = {}
        for sequence in ready:
            item = sequence.pending[0]
            request = self.rows.row(item, sequence)
            item.key = self.rows.key(request)
            rows[id(item)] = (sequence, request)
        chosen, wait_ns = self.rule.choose((s.pending[0] for s in ready), now, self._closed)
        if not chosen:
            return None, wait_ns
        batch = Batch([], [])
        for item in chosen:
            sequence, request = rows[id(item)]
            sequence.pending.popleft()
            sequence.busy = True
            batch.items.append(item)
            batch.requests.append(request)
            batch.context.append(sequence)
        return batch, 0

    def finish(self, batch: Batch, results: list[OutputMap | ServerError]) -> None:
        now = time.perf_counter_ns()
        with self._cond:
            for item, result, sequence in zip(batch.items, results, batch.context, strict=True):
                if item is None or not isinstance(sequence, Sequence):
                    continue
                if not isinstance(result, ServerError):
                    self.rows.keep_state(sequence, result, item.request.outputs)
                sequence.busy = False
                sequence.last_ns = now
                if item.options.end and not sequence.pending:
                    self._drop(sequence)
            self._cond.notify_all()
        super().finish(batch, results)

    def close(self, workers: int) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # --- bookkeeping ---------------------------------------------------------------------

    def _drop(self, sequence: Sequence) -> None:
        if self._open.get(sequence.id) is sequence:
            del self._open[sequence.id]
        self._live.discard(sequence)
        if sequence in self.table.backlog:
            self.table.backlog.remove(sequence)
        self.table.release(sequence)

    def _release_idle(self, now: int) -> int:
        """Release sequences idle too long; returns ns until the next may expire (-1: none)."""
        soonest = -1
        for sequence in list(self._live):
            if sequence.busy or sequence.pending or sequence.slot is None:
                continue
            left = sequence.last_ns + self.idle_ns - now
            if left <= 0:
                log.warning(
                    "model '%s': sequence %s was idle for more than %d us and is released",
                    self.model,
                    sequence.id,
                    self.idle_ns // 1000,
                )
                self._drop(sequence)
                self._cond.notify_all()
            elif soonest < 0 or left < soonest:
                soonest = left
        return soonest

    def _held(self) -> bool:
        """The test hook (see hold.py): requests queued in slots, and in the backlog."""
        queued = sum(len(s.pending) for s in self._live if s.slot is not None)
        return self._hold.holding(queued, sum(len(s.pending) for s in self.table.backlog))

    def _has_pending(self) -> bool:
        return any(s.pending for s in self._iter_sequences())

    def _iter_sequences(self) -> Iterator[Sequence]:
        return iter(self._live)
