"""The reference server's scheduler test hooks: hold batching until enough requests wait.

Triton's own tests set ``TRITONSERVER_DELAY_SCHEDULER=N`` so that the batcher forms its first
batch only once N requests are queued (and then batches as usual), which makes the composition
of batches independent of how fast a client sends. ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M``
also waits for M requests in the sequence batcher's backlog (of sequences without a slot).
Testing aids only: unset, nothing is held.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("ptserve.scheduling")

# How often a held batcher looks at its queue again (as the reference does).
POLL_SECONDS = 0.01


def _count(variable: str) -> int:
    text = os.environ.get(variable, "").strip()
    if not text:
        return 0
    try:
        return max(int(text), 0)
    except ValueError:
        log.warning("%s=%r is not a whole number of requests; ignored", variable, text)
        return 0


class Hold:
    """Whether a batcher still waits for its first ``queued`` requests (and ``backlog``
    backlogged ones); once both were reached it never holds again."""

    __slots__ = ("backlog", "queued")

    def __init__(self, queued: int = 0, backlog: int = 0) -> None:
        self.queued = queued
        self.backlog = backlog

    @classmethod
    def from_environment(cls, model: str, sequences: bool = False) -> Hold:
        queued = _count("TRITONSERVER_DELAY_SCHEDULER")
        backlog = _count("TRITONSERVER_BACKLOG_DELAY_SCHEDULER") if sequences else 0
        if queued or backlog:
            log.info(
                "Delaying scheduler for '%s' until %d queued and %d backlogged requests "
                "(TRITONSERVER_DELAY_SCHEDULER, a testing aid)",
                model,
                queued,
                backlog,
            )
        return cls(queued, backlog)

    def holding(self, queued: int, backlog: int = 0) -> bool:
        """True while fewer requests (or backlogged ones) wait than the hook asks for."""
        if not (self.queued or self.backlog):
            return False
        if queued >= self.queued and backlog >= self.backlog:
            self.queued = self.backlog = 0
            return False
        return True
