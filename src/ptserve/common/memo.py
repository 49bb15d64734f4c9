"""A bounded memo for what the hot path can work out once and look up afterwards."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    """At most ``limit`` entries; when full it starts afresh (the keys in use come back at once,
    and nothing is spent on keeping an eviction order on every lookup)."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._entries: dict[K, V] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        if len(self._entries) >= self.limit:
            self._entries.clear()
        self._entries[key] = value
