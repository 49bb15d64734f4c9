"""Per model-version statistics, in the shape of the reference's statistics extension."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Why a request failed, as the metrics' ``reason`` label names it.
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")

# Called with (total, queue, compute_input, compute_infer, compute_output) ns of each success.
SuccessObserver = Callable[[int, int, int, int, int], None]


@dataclass(slots=True)
class Duration:
    """A count and the nanoseconds they took together."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


_INFERENCE_FIELDS = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)


class ModelStats:
    """Counters updated by instance workers and read by the statistics endpoints."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inference = {name: Duration() for name in _INFERENCE_FIELDS}
        self.batches: dict[int, BatchStats] = {}
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        self.failures = dict.fromkeys(FAILURE_REASONS, 0)
        self.observer: SuccessObserver | None = None  # the metrics' summaries, when enabled

    def record_execution(
        self,
        batch_size: int,
        compute_input_ns: int,
        compute_infer_ns: int,
        compute_output_ns: int,
        inferences: int | None = None,
    ) -> None:
        """One batch run: the rows it held and how long its phases took. ``inferences``: its
        rows of real requests, when filler rows (a sequence batch's empty slots) count in its
        size but are no inferences, as the reference counts them."""
        with self._lock:
            self.execution_count += 1
            self.inference_count += batch_size if inferences is None else inferences
            self.last_inference_ms = time.time_ns() // 1_000_000
            stats = self.batches.get(batch_size)
            if stats is None:
                stats = self.batches[batch_size] = BatchStats()
            stats.compute_input.add(compute_input_ns)
            stats.compute_infer.add(compute_infer_ns)
            stats.compute_output.add(compute_output_ns)

    def record_successes(
        self,
        totals_and_queues: list[tuple[int, int]],
        compute_input_ns: int,
        compute_infer_ns: int,
        compute_output_ns: int,
    ) -> None:
        """The requests of one batch answered, each with its total and queue time; each is
        charged the full phases of its batch."""
        count = len(totals_and_queues)
        if not count:
            return
        with self._lock:
            inference = self.inference
            inference["success"].add(sum(t for t, _ in totals_and_queues), count)
            inference["queue"].add(sum(q for _, q in totals_and_queues), count)
            inference["compute_input"].add(compute_input_ns * count, count)
            inference["compute_infer"].add(compute_infer_ns * count, count)
            inference["compute_output"].add(compute_output_ns * count, count)
        observer = self.observer
        if observer is not None:
            for total_ns, queue_ns in totals_and_queues:
                observer(total_ns, queue_ns, compute_input_ns, compute_infer_ns, compute_output_ns)

    def record_failure(self, total_ns: int, reason: str = "BACKEND") -> None:
        """One request failed; ``reason`` is one of FAILURE_REASONS (execution errors: BACKEND)."""
        with self._lock:
            self.inference["fail"].add(total_ns)
            self.failures[reason if reason in self.failures else "OTHER"] += 1
            self.last_inference_ms = time.time_ns() // 1_000_000

    def failure_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.failures)

    def snapshot(self, name: str, version: str) -> dict[str, Any]:
        with self._lock:
            return {
                "name": name,
                "version": version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {k: v.as_dict() for k, v in self.inference.items()},
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": stats.compute_input.as_dict(),
                        "compute_infer": stats.compute_infer.as_dict(),
                        "compute_output": stats.compute_output.as_dict(),
                    }
                    for size, stats in sorted(self.batches.items())
                ],
                "memory_usage": [],
                "response_stats": {},
            }
