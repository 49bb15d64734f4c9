"""The sequence batcher: stateful models, one slot per live sequence."""

from ptserve.scheduling.sequence.batcher import SequenceBatcher

__all__ = ["SequenceBatcher"]
