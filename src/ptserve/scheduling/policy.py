"""Queue policies and priority levels, read once from ``dynamic_batching`` at load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ptserve.config.parse import ModelConfig

_DELAY = 1  # ModelQueuePolicy.DELAY


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """What a priority level does with requests that wait too long or find it full."""

    delay_on_timeout: bool = False  # DELAY: move behind the punctual; REJECT: answer 503
    default_timeout_ns: int = 0  # 0: no timeout
    allow_timeout_override: bool = False
    max_queue_size: int = 0  # 0: unlimited

    @classmethod
    def from_proto(cls, policy: Any) -> QueuePolicy:
        """From a ``ModelQueuePolicy`` message."""
        return cls(
            delay_on_timeout=policy.timeout_action == _DELAY,
            default_timeout_ns=int(policy.default_timeout_microseconds) * 1000,
            allow_timeout_override=bool(policy.allow_timeout_override),
            max_queue_size=int(policy.max_queue_size),
        )

    def timeout_ns(self, requested_ns: int) -> int:
        """The timeout of one request: the default, or the client's when it may shorten it."""
        shorter = self.default_timeout_ns == 0 or requested_ns < self.default_timeout_ns
        if self.allow_timeout_override and requested_ns > 0 and shorter:
            return requested_ns
        return self.default_timeout_ns


@dataclass(frozen=True, slots=True)
class Priorities:
    """The priority levels (index 0 = level 1, the highest) and their policies."""

    policies: tuple[QueuePolicy, ...]
    default_level: int  # index into policies

    @classmethod
    def single(cls, policy: QueuePolicy | None = None) -> Priorities:
        return cls((policy or QueuePolicy(),), 0)

    @classmethod
    def from_config(cls, config: ModelConfig) -> Priorities:
        dynamic = config.dynamic_batching
        default = QueuePolicy.from_proto(dynamic.default_queue_policy)
        levels = int(dynamic.priority_levels)
        if levels == 0:
            return cls.single(default)
        policies = tuple(
            QueuePolicy.from_proto(dynamic.priority_queue_policy[level])
            if level in dynamic.priority_queue_policy
            else default
            for level in range(1, levels + 1)
        )
        return cls(policies, max(int(dynamic.default_priority_level), 1) - 1)

    def level_of(self, priority: int) -> int:
        """A request's level: its priority, or the default for 0 and out-of-range values."""
        if 1 <= priority <= len(self.policies):
            return priority - 1
        return self.default_level
