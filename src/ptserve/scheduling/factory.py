"""Choosing a model's scheduler from its config, once at load."""

from __future__ import annotations

from ptserve.common.iospec import ModelIO
from ptserve.common.stats import ModelStats
from ptserve.config.parse import ModelConfig
from ptserve.scheduling.base import Scheduler
from ptserve.scheduling.batching import BatchRule
from ptserve.scheduling.default import DefaultScheduler
from ptserve.scheduling.dynamic import DynamicBatcher
from ptserve.scheduling.hold import Hold
from ptserve.scheduling.policy import Priorities
from ptserve.scheduling.sequence.batcher import SequenceBatcher


def make_scheduler(
    config: ModelConfig, io: ModelIO, stats: ModelStats, instances: int
) -> Scheduler:
    """Sequence batcher, dynamic batcher, or the default one-at-a-time scheduler."""
    if config.HasField("sequence_batching"):
        return SequenceBatcher(stats, io, config, instances)
    if config.HasField("dynamic_batching"):
        dynamic = config.dynamic_batching
        rule = BatchRule.make(
            max(config.max_batch_size, 1),
            dynamic.preferred_batch_size,
            dynamic.max_queue_delay_microseconds,
        )
        return DynamicBatcher(
            stats,
            io,
            rule,
            Priorities.from_config(config),
            dynamic.preserve_ordering,
            Hold.from_environment(config.name),
        )
    return DefaultScheduler(stats)
